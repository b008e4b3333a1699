//! The bearer token checks of TCP listeners: the full token and the
//! read-only one (SPEC 10, Security).

use axum::http::{HeaderMap, header};

/// Constant-time comparison, so the token cannot be guessed byte by byte
/// from response times.
fn same_token(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len()
        && given
            .iter()
            .zip(expected)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// The bearer token of `headers`, if any.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

/// What a request's token lets it do (SPEC 10, Security).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    /// The full token (or the Unix socket's peer rule): every route.
    Full,
    /// The read-only token: the routes that change nothing.
    Read,
}

/// The access `given` grants with the full token `full` and the read-only
/// token `read`; `None` for a wrong token. Both are compared in constant
/// time.
pub(super) fn access_of(given: &[u8], full: &str, read: Option<&str>) -> Option<Access> {
    let is_full = same_token(given, full.as_bytes());
    let is_read = read.is_some_and(|r| same_token(given, r.as_bytes()));
    match (is_full, is_read) {
        (true, _) => Some(Access::Full),
        (false, true) => Some(Access::Read),
        (false, false) => None,
    }
}

/// The access the bearer token of `headers` grants (see [`access_of`]).
pub(super) fn bearer_access(headers: &HeaderMap, full: &str, read: Option<&str>) -> Option<Access> {
    access_of(bearer(headers)?.as_bytes(), full, read)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_comparison_needs_every_byte() {
        assert!(same_token(b"abc", b"abc"));
        assert!(!same_token(b"abd", b"abc"));
        assert!(!same_token(b"ab", b"abc"));
        assert!(!same_token(b"", b"abc"));
    }

    #[test]
    fn each_token_gives_its_own_access() {
        assert_eq!(access_of(b"full", "full", Some("read")), Some(Access::Full));
        assert_eq!(access_of(b"read", "full", Some("read")), Some(Access::Read));
        assert_eq!(access_of(b"other", "full", Some("read")), None);
        assert_eq!(access_of(b"read", "full", None), None);
    }
}
