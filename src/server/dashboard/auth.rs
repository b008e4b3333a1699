//! Who is let in: the server's token as an `Authorization: Bearer`
//! header, or the cookie ([`TOKEN_COOKIE`]) that opening `/?token=<token>`
//! once sets.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;

use super::{Access, Dash, TOKEN_COOKIE, access_of, bearer_access, error_response};
use crate::wire::ErrorBody;

/// Proof that the request carried a token, and which: the first extractor
/// of every route but the page itself (which also takes `?token=`) and the
/// static assets. Refuses with 401 otherwise.
#[derive(Debug, Clone, Copy)]
pub(super) struct LetIn(pub(super) Access);

impl FromRequestParts<Arc<Dash>> for LetIn {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, dash: &Arc<Dash>) -> Result<Self, Response> {
        let_in(&parts.headers, dash)
            .map(LetIn)
            .ok_or_else(unauthorized)
    }
}

/// The access the bearer header or the cookie grants: the full token, the
/// read-only token (SPEC 12.2), or none.
pub(super) fn let_in(headers: &HeaderMap, dash: &Dash) -> Option<Access> {
    let read = dash.read_token.as_deref();
    if let Some(access) = bearer_access(headers, &dash.token, read) {
        return Some(access);
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .filter(|(k, _)| *k == TOKEN_COOKIE)
        .find_map(|(_, v)| access_of(v.as_bytes(), &dash.token, read))
}

/// 401, saying how to get in.
pub(super) fn unauthorized() -> Response {
    error_response(ErrorBody::plain(
        "unauthorized",
        "missing or wrong token: open /?token=<token> once (the token is in the token file of workjournal serve), or send Authorization: Bearer <token>",
    ))
}

/// `/?token=<token>` with either token: a redirect to `/` that sets the
/// cookie; `None` for a missing or wrong token.
pub(super) fn login(given: Option<&str>, dash: &Dash) -> Option<Response> {
    let given = given
        .filter(|g| access_of(g.as_bytes(), &dash.token, dash.read_token.as_deref()).is_some())?;
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
