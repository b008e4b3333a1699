//! Test support (feature `testing`): where every item is, and every table
//! as text, read on the writer thread.

use std::collections::BTreeMap;

use super::writer::{Op, Reply};
use super::{EmbeddedQueue, unexpected};
use crate::error::Result;

impl EmbeddedQueue {
    /// Where every item is, by a full scan of the file's state indexes on
    /// the writer thread (test support, feature `testing`): for invariant
    /// checks against [`Stats`](crate::Stats) and against what a test knows was
    /// acknowledged. An id with two entries is in two states (a bug); an id
    /// with none has an item record that no state names (a bug).
    ///
    /// # Errors
    ///
    /// `Corrupt` if an index names an id without an item record; `Decode`
    /// for an unreadable dead-letter record; storage failures.
    #[cfg(feature = "testing")]
    pub async fn locations(&self) -> Result<BTreeMap<u64, Vec<crate::browse::ItemState>>> {
        expect_reply!(self, Op::Locations, Reply::Locations(m) => m)
    }

    /// Every table of the file as text, table by table, leaving out the
    /// orphan index that each open rewrites (test support, feature
    /// `testing`): two queues hold exactly the same state when their dumps
    /// are equal. Power-loss tests compare a reopened file with the state
    /// after the last acknowledged commit.
    ///
    /// # Errors
    ///
    /// Storage failures only.
    #[cfg(feature = "testing")]
    pub async fn dump_tables(&self) -> Result<BTreeMap<String, Vec<String>>> {
        expect_reply!(self, Op::Dump, Reply::Dump(m) => m)
    }

    /// Where every item is, checked strictly (test support, feature
    /// `testing`): each id in exactly one state, the lease index equal to the
    /// leases, every index naming a stored item and every item named once.
    /// The model tests compare this with the reference model.
    ///
    /// # Errors
    ///
    /// `Corrupt` naming the first broken invariant; storage failures.
    #[cfg(feature = "testing")]
    pub async fn audit(&self) -> Result<BTreeMap<u64, crate::browse::ItemState>> {
        expect_reply!(self, Op::Audit, Reply::Audit(m) => m)
    }
}
