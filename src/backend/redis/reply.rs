//! Reading script replies without trusting them: every shape or number that
//! is not what the scripts write becomes an error, never a panic.

use redis::Value;

use crate::error::{Error, Result};
use crate::item::{Added, Claimed, Item, Lane, Receipt};

fn bad(what: &str, detail: impl Into<String>) -> Error {
    Error::Decode {
        what: format!("redis reply ({what})"),
        detail: detail.into(),
    }
}

/// The elements of an array reply (`Nil` reads as empty).
pub(crate) fn array<'a>(v: &'a Value, what: &str) -> Result<&'a [Value]> {
    match v {
        Value::Array(a) | Value::Set(a) => Ok(a),
        Value::Nil => Ok(&[]),
        Value::ServerError(e) => Err(Error::backend(format!("redis error in {what}: {e:?}"))),
        other => Err(bad(what, format!("expected an array, got {other:?}"))),
    }
}

/// Element `i` of `a`.
pub(crate) fn at<'a>(a: &'a [Value], i: usize, what: &str) -> Result<&'a Value> {
    a.get(i)
        .ok_or_else(|| bad(what, format!("missing element {i} of {}", a.len())))
}

/// Raw bytes of a string reply (`Nil` reads as empty).
pub(crate) fn bytes(v: &Value, what: &str) -> Result<Vec<u8>> {
    match v {
        Value::BulkString(b) => Ok(b.clone()),
        Value::SimpleString(s) => Ok(s.clone().into_bytes()),
        Value::Int(i) => Ok(i.to_string().into_bytes()),
        Value::Okay => Ok(b"OK".to_vec()),
        Value::Nil => Ok(Vec::new()),
        other => Err(bad(what, format!("expected a string, got {other:?}"))),
    }
}

/// A UTF-8 string reply.
pub(crate) fn text(v: &Value, what: &str) -> Result<String> {
    String::from_utf8(bytes(v, what)?).map_err(|e| bad(what, e.to_string()))
}

/// An integer reply, given as an integer or as decimal text.
pub(crate) fn int(v: &Value, what: &str) -> Result<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        other => {
            let t = text(other, what)?;
            t.trim()
                .parse::<i64>()
                .map_err(|e| bad(what, format!("{t:?} is not an integer: {e}")))
        }
    }
}

/// A non-negative integer reply.
pub(crate) fn uint(v: &Value, what: &str) -> Result<u64> {
    let i = int(v, what)?;
    u64::try_from(i).map_err(|_| bad(what, format!("{i} is negative")))
}

/// A non-negative integer reply, or `None` for `""`/`Nil`.
pub(crate) fn opt_uint(v: &Value, what: &str) -> Result<Option<u64>> {
    match v {
        Value::Nil => Ok(None),
        Value::BulkString(b) if b.is_empty() => Ok(None),
        other => uint(other, what).map(Some),
    }
}

pub(crate) fn u32_of(v: &Value, what: &str) -> Result<u32> {
    let n = uint(v, what)?;
    u32::try_from(n).map_err(|_| bad(what, format!("{n} does not fit in u32")))
}

pub(crate) fn lane(v: &Value) -> Result<Lane> {
    match text(v, "lane")?.as_str() {
        "backlog" => Ok(Lane::Backlog),
        "due" => Ok(Lane::Due),
        "parked" => Ok(Lane::Parked),
        other => Err(bad("lane", format!("unknown lane {other:?}"))),
    }
}

/// An item as `{id, flow, payload, enq, nb, dlv, ...}`, its priority tier
/// at `priority_at` (missing or empty: 0, as in a hash written before
/// priorities).
pub(crate) fn item(v: &Value, priority_at: usize) -> Result<Item> {
    let a = array(v, "item")?;
    let priority = match a.get(priority_at) {
        None => 0,
        Some(p) => match opt_uint(p, "item priority")? {
            None => 0,
            Some(n) => u8::try_from(n)
                .map_err(|_| bad("item priority", format!("{n} does not fit in u8")))?,
        },
    };
    // SPEC 3, Flow limits: the cost in permits right after the tier
    // (missing or empty: 1).
    let cost = match a.get(priority_at + 1) {
        None => 1,
        Some(c) => match opt_uint(c, "item cost")? {
            None => 1,
            Some(n) => u32::try_from(n)
                .map_err(|_| bad("item cost", format!("{n} does not fit in u32")))?
                .max(1),
        },
    };
    Ok(Item {
        priority,
        cost,
        id: uint(at(a, 0, "item")?, "item id")?,
        flow: text(at(a, 1, "item")?, "item flow")?,
        payload: bytes(at(a, 2, "item")?, "item payload")?,
        enqueued_at_ms: uint(at(a, 3, "item")?, "item enqueued_at")?,
        not_before_ms: opt_uint(at(a, 4, "item")?, "item not_before")?,
        deliveries: u32_of(at(a, 5, "item")?, "item deliveries")?,
    })
}

/// A claim as `{id, flow, payload, enq, nb, dlv, lane, claimed_at, lease,
/// priority}`.
pub(crate) fn claimed(v: &Value) -> Result<Claimed> {
    let item = item(v, 9)?;
    let a = array(v, "claim")?;
    let lane = lane(at(a, 6, "claim")?)?;
    let claimed_at_ms = uint(at(a, 7, "claim")?, "claimed_at")?;
    let lease = uint(at(a, 8, "claim")?, "lease")?;
    Ok(Claimed {
        receipt: Receipt {
            id: item.id,
            delivery: item.deliveries,
            lease,
        },
        item,
        lane,
        claimed_at_ms,
    })
}

/// A list of claims.
pub(crate) fn claims(v: &Value) -> Result<Vec<Claimed>> {
    array(v, "claims")?.iter().map(claimed).collect()
}

/// The ids of an add of `n` items from the add script's reply: the fresh
/// items took `first`, `first + 1`, ... in call order; `duplicates` is a
/// flat list of (index in the call, id first added under the key).
/// Errors: an index out of the call, an index given twice, or more fresh
/// items than the ids after `first` can hold.
pub(crate) fn added(n: usize, first: u64, duplicates: &[Value]) -> Result<Vec<Added>> {
    let mut dup: Vec<Option<u64>> = vec![None; n];
    for pair in duplicates.chunks(2) {
        let [i, id] = pair else {
            return Err(bad("add duplicates", "an index without an id"));
        };
        let i = uint(i, "add duplicate index")?;
        let slot = usize::try_from(i)
            .ok()
            .and_then(|i| dup.get_mut(i))
            .ok_or_else(|| bad("add duplicates", format!("index {i} of {n} items")))?;
        if slot.replace(uint(id, "add duplicate id")?).is_some() {
            return Err(bad("add duplicates", format!("index {i} given twice")));
        }
    }
    let mut fresh = 0u64;
    dup.into_iter()
        .map(|d| match d {
            Some(id) => Ok(Added {
                id,
                duplicate: true,
            }),
            None => {
                let id = first
                    .checked_add(fresh)
                    .ok_or_else(|| bad("add", "ids past u64::MAX"))?;
                fresh += 1;
                Ok(Added {
                    id,
                    duplicate: false,
                })
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_replies_are_errors_not_panics() {
        assert!(claimed(&Value::Int(3)).is_err());
        assert!(claimed(&Value::Array(vec![Value::Int(1)])).is_err());
        assert!(uint(&Value::Int(-1), "x").is_err());
        assert!(uint(&Value::BulkString(b"abc".to_vec()), "x").is_err());
        assert_eq!(opt_uint(&Value::BulkString(Vec::new()), "x").unwrap(), None);
        let good = Value::Array(vec![
            Value::BulkString(b"7".to_vec()),
            Value::BulkString(b"f".to_vec()),
            Value::BulkString(vec![0, 255]),
            Value::BulkString(b"10".to_vec()),
            Value::BulkString(Vec::new()),
            Value::Int(1),
            Value::BulkString(b"due".to_vec()),
            Value::BulkString(b"20".to_vec()),
            Value::Int(5),
        ]);
        let c = claimed(&good).unwrap();
        assert_eq!(c.item.id, 7);
        assert_eq!(c.item.payload, vec![0, 255]);
        assert_eq!(c.lane, Lane::Due);
        assert_eq!(c.receipt.lease, 5);
    }

    // The add script answers the first fresh id and the duplicates only;
    // the fresh ids count up from it past the duplicates, and a reply that
    // could not come from the script is an error.
    #[test]
    fn add_replies_count_fresh_ids_past_the_duplicates() {
        let s = |t: &str| Value::BulkString(t.as_bytes().to_vec());
        let a = added(3, 10, &[s("1"), s("4")]).unwrap();
        let got: Vec<(u64, bool)> = a.iter().map(|a| (a.id, a.duplicate)).collect();
        assert_eq!(got, vec![(10, false), (4, true), (11, false)]);
        assert!(
            added(2, 1, &[s("2"), s("4")]).is_err(),
            "index out of the call"
        );
        assert!(added(2, 1, &[s("0"), s("4"), s("0"), s("5")]).is_err());
        assert!(added(2, 1, &[s("0")]).is_err(), "index without an id");
        assert!(added(2, u64::MAX, &[]).is_err(), "ids past u64::MAX");
        assert_eq!(added(1, u64::MAX, &[]).unwrap()[0].id, u64::MAX);
    }
}
