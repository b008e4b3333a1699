//! The page's script and style sheet, built into the binary and served
//! to anyone (they hold no data).

use axum::http::header;
use axum::response::{IntoResponse, Response};

const APP_JS: &str = include_str!("../assets/app.js");
const APP_CSS: &str = include_str!("../assets/app.css");

/// `GET /assets/app.js`.
pub(super) async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

/// `GET /assets/app.css`.
pub(super) async fn app_css() -> Response {
    asset("text/css; charset=utf-8", APP_CSS)
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}
