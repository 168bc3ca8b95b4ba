//! What lb-watcher is doing, for operators: `/status` (JSON) and `/metrics` (Prometheus text)
//! on a loopback address.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::hysteresis::Pending;
use crate::Error;

/// The `/status` document.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Status {
    pub zookeeper: ZkStatus,
    /// Servers in the file and in lb-proxy, by backend: name → `address weight N`.
    pub servers: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
    pub pending: Vec<Pending>,
    /// Milliseconds until the pending changes are acted on (`null`: nothing pending, or frozen).
    pub pending_due_in_ms: Option<u64>,
    /// Backends whose emptying was refused; their last set is kept.
    pub refused: Vec<String>,
    pub last_apply: Option<LastApply>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ZkStatus {
    /// `connecting`, `connected`, `disconnected`, `expired`.
    pub state: String,
    pub session_id: Option<String>,
    /// Unix time of the last state change.
    pub since: u64,
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LastApply {
    /// Unix time.
    pub at: u64,
    /// `runtime`, `reload`, `unchanged`, or `failed`.
    pub result: String,
    pub detail: String,
}

/// Prometheus counters.
#[derive(Debug, Default)]
pub struct Metrics {
    pub applies: AtomicU64,
    pub runtime_applies: AtomicU64,
    pub reloads: AtomicU64,
    pub reload_failures: AtomicU64,
    pub errors: AtomicU64,
    pub refused: AtomicU64,
    pub skipped_nodes: AtomicU64,
    pub zk_disconnects: AtomicU64,
    pub zk_expirations: AtomicU64,
    pub drift_repairs: AtomicU64,
    pub zk_reads: AtomicU64,
    pub zk_nodes_read: AtomicU64,
    pub zk_bytes_read: AtomicU64,
    pub zk_full_reads: AtomicU64,
    pub zk_audits: AtomicU64,
    pub zk_audit_repairs: AtomicU64,
}

impl Metrics {
    pub fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn add_n(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn render(&self, status: &Status) -> String {
        let mut out = String::new();
        let counters: [(&str, &AtomicU64, &str); 16] = [
            ("applies", &self.applies, "Server-set changes written and applied."),
            ("runtime_applies", &self.runtime_applies, "Changes applied with runtime commands (no new worker)."),
            ("reloads", &self.reloads, "Successful reloads of lb-proxy."),
            ("reload_failures", &self.reload_failures, "Reloads that failed after every retry."),
            ("errors", &self.errors, "Errors of any kind (write, runtime, reload)."),
            ("refused", &self.refused, "Changes refused because they would empty a backend."),
            ("skipped_nodes", &self.skipped_nodes, "Registration nodes skipped as invalid or foreign."),
            ("zookeeper_disconnects", &self.zk_disconnects, "ZooKeeper connection losses."),
            ("zookeeper_expirations", &self.zk_expirations, "ZooKeeper session expirations."),
            ("drift_repairs", &self.drift_repairs, "Drift between lb-proxy and the file repaired."),
            ("zookeeper_reads", &self.zk_reads, "Read requests sent to ZooKeeper (child listings, multi-reads)."),
            ("zookeeper_nodes_read", &self.zk_nodes_read, "Registration nodes whose data was read from ZooKeeper."),
            ("zookeeper_read_bytes", &self.zk_bytes_read, "Bytes of node data and child names read from ZooKeeper."),
            (
                "zookeeper_full_reads",
                &self.zk_full_reads,
                "Whole reads of a service path (start, reconnection, session expiry, audit).",
            ),
            ("zookeeper_audits", &self.zk_audits, "Audits: every path read whole and compared with the watches' view."),
            (
                "zookeeper_audit_repairs",
                &self.zk_audit_repairs,
                "Nodes an audit found different from what the watches had reported (repaired).",
            ),
        ];
        for (name, value, help) in counters {
            out.push_str(&format!(
                "# HELP lb_watcher_{name}_total {help}\n# TYPE lb_watcher_{name}_total counter\nlb_watcher_{name}_total {}\n",
                value.load(Ordering::Relaxed)
            ));
        }
        let connected = u8::from(status.zookeeper.state == "connected");
        out.push_str(&format!(
            "# HELP lb_watcher_zookeeper_connected 1 when the ZooKeeper session is connected.\n\
             # TYPE lb_watcher_zookeeper_connected gauge\nlb_watcher_zookeeper_connected {connected}\n"
        ));
        out.push_str("# HELP lb_watcher_servers Servers applied, by backend.\n# TYPE lb_watcher_servers gauge\n");
        for (backend, servers) in &status.servers {
            let backend = backend.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
            out.push_str(&format!("lb_watcher_servers{{backend=\"{backend}\"}} {}\n", servers.len()));
        }
        let gauges: [(&str, u64, &str); 4] = [
            (
                "pending_changes",
                status.pending.len() as u64,
                "Changes seen in ZooKeeper, waiting out their hysteresis.",
            ),
            (
                "refused_backends",
                status.refused.len() as u64,
                "Backends whose emptying is refused (their last set is kept).",
            ),
            (
                "last_apply_timestamp_seconds",
                status.last_apply.as_ref().map_or(0, |a| a.at),
                "When the server set was last applied or checked (Unix time; 0: not yet).",
            ),
            (
                "last_apply_failed",
                u64::from(status.last_apply.as_ref().is_some_and(|a| a.result == "failed")),
                "1 when the last apply failed.",
            ),
        ];
        for (name, value, help) in gauges {
            out.push_str(&format!(
                "# HELP lb_watcher_{name} {help}\n# TYPE lb_watcher_{name} gauge\nlb_watcher_{name} {value}\n"
            ));
        }
        out
    }
}

/// Shared between the engine (writer) and the endpoint (reader).
#[derive(Debug, Default)]
pub struct Shared {
    pub status: Mutex<Status>,
    pub metrics: Metrics,
}

impl Shared {
    pub fn update(&self, f: impl FnOnce(&mut Status)) {
        let mut status = self.status.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut status);
    }

    pub fn snapshot(&self) -> Status {
        self.status.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Binds `addr`; the endpoint then serves until `shutdown`.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr).await.map_err(|source| Error::Status { addr, source })
}

pub async fn serve(listener: TcpListener, shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("status endpoint: accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(answer(&req, &shared)) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
        });
    }
}

fn answer(req: &Request<hyper::body::Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    let status = shared.snapshot();
    let (code, kind, body) = match req.uri().path() {
        "/status" => (
            200,
            "application/json",
            serde_json::to_string_pretty(&status).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}")),
        ),
        "/metrics" => (200, "text/plain; version=0.0.4", shared.metrics.render(&status)),
        _ => (404, "text/plain", "not found: try /status or /metrics\n".to_owned()),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = hyper::StatusCode::from_u16(code).unwrap_or(hyper::StatusCode::OK);
    if let Ok(value) = http::HeaderValue::from_str(kind) {
        response.headers_mut().insert(http::header::CONTENT_TYPE, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Prometheus' own checker finds nothing to say (scripts/install-deps test installs it).
    #[test]
    fn metrics_pass_promtool() {
        let mut status = Status::default();
        status.servers.insert("api \"v2\"".into(), [("a1".to_owned(), "10.0.0.1:80 weight 10".to_owned())].into());
        status.last_apply = Some(LastApply { at: 1_700_000_000, result: "failed".into(), detail: String::new() });
        let metrics = Metrics::default();
        Metrics::add(&metrics.applies);
        let text = metrics.render(&status);
        assert!(text.contains("lb_watcher_servers{backend=\"api \\\"v2\\\"\"} 1"), "{text}");
        assert!(
            text.contains("lb_watcher_last_apply_failed 1") && text.contains("lb_watcher_applies_total 1"),
            "{text}"
        );
        let complaints = lb_testkit::runtime::promtool_check(&text);
        assert!(complaints.is_empty(), "promtool: {complaints}\n{text}");
    }
}
