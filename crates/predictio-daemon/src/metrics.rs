//! The Prometheus text endpoint (opt-in): `GET /metrics` on a TCP address.
//! Only totals and per-origin counters are exported — never per-file ones,
//! which would name other users' files to anyone who can reach the port.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use predictio::accounting::Counters;

use super::status::Status;

/// Renders a status as Prometheus text exposition format.
pub fn render(status: &Status) -> String {
    let mut out = String::new();
    out.push_str("# HELP predictio_pages_total Pages by origin and outcome.\n# TYPE predictio_pages_total counter\n");
    let mut line = |origin: &str, c: &Counters| {
        for (what, v) in super::status::headline(c) {
            let what = what.trim_end_matches("_pages");
            out.push_str(&format!(
                "predictio_pages_total{{origin=\"{}\",outcome=\"{}\"}} {}\n",
                escape(origin),
                what,
                v
            ));
        }
    };
    line("all", &status.executor.total);
    for o in &status.executor.origins {
        line(&o.name, &o.counters);
    }
    let p = &status.pipeline;
    out.push_str("# HELP predictio_events_total Events through the pipeline.\n# TYPE predictio_events_total counter\n");
    for (what, v) in [("queued", p.queued), ("dropped", p.dropped), ("dispatched", p.dispatched)] {
        out.push_str(&format!("predictio_events_total{{outcome=\"{what}\"}} {v}\n"));
    }
    out.push_str(&format!(
        "# HELP predictio_uptime_seconds Seconds since the daemon started.\n# TYPE predictio_uptime_seconds gauge\npredictio_uptime_seconds {}\n",
        status.uptime_s
    ));
    out
}

fn escape(label: &str) -> String {
    label.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The metrics endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// Binding or listening on the address failed.
    #[error("binding metrics endpoint {listen}: {source}")]
    Bind {
        /// The configured `host:port`.
        listen: String,
        /// Why.
        source: std::io::Error,
    },
    /// The server thread could not be started.
    #[error("starting the metrics thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// Serves `GET /metrics` until dropped.
pub struct MetricsServer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// The address actually bound.
    pub addr: std::net::SocketAddr,
}

impl MetricsServer {
    /// Binds `listen` and serves `status()` rendered.
    pub fn start(listen: &str, status: impl Fn() -> Status + Send + 'static) -> Result<Self, MetricsError> {
        let bind = |source| MetricsError::Bind { listen: listen.to_owned(), source };
        let listener = TcpListener::bind(listen).map_err(bind)?;
        let addr = listener.local_addr().map_err(bind)?;
        listener.set_nonblocking(true).map_err(bind)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new().name("predictio-metrics".into()).spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut stream, _)) => {
                        let _ = stream.set_nonblocking(false);
                        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                        let mut request = String::new();
                        let ok = BufReader::new(&mut stream).read_line(&mut request).is_ok();
                        let response = if ok && request.starts_with("GET /metrics") {
                            let body = render(&status());
                            format!(
                                "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{body}",
                                body.len()
                            )
                        } else {
                            "HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_owned()
                        };
                        let _ = stream.write_all(response.as_bytes());
                    }
                    Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => super::wait_for_connection(&listener),
                    Err(_) => std::thread::sleep(Duration::from_millis(200)),
                }
            }
        });
        Ok(Self { stop, thread: Some(thread.map_err(MetricsError::Thread)?), addr })
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_with_escaped_labels() {
        let mut status = Status::default();
        status.executor.total.issued_pages = 42;
        status.executor.origins.push(predictio::accounting::OriginStats {
            id: predictio::policy::PolicyId(1),
            name: "we\"ird".into(),
            counters: Counters { hit_pages: 7, ..Counters::default() },
        });
        let text = render(&status);
        assert!(text.contains("predictio_pages_total{origin=\"all\",outcome=\"issued\"} 42"));
        assert!(text.contains("predictio_pages_total{origin=\"we\\\"ird\",outcome=\"hit\"} 7"));
    }
}
