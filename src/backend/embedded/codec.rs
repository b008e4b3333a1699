//! Versioned records of the embedded file (SPEC section 6), in one place.
//!
//! Each record is one version byte followed by its bincode 2 encoding
//! (standard configuration). Decoding never trusts a stored length: the
//! decoder's allocation limit is derived from the record's own size, so a
//! damaged length prefix gives [`Error::Decode`] rather than a huge
//! allocation or a panic.

use std::fmt::Display;

use bincode::enc::write::{SizeWriter, Writer};
use bincode::{Decode, Encode};

use crate::error::{Error, Result};
use crate::item::Lane;

/// The version byte written before every lease and dead-letter record by
/// this build.
pub(crate) const RECORD_VERSION: u8 = 1;
/// The version byte of item records ([`ItemRecord`], schema 2).
pub(crate) const ITEM_RECORD_VERSION: u8 = 2;

/// Payloads up to this many bytes are kept inline in the item record
/// (schema 2); larger ones are stored raw in the payloads table, so that a
/// claim rewrites a few bytes, not the whole payload.
pub(crate) const INLINE_PAYLOAD_BYTES: usize = 512;

/// An item's metadata (record version 2): its priority tier, and its
/// payload when that is at most [`INLINE_PAYLOAD_BYTES`] (`None`: the
/// payload is in the payloads table). Decoded as this; written through
/// [`ItemRecordRef`], the one layout of the fields on disk.
#[derive(Debug, Clone, PartialEq, Eq, Decode)]
pub(crate) struct ItemRecord {
    pub(crate) flow: String,
    pub(crate) enqueued_at_ms: u64,
    pub(crate) not_before_ms: Option<u64>,
    pub(crate) deliveries: u32,
    pub(crate) priority: u8,
    /// Rate-limit permits a claim takes (SPEC 3, Flow limits).
    pub(crate) cost: u32,
    pub(crate) payload: Option<Vec<u8>>,
}

/// An [`ItemRecord`] as written, borrowing its flow and payload: bincode
/// writes a `&str` as it reads a `String`, and a `&[u8]` as a `Vec<u8>`,
/// so an add encodes the item it was given without copying its flow and
/// payload into a record first (the copies and their frees were about 600
/// instructions an added item).
#[derive(Debug, Clone, Copy, Encode)]
pub(crate) struct ItemRecordRef<'a> {
    pub(crate) flow: &'a str,
    pub(crate) enqueued_at_ms: u64,
    pub(crate) not_before_ms: Option<u64>,
    pub(crate) deliveries: u32,
    pub(crate) priority: u8,
    pub(crate) cost: u32,
    pub(crate) payload: Option<&'a [u8]>,
}

/// An item record of schema 1 (record version 1), read only by the
/// migration to schema 2 (and written by the schema-1 fixture of the
/// tests).
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub(crate) struct ItemRecordV1 {
    pub(crate) flow: String,
    pub(crate) enqueued_at_ms: u64,
    pub(crate) not_before_ms: Option<u64>,
    pub(crate) deliveries: u32,
}

/// The version byte of lease records ([`LeaseRecord`]) written by this
/// build: they carry the item's delivery count (version 2), the claim
/// time apart from the last touch (version 3, schema 6) and the cancel
/// mark (version 4, schema 7).
pub(crate) const LEASE_RECORD_VERSION: u8 = 4;

/// A pending item's lease (record version 4). While an item is pending its
/// delivery count is the lease's `deliveries`, not its item record's: a
/// claim writes the lease only, and every move out of pending that keeps
/// the item writes the count back into its record (SPEC section 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub(crate) struct LeaseRecord {
    /// The claim or the latest touch: the key of `pending_by_time`, from
    /// which the lease's idle time is measured.
    pub(crate) touched_at_ms: u64,
    pub(crate) lease: u64,
    pub(crate) lane: u8,
    pub(crate) deliveries: u32,
    /// The claim that handed the item out, never moved by a touch. A lease
    /// of an older record version, whose only time was its last touch,
    /// reads that time here.
    pub(crate) claimed_at_ms: u64,
    /// Marked by `cancel` (SPEC 3, Cancelling): the holder's next call
    /// ends the item as cancelled. False in a lease of an older version.
    pub(crate) cancelling: bool,
}

/// A lease of record version 3 (schema 6): version 4 without the cancel
/// mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub(crate) struct LeaseRecordV3 {
    pub(crate) touched_at_ms: u64,
    pub(crate) lease: u64,
    pub(crate) lane: u8,
    pub(crate) deliveries: u32,
    pub(crate) claimed_at_ms: u64,
}

/// A lease of record version 2 (schemas 2 to 5): one time, set by the
/// claim and reset by every touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub(crate) struct LeaseRecordV2 {
    pub(crate) claimed_at_ms: u64,
    pub(crate) lease: u64,
    pub(crate) lane: u8,
    pub(crate) deliveries: u32,
}

/// A lease of record version 1, written by builds whose claims counted the
/// delivery in the item record: read as a [`LeaseRecord`] whose count is
/// the item record's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub(crate) struct LeaseRecordV1 {
    pub(crate) claimed_at_ms: u64,
    pub(crate) lease: u64,
    pub(crate) lane: u8,
}

/// Encode a lease (version [`LEASE_RECORD_VERSION`]).
pub(crate) fn encode_lease(lease: &LeaseRecord) -> Result<Vec<u8>> {
    encode_as(LEASE_RECORD_VERSION, lease)
}

/// Decode a lease of any version: `Ok((lease, true))` for a version-1
/// lease, whose `deliveries` (0 here) the caller takes from the item
/// record. A lease of version 1 or 2 has one time, its last touch, which
/// stands for its claim time too.
///
/// # Errors
///
/// As [`decode`].
pub(crate) fn decode_lease(what: impl Display, bytes: &[u8]) -> Result<(LeaseRecord, bool)> {
    if bytes.first() == Some(&RECORD_VERSION) {
        let v1: LeaseRecordV1 = decode(&what, bytes)?;
        return Ok((
            LeaseRecord {
                touched_at_ms: v1.claimed_at_ms,
                lease: v1.lease,
                lane: v1.lane,
                deliveries: 0,
                claimed_at_ms: v1.claimed_at_ms,
                cancelling: false,
            },
            true,
        ));
    }
    if bytes.first() == Some(&2) {
        let v2: LeaseRecordV2 = decode_as(2, &what, bytes)?;
        return Ok((
            LeaseRecord {
                touched_at_ms: v2.claimed_at_ms,
                lease: v2.lease,
                lane: v2.lane,
                deliveries: v2.deliveries,
                claimed_at_ms: v2.claimed_at_ms,
                cancelling: false,
            },
            false,
        ));
    }
    if bytes.first() == Some(&3) {
        let v3: LeaseRecordV3 = decode_as(3, &what, bytes)?;
        return Ok((
            LeaseRecord {
                touched_at_ms: v3.touched_at_ms,
                lease: v3.lease,
                lane: v3.lane,
                deliveries: v3.deliveries,
                claimed_at_ms: v3.claimed_at_ms,
                cancelling: false,
            },
            false,
        ));
    }
    Ok((decode_as(LEASE_RECORD_VERSION, what, bytes)?, false))
}

/// A flow's limit record (SPEC 3, Flow limits): the [`FlowState`]
/// fields, and the entries of the heads and timer indexes that stand for
/// it, so that they can be found again and removed.
///
/// [`FlowState`]: crate::limit::FlowState
#[derive(Debug, Clone, Copy, PartialEq, Eq, Encode, Decode)]
pub(crate) struct LimitRecord {
    pub(crate) state: [u64; 8],
    /// The flow's heads-index keys (rank, position), due lane then backlog.
    pub(crate) heads: [Option<(i64, u64)>; 2],
    /// The flow's timer, ms.
    pub(crate) timer: Option<u64>,
}

/// A dead letter's reason and time.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub(crate) struct DeadRecord {
    pub(crate) id: u64,
    pub(crate) reason: String,
    pub(crate) failed_at_ms: u64,
}

/// An outcome record's `kind`: done (with its result).
pub(crate) const OUTCOME_DONE: u8 = 0;
/// An outcome record's `kind`: dead-lettered (with its reason).
pub(crate) const OUTCOME_DEAD: u8 = 1;
/// An outcome record's `kind`: cancelled (schema 7).
pub(crate) const OUTCOME_CANCELLED: u8 = 2;

/// An item's outcome (SPEC 3, Outcomes and progress): done with `result`,
/// dead-lettered with `reason`, or cancelled; kept until `expires_at_ms`.
/// `kind` was the bool `dead` up to schema 6: bincode writes a bool as the
/// byte 0 or 1, which read as the same kinds here, so the record kept its
/// version byte; schema 7 adds kind 2.
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub(crate) struct OutcomeRecord {
    pub(crate) kind: u8,
    pub(crate) result: Vec<u8>,
    pub(crate) reason: String,
    pub(crate) at_ms: u64,
    pub(crate) expires_at_ms: u64,
}

/// A finished item kept by its state's retention (SPEC 3, History;
/// schema 8): the item as it finished (its delivery count the last
/// lease's), the ack's result (`Some`) for a completed item or `None` for
/// a cancelled one, and the claim of its last delivery. Its finish time is
/// its run's ([`HistoryRun`]).
#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
pub(crate) struct HistoryRecord {
    pub(crate) id: u64,
    pub(crate) flow: String,
    pub(crate) enqueued_at_ms: u64,
    pub(crate) not_before_ms: Option<u64>,
    pub(crate) deliveries: u32,
    pub(crate) priority: u8,
    pub(crate) cost: u32,
    pub(crate) payload: Vec<u8>,
    pub(crate) result: Option<Vec<u8>>,
    pub(crate) claimed_at_ms: Option<u64>,
}

/// The bytes before a history run's records: how many it holds and its
/// last (highest) id, each u64 little endian, so that a read can skip or
/// count a run without decoding it.
pub(crate) const HISTORY_RUN_HEADER: usize = 16;

/// Encode a run of finished items (ascending ids, one finish time): the
/// header ([`HISTORY_RUN_HEADER`]) and the records (record version 1).
///
/// # Errors
///
/// As [`encode`].
pub(crate) fn encode_history_run(records: &[HistoryRecord]) -> Result<Vec<u8>> {
    let body = encode(&records)?;
    let last = records.last().map_or(0, |r| r.id);
    let mut out = Vec::with_capacity(HISTORY_RUN_HEADER + body.len());
    out.extend_from_slice(&(records.len() as u64).to_le_bytes());
    out.extend_from_slice(&last.to_le_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// A history run's header: (items, last id).
///
/// # Errors
///
/// `Decode` for a value shorter than the header.
pub(crate) fn history_run_header(what: impl Display, bytes: &[u8]) -> Result<(u64, u64)> {
    let word = |at: usize| -> Option<u64> {
        let b: [u8; 8] = bytes.get(at..at + 8)?.try_into().ok()?;
        Some(u64::from_le_bytes(b))
    };
    match (word(0), word(8)) {
        (Some(n), Some(last)) => Ok((n, last)),
        _ => Err(Error::Decode {
            what: what.to_string(),
            detail: format!("a history run of {} bytes has no header", bytes.len()),
        }),
    }
}

/// A history run's records.
///
/// # Errors
///
/// As [`history_run_header`] and [`decode`].
pub(crate) fn decode_history_run(what: impl Display, bytes: &[u8]) -> Result<Vec<HistoryRecord>> {
    history_run_header(&what, bytes)?;
    decode(what, bytes.get(HISTORY_RUN_HEADER..).unwrap_or_default())
}

pub(crate) fn lane_to_u8(lane: Lane) -> u8 {
    match lane {
        Lane::Backlog => 0,
        Lane::Due => 1,
        Lane::Parked => 2,
    }
}

pub(crate) fn lane_from_u8(v: u8, what: impl Display) -> Result<Lane> {
    match v {
        0 => Ok(Lane::Backlog),
        1 => Ok(Lane::Due),
        2 => Ok(Lane::Parked),
        other => Err(Error::Decode {
            what: what.to_string(),
            detail: format!("unknown lane {other}"),
        }),
    }
}

/// Encode `value` as a version byte plus bincode.
///
/// # Errors
///
/// `Storage` if bincode refuses the value. Not `InvalidInput`: an operation
/// encodes records after it may have written others in the same
/// transaction, and group commit takes `InvalidInput` to mean "wrote
/// nothing", which would commit the half-done operation.
pub(crate) fn encode<T: Encode>(value: &T) -> Result<Vec<u8>> {
    encode_as(RECORD_VERSION, value)
}

/// Encode an item record (version [`ITEM_RECORD_VERSION`]).
///
/// # Errors
///
/// As [`encode`].
pub(crate) fn encode_item(value: &ItemRecord) -> Result<Vec<u8>> {
    encode_item_ref(&ItemRecordRef {
        flow: &value.flow,
        enqueued_at_ms: value.enqueued_at_ms,
        not_before_ms: value.not_before_ms,
        deliveries: value.deliveries,
        priority: value.priority,
        cost: value.cost,
        payload: value.payload.as_deref(),
    })
}

/// Encode an item record from borrowed parts (an add's new item).
///
/// # Errors
///
/// As [`encode`].
pub(crate) fn encode_item_ref(value: &ItemRecordRef<'_>) -> Result<Vec<u8>> {
    encode_as(ITEM_RECORD_VERSION, value)
}

/// Decode an item record written by [`encode_item`].
///
/// # Errors
///
/// As [`decode`].
pub(crate) fn decode_item(what: impl Display, bytes: &[u8]) -> Result<ItemRecord> {
    decode_as(ITEM_RECORD_VERSION, what, bytes)
}

/// The flow of an item record written by [`encode_item`], decoded
/// without the rest of the record (the flow is its first field): what a
/// claim or an ack with flow limits needs to know of an item it does not
/// otherwise read (SPEC 3, Flow limits).
///
/// # Errors
///
/// [`Error::Decode`] for an empty record, an unknown version byte or a
/// flow that is not a valid encoding. The rest of the record is not
/// checked here; the read that hands the item out decodes it whole.
pub(crate) fn decode_item_flow(what: impl Display, bytes: &[u8]) -> Result<String> {
    Ok(decode_front::<String>(ITEM_RECORD_VERSION, what, bytes)?.0)
}

/// Encode `value` after the version byte `version`.
pub(crate) fn encode_as<T: Encode>(version: u8, value: &T) -> Result<Vec<u8>> {
    // One allocation of the record's exact size: the version byte pushed
    // in front of a body encoded by `encode_to_vec` grew the vector again
    // (and freed the body), about 400 instructions a record, 5% of an add.
    let config = bincode::config::standard();
    let err = |e| Error::storage("encoding a record", e);
    let mut size = SizeWriter::default();
    bincode::encode_into_writer(value, &mut size, config).map_err(err)?;
    let mut out = Vec::with_capacity(1 + size.bytes_written);
    out.push(version);
    bincode::encode_into_writer(value, Append(&mut out), config).map_err(err)?;
    Ok(out)
}

/// A bincode writer that appends to a vector.
struct Append<'a>(&'a mut Vec<u8>);

impl Writer for Append<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::result::Result<(), bincode::error::EncodeError> {
        self.0.extend_from_slice(bytes);
        Ok(())
    }
}

macro_rules! decode_with_limit {
    ($body:expr, $len:expr, $($limit:literal),+) => {{
        $(
            if $len <= $limit {
                return bincode::decode_from_slice(
                    $body,
                    bincode::config::standard().with_limit::<$limit>(),
                );
            }
        )+
        bincode::decode_from_slice($body, bincode::config::standard().with_limit::<LARGEST_LIMIT>())
    }};
}

/// The allocation limit for the largest records: 16 GiB where `usize` holds
/// it, else the whole address space (a 32-bit target cannot hold a record
/// near either). Computed in `u64` so that it never overflows `usize`.
const LARGEST_LIMIT: usize = {
    const WANT: u64 = 1 << 34;
    if WANT > usize::MAX as u64 {
        usize::MAX
    } else {
        WANT as usize
    }
};

fn decode_body<T: Decode<()>>(
    body: &[u8],
) -> std::result::Result<(T, usize), bincode::error::DecodeError> {
    // Containers are claimed at their element size (at most 8 bytes for our
    // records), so a limit of 8x the body (rounded up) never refuses a record
    // this build wrote, and never allows an allocation far past the input.
    let need = body.len().saturating_mul(8).max(64);
    decode_with_limit!(
        body, need, 64, 1024, 16384, 262144, 4194304, 67108864, 1073741824
    )
}

/// Decode a record written by [`encode`]. `what` names the record in the
/// error (table and key).
///
/// # Errors
///
/// [`Error::Decode`] for an empty record, an unknown version byte, bytes
/// that are not a valid encoding, or trailing bytes.
pub(crate) fn decode<T: Decode<()>>(what: impl Display, bytes: &[u8]) -> Result<T> {
    decode_as(RECORD_VERSION, what, bytes)
}

/// Decode a record whose version byte must be `expected`.
///
/// # Errors
///
/// As [`decode`].
pub(crate) fn decode_as<T: Decode<()>>(
    expected: u8,
    what: impl Display,
    bytes: &[u8],
) -> Result<T> {
    let (value, used, len) = decode_front::<T>(expected, &what, bytes)?;
    if used != len {
        return Err(Error::Decode {
            what: what.to_string(),
            detail: format!("{} trailing bytes", len - used),
        });
    }
    Ok(value)
}

/// Decode a `T` from the front of a record whose version byte must be
/// `expected`: the value, the body bytes it took and the body's length.
fn decode_front<T: Decode<()>>(
    expected: u8,
    what: impl Display,
    bytes: &[u8],
) -> Result<(T, usize, usize)> {
    let fail = |detail: String| Error::Decode {
        what: what.to_string(),
        detail,
    };
    let (&version, body) = bytes
        .split_first()
        .ok_or_else(|| fail("empty record".to_string()))?;
    if version != expected {
        return Err(fail(format!(
            "record version {version}, this build reads version {expected}"
        )));
    }
    let (value, used) = decode_body::<T>(body).map_err(|e| fail(e.to_string()))?;
    Ok((value, used, body.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_record_written_from_borrowed_parts_reads_back_as_the_owned_one() {
        for payload in [None, Some(Vec::new()), Some(b"inline \x00\xff".to_vec())] {
            for (flow, not_before_ms) in [("", None), ("flow-\u{e9}", Some(u64::MAX))] {
                let owned = ItemRecord {
                    flow: flow.to_string(),
                    enqueued_at_ms: 1 << 40,
                    not_before_ms,
                    deliveries: 0,
                    priority: 255,
                    cost: 70_000,
                    payload: payload.clone(),
                };
                let borrowed = ItemRecordRef {
                    flow,
                    enqueued_at_ms: owned.enqueued_at_ms,
                    not_before_ms,
                    deliveries: 0,
                    priority: 255,
                    cost: 70_000,
                    payload: payload.as_deref(),
                };
                let bytes = encode_item_ref(&borrowed).unwrap();
                assert_eq!(decode_item("x", &bytes).unwrap(), owned);
            }
        }
    }

    #[test]
    fn item_record_round_trips() {
        let r = ItemRecord {
            flow: "f".into(),
            enqueued_at_ms: 5,
            not_before_ms: Some(9),
            deliveries: 2,
            priority: 3,
            cost: 2,
            payload: Some(b"inline".to_vec()),
        };
        let bytes = encode_item(&r).unwrap();
        assert_eq!(decode_item("x", &bytes).unwrap(), r);
        assert_eq!(decode_item_flow("x", &bytes).unwrap(), "f");
        assert!(decode_item_flow("x", &bytes[..1]).is_err());
        assert!(decode_item_flow("x", &[]).is_err());
        // A schema-1 record is not an item record of this version.
        let mut v1 = bytes.clone();
        v1[0] = RECORD_VERSION;
        assert!(decode_item("x", &v1).is_err());
    }

    #[test]
    fn huge_length_prefix_is_a_decode_error_not_an_allocation() {
        // Version byte, then a string length claiming u64::MAX-ish bytes.
        let bytes = [
            RECORD_VERSION,
            0xfd,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0x7f,
        ];
        assert!(matches!(
            decode::<ItemRecord>("x", &bytes),
            Err(Error::Decode { .. })
        ));
    }

    #[test]
    fn unknown_version_and_trailing_bytes_are_refused() {
        let r = DeadRecord {
            id: 1,
            reason: "r".into(),
            failed_at_ms: 2,
        };
        let mut bytes = encode(&r).unwrap();
        bytes.push(0);
        assert!(decode::<DeadRecord>("x", &bytes).is_err());
        bytes.pop();
        bytes[0] = 9;
        assert!(decode::<DeadRecord>("x", &bytes).is_err());
        assert!(decode::<DeadRecord>("x", &[]).is_err());
    }
}
