//! The type-erased form of [`WorkQueue`]: [`BoxQueue`], a run-time choice of
//! backend behind one object-safe method, [`WorkQueue::call`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::WorkQueue;
use crate::error::Result;
use crate::request::{Reply, Request};

/// A boxed future, as the object-safe form of [`WorkQueue::call`] returns
/// and the test factories of `testing` take.
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))]
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The object-safe form of [`WorkQueue`], implemented for every
/// `WorkQueue`: what [`BoxQueue`] holds.
trait DynWorkQueue: Send + Sync {
    fn call(&self, request: Request) -> BoxFuture<'_, Result<Reply>>;
    fn max_deliveries(&self) -> u32;
}

impl<Q: WorkQueue> DynWorkQueue for Q {
    fn call(&self, request: Request) -> BoxFuture<'_, Result<Reply>> {
        Box::pin(WorkQueue::call(self, request))
    }
    fn max_deliveries(&self) -> u32 {
        WorkQueue::max_deliveries(self)
    }
}

/// A queue whose backend is chosen at run time (the CLI picks it from
/// flags). Cheap to clone: clones share one handle (one consumer).
///
/// # Examples
///
/// ```
/// use workjournal::{BoxQueue, MemoryQueue, NewItem, WorkQueue};
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let queue = BoxQueue::new(MemoryQueue::new(Default::default()));
/// let added = queue.add(NewItem::new(b"hello".to_vec())).await?;
/// assert_eq!(added.id, 1);
/// # Ok::<(), workjournal::Error>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct BoxQueue {
    inner: Arc<dyn DynWorkQueue>,
}

impl std::fmt::Debug for BoxQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoxQueue").finish_non_exhaustive()
    }
}

impl BoxQueue {
    /// Erase the type of `queue`.
    pub fn new(queue: impl WorkQueue + 'static) -> Self {
        BoxQueue {
            inner: Arc::new(queue),
        }
    }
}

impl WorkQueue for BoxQueue {
    fn call(&self, request: Request) -> impl Future<Output = Result<Reply>> + Send {
        self.inner.call(request)
    }
    fn max_deliveries(&self) -> u32 {
        self.inner.max_deliveries()
    }
}
