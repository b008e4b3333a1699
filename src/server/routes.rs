//! The router: `POST /v1/<op>` (and `GET` for the read-only operations),
//! the OpenAPI document, `/metrics`, reading a request body within its
//! limit and time, and JSON replies and errors.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path as RoutePath, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http_body_util::{BodyExt, Limited};
use serde::Serialize;
use tokio::sync::watch;

use super::auth::{Access, bearer_access};
use super::execute::execute;
use super::{ServerOptions, openapi_json};
use crate::error::Result;
use crate::queue::BoxQueue;
use crate::wire::{self, ErrorBody, ErrorReply, Request};

/// What every route handler gets.
#[derive(Clone)]
pub(super) struct AppState {
    pub(super) queue: BoxQueue,
    pub(super) options: Arc<ServerOptions>,
    /// Where route `forward_lag` reads the served file's lag, if anywhere.
    #[cfg(feature = "forward")]
    pub(super) lag: Option<crate::forward::LagSource>,
    /// `Some(token)` on a TCP router: requests must carry it (or the
    /// read-only token).
    pub(super) token: Option<Arc<str>>,
    /// The read-only token on a TCP router, if the server has one.
    pub(super) read_token: Option<Arc<str>>,
    pub(super) shutdown: watch::Receiver<bool>,
}

pub(super) fn router(state: AppState) -> Router {
    let r = Router::new()
        .route("/v1/openapi.json", get(openapi))
        .route("/v1/{op}", get(call).post(call));
    #[cfg(feature = "dashboard")]
    let r = r.route("/metrics", get(api_metrics));
    r.fallback(not_found).with_state(state)
}

/// `GET /metrics` on the API listeners (SPEC 12.3): the socket's peer rule
/// or the TCP token, as for every other route.
#[cfg(feature = "dashboard")]
async fn api_metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    // Either token may read the metrics.
    if access(&state, &headers).is_none() {
        return unauthorized();
    }
    #[cfg(feature = "forward")]
    let lag = state.lag.as_ref();
    #[cfg(not(feature = "forward"))]
    let lag = None;
    super::dashboard::render_metrics(&state.queue, lag).await
}

/// What the request's token lets it do: the Unix socket (no token, the
/// peer rule decided) and the full token may do everything, the read-only
/// token only look; `None` for a missing or wrong token.
fn access(state: &AppState, headers: &HeaderMap) -> Option<Access> {
    match &state.token {
        None => Some(Access::Full),
        Some(token) => bearer_access(headers, token, state.read_token.as_deref()),
    }
}

/// 401 for a TCP request without a right token.
fn unauthorized() -> Response {
    error_response(ErrorBody::plain(
        "unauthorized",
        "missing or wrong bearer token (send Authorization: Bearer <token>)",
    ))
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], openapi_json()).into_response()
}

async fn not_found() -> Response {
    error_response(ErrorBody::plain(
        "not_found",
        "no such route; every operation is POST /v1/<op> (see GET /v1/openapi.json)",
    ))
}

pub(super) fn error_response(body: ErrorBody) -> Response {
    let status = StatusCode::from_u16(body.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = json_response(status, &ErrorReply { error: body });
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
    }
    response
}

pub(super) fn json_response<T: Serialize>(status: StatusCode, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(bytes) => (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the reply: {e}"),
        )
            .into_response(),
    }
}

pub(super) fn reply<T: Serialize>(result: Result<T>) -> Response {
    match result {
        Ok(value) => json_response(StatusCode::OK, &value),
        Err(e) => error_response(ErrorBody::from_error(&e)),
    }
}

async fn call(
    State(state): State<AppState>,
    RoutePath(op): RoutePath<String>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some(access) = access(&state, &headers) else {
        return unauthorized();
    };
    if method == Method::GET && !Request::is_read_only_op(&op) {
        // An unknown name is 404 however it is asked for, not "send it as
        // POST" (SPEC section 10).
        if let Err(e @ wire::DecodeError::UnknownOp(_)) = Request::decode(&op, b"{}") {
            return error_response(ErrorBody::plain("not_found", e.to_string()));
        }
        return error_response(ErrorBody::plain(
            "bad_request",
            format!("{op} changes the queue: send it as POST"),
        ));
    }
    let limit = state.options.max_request_bytes();
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return too_large(limit);
    }
    let bytes = match read_body(body, limit, state.options.body_timeout).await {
        Ok(bytes) => bytes,
        Err(response) => return response,
    };
    let request = match Request::decode(&op, &bytes) {
        Ok(r) => r,
        Err(e @ wire::DecodeError::UnknownOp(_)) => {
            return error_response(ErrorBody::plain("not_found", e.to_string()));
        }
        Err(e) => return error_response(ErrorBody::plain("bad_request", e.to_string())),
    };
    execute(&state, request, access).await
}

fn too_large(limit: usize) -> Response {
    error_response(ErrorBody::plain(
        "payload_too_large",
        format!(
            "request body is over {limit} bytes (max_payload_bytes in base64 plus the envelope); send less per request"
        ),
    ))
}

pub(super) async fn read_body(
    body: Body,
    limit: usize,
    timeout: Duration,
) -> std::result::Result<Bytes, Response> {
    match tokio::time::timeout(timeout, Limited::new(body, limit).collect()).await {
        Err(_) => Err(error_response(ErrorBody::plain(
            "timeout",
            format!("request body not received within {timeout:?}"),
        ))),
        Ok(Err(e))
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(too_large(limit))
        }
        Ok(Err(e)) => Err(error_response(ErrorBody::plain(
            "bad_request",
            format!("cannot read the request body: {e}"),
        ))),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
    }
}
