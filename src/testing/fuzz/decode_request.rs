//! Target `decode_request`: request bodies of every route into the wire
//! decoder.

// A broken contract panics: that panic is what the fuzzer reports.
#![allow(clippy::panic)]

/// Target `decode_request`: the first byte picks an operation of
/// [`wire::OPS`](crate::wire::OPS) (or, past the list, takes the next bytes
/// as an operation name), the rest is the request body. Decoding never
/// panics (SPEC section 10: a malformed request is a 400, never a crash);
/// an error is one line; a decoded request encodes back to the same
/// request.
///
/// # Panics
///
/// When decoding panics, an error spans lines, or the round trip differs.
pub fn decode_request(data: &[u8]) {
    use crate::wire::{OPS, Request};
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let (op, body): (String, &[u8]) = match OPS.get(usize::from(pick)) {
        Some(op) => ((*op).to_string(), rest),
        None => {
            let cut = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
            let (name, body) = rest.split_at(cut);
            (String::from_utf8_lossy(name).into_owned(), body)
        }
    };
    match Request::decode(&op, body) {
        Ok(request) => {
            let (again_op, again_body) = request.encode();
            assert_eq!(again_op, op, "operation changed in the round trip");
            let again = Request::decode(again_op, &again_body)
                .unwrap_or_else(|e| panic!("re-encoded request does not decode: {e}"));
            assert_eq!(again, request, "request changed in the round trip");
            // The contract's request it carries goes back to the same wire
            // request once normalised (a cost of 0 reads as 1).
            let max = std::time::Duration::MAX;
            if let Ok(queue) = request.into_queue(max) {
                let name = queue.name();
                let once =
                    Request::from_queue(queue).unwrap_or_else(|| panic!("{name} has no wire form"));
                assert_eq!(once.encode().0, name, "route and operation name differ");
                let twice = once
                    .clone()
                    .into_queue(max)
                    .ok()
                    .and_then(Request::from_queue);
                assert_eq!(twice, Some(once), "contract round trip is not stable");
            }
        }
        Err(e) => {
            let text = e.to_string();
            assert!(
                !text.contains('\n') && !text.is_empty(),
                "error is not one line: {text:?}"
            );
        }
    }
}
