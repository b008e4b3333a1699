//! Target `redis_reply`: arbitrary Redis replies into the Redis backend's
//! reply parsers.

// A broken contract panics: that panic is what the fuzzer reports.
#![allow(clippy::panic)]

use arbitrary::Unstructured;

use crate::error::Error;

/// Deepest nesting of arrays, maps and sets a `redis_reply` input builds.
const REPLY_DEPTH: usize = 4;

/// Most values (all levels) one `redis_reply` input builds.
const REPLY_NODES: usize = 256;

/// An arbitrary reply the Redis client can hand the backend: every variant of
/// `redis::Value` in redis 1.8 (without `num-bigint`, so `BigNumber` holds
/// bytes), nested at most [`REPLY_DEPTH`] deep and [`REPLY_NODES`] in all.
/// Decimal text and lane names are drawn often so the item and claim
/// parsers get past their first field.
fn reply_value(
    u: &mut Unstructured<'_>,
    depth: usize,
    nodes: &mut usize,
) -> arbitrary::Result<redis::Value> {
    use redis::{PushKind, Value, VerbatimFormat};
    *nodes = nodes.saturating_sub(1);
    let nested = depth < REPLY_DEPTH && *nodes > 0;
    let top = if nested { 19 } else { 13 };
    let children = |u: &mut Unstructured<'_>, nodes: &mut usize| {
        let n = u.int_in_range(0..=12usize)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            if *nodes == 0 {
                break;
            }
            out.push(reply_value(u, depth + 1, nodes)?);
        }
        arbitrary::Result::Ok(out)
    };
    let pairs = |u: &mut Unstructured<'_>, nodes: &mut usize| {
        let flat = children(u, nodes)?;
        let mut it = flat.into_iter();
        let mut out = Vec::new();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            out.push((k, v));
        }
        arbitrary::Result::Ok(out)
    };
    Ok(match u.int_in_range(0..=top)? {
        0 => Value::Nil,
        1 => Value::Int(u.arbitrary()?),
        2 => Value::BulkString(u.arbitrary()?),
        3 => Value::SimpleString(u.arbitrary()?),
        4 => Value::Okay,
        5 => Value::Double(u.arbitrary()?),
        6 => Value::Boolean(u.arbitrary()?),
        7 => Value::VerbatimString {
            format: match u.int_in_range(0..=2u8)? {
                0 => VerbatimFormat::Text,
                1 => VerbatimFormat::Markdown,
                _ => VerbatimFormat::Unknown(u.arbitrary()?),
            },
            text: u.arbitrary()?,
        },
        8 => Value::BigNumber(u.arbitrary()?),
        9 => {
            let code: String = u.arbitrary()?;
            let detail: Option<String> = u.arbitrary()?;
            match redis::ServerError::try_from(redis::make_extension_error(code, detail)) {
                Ok(e) => Value::ServerError(e),
                Err(_) => Value::Nil,
            }
        }
        // Numbers as the scripts send them: decimal text, in and out of
        // range, with and without padding.
        10 => {
            let n: i128 = match u.int_in_range(0..=3u8)? {
                0 => i128::from(u.arbitrary::<u64>()?),
                1 => i128::from(u.arbitrary::<i64>()?),
                2 => i128::from(u.int_in_range(0..=10u8)?),
                _ => u.arbitrary()?,
            };
            let pad = if u.arbitrary()? { " " } else { "" };
            Value::BulkString(format!("{pad}{n}{pad}").into_bytes())
        }
        11 => Value::BulkString(Vec::new()),
        12 => {
            let word = *u.choose(&["backlog", "due", "parked", "Due", "", "due\0"])?;
            Value::BulkString(word.as_bytes().to_vec())
        }
        13 => Value::Int(i64::from(u.int_in_range(0..=10u8)?)),
        14 | 15 => Value::Array(children(u, nodes)?),
        16 => Value::Set(children(u, nodes)?),
        17 => Value::Map(pairs(u, nodes)?),
        18 => Value::Attribute {
            data: Box::new(reply_value(u, depth + 1, nodes)?),
            attributes: pairs(u, nodes)?,
        },
        _ => Value::Push {
            kind: match u.int_in_range(0..=2u8)? {
                0 => PushKind::Message,
                1 => PushKind::Invalidate,
                _ => PushKind::Other(u.arbitrary()?),
            },
            data: children(u, nodes)?,
        },
    })
}

/// Every parser of `backend::redis::reply` on `v`: each gives a value or an
/// error (`Decode`, or `Backend` for a server error), and the results agree
/// with each other.
fn every_reply_parser(v: &redis::Value, index: usize) {
    use crate::backend::redis::reply;
    fn ok<T>(r: crate::error::Result<T>) -> Option<T> {
        match r {
            Ok(t) => Some(t),
            Err(Error::Decode { .. } | Error::Backend { .. }) => None,
            Err(other) => panic!("reply parser gave an unexpected error: {other:?}"),
        }
    }
    if let Some(a) = ok(reply::array(v, "fuzz")) {
        for i in [0, 1, 5, 8, 9, index] {
            let got = ok(reply::at(a, i, "fuzz"));
            assert_eq!(
                got.is_some(),
                i < a.len(),
                "at({i}) of {} elements",
                a.len()
            );
        }
    }
    let raw = ok(reply::bytes(v, "fuzz"));
    if let Some(t) = ok(reply::text(v, "fuzz")) {
        assert_eq!(
            raw.as_deref(),
            Some(t.as_bytes()),
            "text disagrees with bytes"
        );
    }
    let int = ok(reply::int(v, "fuzz"));
    let uint = ok(reply::uint(v, "fuzz"));
    if let Some(n) = uint {
        assert_eq!(
            int.and_then(|i| u64::try_from(i).ok()),
            Some(n),
            "uint disagrees with int"
        );
    }
    if let Some(n) = ok(reply::u32_of(v, "fuzz")) {
        assert_eq!(uint, Some(u64::from(n)), "u32 disagrees with uint");
    }
    if let Some(Some(n)) = ok(reply::opt_uint(v, "fuzz")) {
        assert_eq!(uint, Some(n), "opt_uint disagrees with uint");
    }
    let _ = ok(reply::lane(v));
    // Peeked items carry the tier at 6, dead letters at 8, claims at 9.
    let _ = ok(reply::item(v, 6));
    let _ = ok(reply::item(v, 8));
    let item = ok(reply::item(v, 9));
    if let Some(c) = ok(reply::claimed(v)) {
        assert_eq!(item.as_ref(), Some(&c.item), "claim disagrees with item");
        assert_eq!(
            (c.receipt.id, c.receipt.delivery),
            (c.item.id, c.item.deliveries)
        );
    }
    if let Some(cs) = ok(reply::claims(v)) {
        let n = ok(reply::array(v, "fuzz")).map(<[redis::Value]>::len);
        assert_eq!(Some(cs.len()), n, "one claim per element");
    }
}

/// Target `redis_reply`: an arbitrary Redis reply (every `redis::Value`
/// variant, bounded depth and size) into every parser of the Redis backend's
/// script replies (SPEC section 5: no reply may panic the process) gives a
/// value or an error; the parsers agree with each other.
///
/// # Panics
///
/// When a parser panics, gives an error other than `Decode`/`Backend`, or
/// two parsers disagree.
pub fn redis_reply(bytes: &[u8]) {
    let mut u = Unstructured::new(bytes);
    let index = usize::from(u.arbitrary::<u8>().unwrap_or(0));
    let mut nodes = REPLY_NODES;
    let Ok(root) = reply_value(&mut u, 0, &mut nodes) else {
        return;
    };
    every_reply_parser(&root, index);
    if let redis::Value::Array(a) | redis::Value::Set(a) = &root {
        for v in a {
            every_reply_parser(v, index);
        }
    }
}
