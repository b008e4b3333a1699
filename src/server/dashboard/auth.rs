//! Who is let in: the server's token as an `Authorization: Bearer`
//! header, or the cookie ([`TOKEN_COOKIE`]) that opening `/?token=<token>`
//! once sets.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;

use super::{Dash, TOKEN_COOKIE, authorized, error_response, same_token};
use crate::wire::ErrorBody;

/// Proof that the request carried the token: the first extractor of
/// every route but the page itself (which also takes `?token=`) and the
/// static assets. Refuses with 401 otherwise.
#[derive(Debug, Clone, Copy)]
pub(super) struct LetIn;

impl FromRequestParts<Arc<Dash>> for LetIn {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, dash: &Arc<Dash>) -> Result<Self, Response> {
        if let_in(&parts.headers, &dash.token) {
            Ok(LetIn)
        } else {
            Err(unauthorized())
        }
    }
}

/// The token from the bearer header or the cookie.
pub(super) fn let_in(headers: &HeaderMap, token: &str) -> bool {
    if authorized(headers, token) {
        return true;
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .any(|(k, v)| k == TOKEN_COOKIE && same_token(v.as_bytes(), token.as_bytes()))
}

/// 401, saying how to get in.
pub(super) fn unauthorized() -> Response {
    error_response(ErrorBody::plain(
        "unauthorized",
        "missing or wrong token: open /?token=<token> once (the token is in the token file of workjournal serve), or send Authorization: Bearer <token>",
    ))
}

/// `/?token=<token>` with the right token: a redirect to `/` that sets
/// the cookie; `None` for a missing or wrong token.
pub(super) fn login(given: Option<&str>, token: &str) -> Option<Response> {
    let given = given.filter(|g| same_token(g.as_bytes(), token.as_bytes()))?;
    let cookie = format!("{TOKEN_COOKIE}={given}; Path=/; HttpOnly; SameSite=Strict");
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::SEE_OTHER;
    r.headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static("/"));
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    Some(r)
}
