//! `/metrics` in Prometheus text format (SPEC 12.3), rendered from the
//! process's Prometheus recorder.

use std::sync::{Arc, OnceLock};

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use super::auth::LetIn;
use super::{Dash, Lag, error_response};
use crate::metered::{OPERATION_DURATION, record_stats};
use crate::queue::{BoxQueue, WorkQueue};
use crate::wire::ErrorBody;

/// The buckets of the operation latency histogram, in seconds.
const LATENCY_BUCKETS: [f64; 16] = [
    0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0,
];

/// The process's Prometheus recorder, installed as the `metrics` facade's
/// global recorder on first use; `None` if the process already had another
/// one (then its own exporter has the series).
pub(in crate::server) fn prometheus() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE.get_or_init(install).as_ref()
}

fn install() -> Option<PrometheusHandle> {
    let builder = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(OPERATION_DURATION.to_string()),
            &LATENCY_BUCKETS,
        )
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(crate::metered::SCHEDULE_FIRE_LATENESS.to_string()),
                &LATENCY_BUCKETS,
            )
        });
    let recorder = match builder {
        Ok(b) => b.build_recorder(),
        Err(e) => {
            tracing::warn!("metrics: {e}");
            return None;
        }
    };
    let handle = recorder.handle();
    match metrics::set_global_recorder(recorder) {
        Ok(()) => Some(handle),
        Err(_) => {
            tracing::warn!(
                "metrics: this process already has a metrics recorder; /metrics stays empty"
            );
            None
        }
    }
}

/// `GET /metrics` on the dashboard listener.
pub(super) async fn metrics_route(_: LetIn, State(dash): State<Arc<Dash>>) -> Response {
    render_metrics(&dash.queue, dash.lag.as_ref()).await
}

/// `/metrics` in Prometheus text format, for any router whose caller has
/// been let in.
pub(in crate::server) async fn render_metrics(queue: &BoxQueue, lag: Option<&Lag>) -> Response {
    let Some(handle) = prometheus() else {
        return error_response(ErrorBody::plain(
            "closed",
            "this process has a metrics recorder of its own: scrape that one",
        ));
    };
    // Fresh state gauges for the scrape, whatever the sampler last saw.
    if let Ok(s) = queue.stats().await {
        record_stats(&s);
    }
    // The forwarding lag, from the same source as route `forward_lag`;
    // no source, or a file never forwarded (no forwarder ever set up on
    // it, none running), no series: every item of such a file would read
    // as waiting for a Redis it was never meant for.
    #[cfg(feature = "forward")]
    if let Some(source) = lag
        && let Ok(l) = source.lag(None).await
        && (l.forwarded || l.forwarding)
    {
        crate::metered::record_forward_lag(super::FORWARD_LAG_TARGET, l.lag.count);
    }
    #[cfg(not(feature = "forward"))]
    let _ = lag;
    handle.run_upkeep();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle.render(),
    )
        .into_response()
}
