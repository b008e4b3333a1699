//! Target `decode_record`: the embedded file's record decoders.

// A broken contract panics: that panic is what the fuzzer reports.
#![allow(clippy::panic)]

use crate::backend::embedded::codec::{self, DeadRecord, ItemRecordV1, LeaseRecord};
use crate::error::Error;

/// Target `decode_record`: `bytes` into every stored-record decoder of the
/// embedded file (SPEC section 6) gives a value or `Error::Decode`, never a
/// panic; what decodes encodes back to itself.
///
/// # Panics
///
/// On any other error, or a record that does not round-trip.
pub fn decode_record(bytes: &[u8]) {
    fn check<T>(bytes: &[u8])
    where
        T: bincode::Encode + bincode::Decode<()> + PartialEq + std::fmt::Debug,
    {
        match codec::decode::<T>("fuzz", bytes) {
            Ok(v) => {
                let again = codec::encode(&v)
                    .and_then(|b| codec::decode::<T>("fuzz", &b))
                    .map_err(|e| e.to_string());
                assert_eq!(again.as_ref(), Ok(&v), "record does not round-trip");
            }
            Err(Error::Decode { .. }) => {}
            Err(other) => panic!("decoder gave a non-Decode error: {other:?}"),
        }
    }
    check::<ItemRecordV1>(bytes);
    // Item records are written from borrowed parts (`ItemRecordRef`) and
    // read as `ItemRecord`: what decodes must come back through both.
    match codec::decode_item("fuzz", bytes) {
        Ok(v) => {
            let again = codec::encode_item(&v)
                .and_then(|b| codec::decode_item("fuzz", &b))
                .map_err(|e| e.to_string());
            assert_eq!(again.as_ref(), Ok(&v), "item record does not round-trip");
        }
        Err(Error::Decode { .. }) => {}
        Err(other) => panic!("item decoder gave a non-Decode error: {other:?}"),
    }
    check::<LeaseRecord>(bytes);
    check::<DeadRecord>(bytes);
    if let Ok(lease) = codec::decode::<LeaseRecord>("fuzz", bytes) {
        match codec::lane_from_u8(lease.lane, "fuzz") {
            Ok(_) | Err(Error::Decode { .. }) => {}
            Err(other) => panic!("lane decoder gave a non-Decode error: {other:?}"),
        }
    }
}
