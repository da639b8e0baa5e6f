//! The Prometheus text endpoint (opt-in): `GET /metrics` on a TCP address.
//! Only totals and per-origin counters are exported — never per-file ones,
//! which would name other users' files to anyone who can reach the port.
//!
//! Anyone who can reach the port is a client, and the daemon is root, so
//! every connection is bounded: at most [`MAX_REQUEST_HEAD`] bytes of
//! request head are read (past it: `431`), all of it within
//! [`REQUEST_DEADLINE`] (else `408`, however slowly the bytes trickle), and
//! the answer is written within the same time again. Each connection has
//! its own thread, so a slow client holds up no one else, and at most
//! [`MAX_CONNECTIONS`] are served at once: one more is answered `503` and
//! closed without being read.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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

/// The most bytes of request head (request line and headers) read from a
/// connection; a head that does not end within them is answered `431`.
pub const MAX_REQUEST_HEAD: usize = 8 * 1024;

/// How long a connection may take to send its whole request head (and,
/// again, to take the answer).
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(2);

/// Connections served at once; one more is answered `503` and closed.
pub const MAX_CONNECTIONS: usize = 8;

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

/// What the endpoint did with its connections.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetricsStats {
    /// Connections accepted.
    pub connections: u64,
    /// Answered `200` with the metrics.
    pub served: u64,
    /// Answered `404`, `405` or `400` (another path or method, or a head
    /// that is not HTTP).
    pub bad_requests: u64,
    /// Heads longer than [`MAX_REQUEST_HEAD`], answered `431`.
    pub too_large: u64,
    /// Heads not complete within [`REQUEST_DEADLINE`], answered `408`.
    pub timed_out: u64,
    /// Connections beyond [`MAX_CONNECTIONS`], answered `503` unread.
    pub refused: u64,
    /// The most bytes of request head ever held for one connection.
    pub largest_head: u64,
    /// Connections being served now.
    pub active: usize,
}

#[derive(Default)]
struct ConnCounters {
    connections: AtomicU64,
    served: AtomicU64,
    bad_requests: AtomicU64,
    too_large: AtomicU64,
    timed_out: AtomicU64,
    refused: AtomicU64,
    largest_head: AtomicU64,
    active: AtomicUsize,
}

/// Serves `GET /metrics` until dropped.
pub struct MetricsServer {
    stop: super::Stopper,
    thread: Option<JoinHandle<()>>,
    counters: Arc<ConnCounters>,
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
        let (stop, stopped) = super::Stopper::new().map_err(MetricsError::Thread)?;
        let counters = Arc::new(ConnCounters::default());
        let shared = Arc::clone(&counters);
        // Connection threads render one at a time; rendering is quick.
        let status = Arc::new(Mutex::new(status));
        let thread = std::thread::Builder::new().name("predictio-metrics".into()).spawn(move || {
            // Asleep in poll(2) until a client connects or the server is
            // dropped.
            while !super::wait_for_connection(&listener, &stopped) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        shared.connections.fetch_add(1, Ordering::Relaxed);
                        dispatch(stream, &shared, &status);
                    }
                    Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => std::thread::sleep(Duration::from_millis(200)),
                }
            }
        });
        Ok(Self { stop, thread: Some(thread.map_err(MetricsError::Thread)?), counters, addr })
    }

    /// The endpoint's counters.
    pub fn stats(&self) -> MetricsStats {
        let c = &self.counters;
        MetricsStats {
            connections: c.connections.load(Ordering::Relaxed),
            served: c.served.load(Ordering::Relaxed),
            bad_requests: c.bad_requests.load(Ordering::Relaxed),
            too_large: c.too_large.load(Ordering::Relaxed),
            timed_out: c.timed_out.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            largest_head: c.largest_head.load(Ordering::Relaxed),
            active: c.active.load(Ordering::Relaxed),
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // Connection threads end by their deadlines; wait for them so that
        // none outlives the server (and what its status reads).
        let deadline = Instant::now() + 2 * REQUEST_DEADLINE + Duration::from_millis(500);
        while self.counters.active.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Takes a connection slot (or answers `503`) and serves the connection on
/// a thread of its own.
fn dispatch<F: Fn() -> Status + Send + 'static>(
    stream: TcpStream,
    counters: &Arc<ConnCounters>,
    status: &Arc<Mutex<F>>,
) {
    let taken = counters
        .active
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < MAX_CONNECTIONS).then_some(n + 1))
        .is_ok();
    if !taken {
        counters.refused.fetch_add(1, Ordering::Relaxed);
        // Unread, and without waiting: a client that does not take the
        // answer at once does not get it.
        let _ = stream.set_nonblocking(true);
        let _ = (&stream).write_all(b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n");
        return;
    }
    let (counters, status) = (Arc::clone(counters), Arc::clone(status));
    let spawned = std::thread::Builder::new().name("predictio-metrics-conn".into()).stack_size(256 << 10).spawn({
        let counters = Arc::clone(&counters);
        move || {
            let _ = answer(stream, &counters, &status);
            counters.active.fetch_sub(1, Ordering::AcqRel);
        }
    });
    if spawned.is_err() {
        counters.active.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How reading a request head ended.
#[derive(Debug, PartialEq, Eq)]
enum Head {
    /// A whole head of this many bytes (up to and including its blank line).
    Complete(usize),
    /// [`MAX_REQUEST_HEAD`] bytes and no end in sight.
    TooLarge,
    /// [`REQUEST_DEADLINE`] passed first.
    TimedOut,
    /// The client closed (or failed) first.
    Closed,
}

/// Reads a request head into `buf` (at most its length) until its blank
/// line, giving up at `deadline` however the bytes trickle in.
fn read_head(stream: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> Head {
    let mut len = 0;
    loop {
        if let Some(end) = head_end(&buf[..len]) {
            return Head::Complete(end);
        }
        if len == buf.len() {
            return Head::TooLarge;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return Head::TimedOut;
        }
        match stream.read(&mut buf[len..]) {
            Ok(0) => return Head::Closed,
            Ok(n) => len += n,
            Err(err) if matches!(err.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Head::TimedOut;
            }
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Head::Closed,
        }
    }
}

/// The length of the head in `bytes` up to its blank line, if it has one.
fn head_end(bytes: &[u8]) -> Option<usize> {
    let crlf = bytes.windows(4).position(|w| w == b"\r\n\r\n").map(|at| at + 4);
    let lf = bytes.windows(2).position(|w| w == b"\n\n").map(|at| at + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The answer to a whole request head: status line and body.
fn respond(head: &[u8], status: &Mutex<impl Fn() -> Status>) -> (&'static str, Option<String>) {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = std::str::from_utf8(line).map(str::trim_end);
    let mut parts = line.unwrap_or_default().split(' ');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(method), Some(target), Some(version), None)
            if line.is_ok() && version.starts_with("HTTP/1.") && target.starts_with('/') =>
        {
            match (method, target) {
                ("GET", "/metrics") => {
                    let render_status = status.lock().unwrap_or_else(|e| e.into_inner());
                    ("200 OK", Some(render(&render_status())))
                }
                ("GET", _) => ("404 Not Found", None),
                _ => ("405 Method Not Allowed", None),
            }
        }
        _ => ("400 Bad Request", None),
    }
}

/// Serves one connection: reads its head within the bounds, answers, and
/// writes the answer within [`REQUEST_DEADLINE`].
fn answer(mut stream: TcpStream, counters: &ConnCounters, status: &Mutex<impl Fn() -> Status>) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    let mut buf = [0u8; MAX_REQUEST_HEAD];
    let head = read_head(&mut stream, &mut buf, Instant::now() + REQUEST_DEADLINE);
    let (code, body) = match head {
        Head::Complete(len) => {
            counters.largest_head.fetch_max(len as u64, Ordering::Relaxed);
            let (code, body) = respond(&buf[..len], status);
            let counter = if body.is_some() { &counters.served } else { &counters.bad_requests };
            counter.fetch_add(1, Ordering::Relaxed);
            (code, body)
        }
        Head::TooLarge => {
            counters.largest_head.fetch_max(buf.len() as u64, Ordering::Relaxed);
            counters.too_large.fetch_add(1, Ordering::Relaxed);
            ("431 Request Header Fields Too Large", None)
        }
        Head::TimedOut => {
            counters.timed_out.fetch_add(1, Ordering::Relaxed);
            ("408 Request Timeout", None)
        }
        Head::Closed => return Ok(()),
    };
    let body = body.unwrap_or_default();
    let content_type = if body.is_empty() { "" } else { "Content-Type: text/plain; version=0.0.4\r\n" };
    let response =
        format!("HTTP/1.0 {code}\r\n{content_type}Content-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
    stream.set_write_timeout(Some(REQUEST_DEADLINE))?;
    stream.write_all(response.as_bytes())?;
    if head == Head::TooLarge {
        // The client may still be sending: closing with its bytes unread
        // would reset the connection and could lose the answer. Read a
        // little more, briefly, and drop it.
        stream.shutdown(std::net::Shutdown::Write)?;
        let until = Instant::now() + Duration::from_millis(200);
        let mut discarded = 0;
        while discarded < 16 * MAX_REQUEST_HEAD {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
                break;
            }
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => discarded += n,
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;

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

    fn server() -> MetricsServer {
        MetricsServer::start("127.0.0.1:0", Status::default).expect("bind a free port")
    }

    fn connect(server: &MetricsServer) -> TcpStream {
        let stream = TcpStream::connect(server.addr).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        stream
    }

    /// The answer on `stream` up to the server's close.
    fn response(mut stream: TcpStream) -> String {
        let mut out = Vec::new();
        let _ = stream.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    fn scrape(server: &MetricsServer, request: &[u8]) -> String {
        let mut stream = connect(server);
        stream.write_all(request).expect("request");
        response(stream)
    }

    #[test]
    fn serves_metrics_and_refuses_other_requests() {
        let server = server();
        let ok = scrape(&server, b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.0 200 OK\r\n"), "{ok}");
        assert!(ok.contains("predictio_uptime_seconds"), "{ok}");
        assert!(scrape(&server, b"GET /other HTTP/1.0\r\n\r\n").starts_with("HTTP/1.0 404 "));
        assert!(scrape(&server, b"POST /metrics HTTP/1.0\r\n\r\n").starts_with("HTTP/1.0 405 "));
        assert!(scrape(&server, b"\x16\x03\x01 hello\r\n\r\n").starts_with("HTTP/1.0 400 "));
        assert!(scrape(&server, b"GET /metrics\n\n").starts_with("HTTP/1.0 400 "), "no version: not HTTP/1");
        let stats = server.stats();
        assert_eq!((stats.served, stats.bad_requests), (1, 4), "{stats:?}");
    }

    /// Regression: the request line was read with no length limit (a 1 GiB
    /// line took the daemon to 1.07 GB). Now at most 8 KiB of head is held
    /// and a longer one is answered 431 without reading on.
    #[test]
    fn an_endless_request_line_is_cut_at_8_kib_with_431() {
        let server = server();
        let mut stream = connect(&server);
        // 64 KiB without a line end, then silence (the connection stays
        // open, as a hostile client's would).
        let _ = stream.write_all(&vec![b'A'; 64 << 10]);
        let started = Instant::now();
        let answer = response(stream);
        assert!(answer.starts_with("HTTP/1.0 431 "), "{answer:?}");
        assert!(started.elapsed() < REQUEST_DEADLINE, "answered at once, not at the deadline");
        let stats = server.stats();
        assert_eq!(stats.too_large, 1, "{stats:?}");
        assert!(stats.largest_head <= MAX_REQUEST_HEAD as u64, "{stats:?}");
    }

    /// Regression: one thread served every connection, so a client that
    /// sent half a request held every scrape for as long as it liked.
    #[test]
    fn a_slow_client_does_not_hold_up_a_scrape() {
        let server = server();
        let mut slow = connect(&server);
        slow.write_all(b"GET /metr").expect("half a request");
        std::thread::sleep(Duration::from_millis(100));
        let started = Instant::now();
        let answer = scrape(&server, b"GET /metrics HTTP/1.0\r\n\r\n");
        assert!(answer.starts_with("HTTP/1.0 200 "), "{answer}");
        assert!(started.elapsed() < Duration::from_millis(500), "the scrape waited {:?}", started.elapsed());
        drop(slow);
    }

    /// A client that trickles its head a byte at a time (each read arriving
    /// before a per-read timeout would) is cut off at the deadline.
    #[test]
    fn a_trickling_client_is_cut_off_at_the_deadline() {
        let server = server();
        let mut stream = connect(&server);
        let reader = stream.try_clone().expect("clone");
        let answered = std::thread::spawn(move || (response(reader), Instant::now()));
        let started = Instant::now();
        while !answered.is_finished() && started.elapsed() < 3 * REQUEST_DEADLINE {
            if stream.write_all(b"G").is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let (answer, at) = answered.join().expect("reader");
        assert!(answer.starts_with("HTTP/1.0 408 "), "{answer:?}");
        let took = at.saturating_duration_since(started);
        assert!(took < REQUEST_DEADLINE + Duration::from_millis(800), "cut off after {took:?}");
        assert_eq!(server.stats().timed_out, 1);
    }

    /// Connections are bounded: past the bound one is answered 503 at once,
    /// and the others are served as slots come free.
    #[test]
    fn connections_beyond_the_bound_are_refused_not_queued() {
        let server = server();
        let idle: Vec<TcpStream> = (0..MAX_CONNECTIONS).map(|_| connect(&server)).collect();
        let deadline = Instant::now() + Duration::from_secs(2);
        while server.stats().active < MAX_CONNECTIONS {
            assert!(Instant::now() < deadline, "{:?}", server.stats());
            std::thread::sleep(Duration::from_millis(5));
        }
        let started = Instant::now();
        let answer = scrape(&server, b"GET /metrics HTTP/1.0\r\n\r\n");
        assert!(answer.starts_with("HTTP/1.0 503 "), "{answer:?}");
        assert!(started.elapsed() < Duration::from_millis(500));
        assert_eq!(server.stats().refused, 1);
        drop(idle);
        let deadline = Instant::now() + Duration::from_secs(2);
        while server.stats().active > 0 {
            assert!(Instant::now() < deadline, "closed connections still held: {:?}", server.stats());
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(scrape(&server, b"GET /metrics HTTP/1.0\r\n\r\n").starts_with("HTTP/1.0 200 "));
    }
}
