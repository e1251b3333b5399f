//! Serving an axum router with bounds on what one client can hold: how many connections are
//! open, how long a request head and body may take to arrive, and how many request bytes are
//! being parsed at once. `axum::serve` bounds none of these, so a client that sends its
//! headers and then one byte a minute holds a connection (and a file descriptor) for ever.
//! The project's three servers (`rstar tools serve`, `rstar serve`, `rstar verify serve`) serve
//! through [`serve`], start in the background with [`spawn`] (a [`ServerHandle`] to stop them),
//! and check their bearer tokens with [`bearer_matches`].
//!
//! ```
//! use axum::http::{HeaderMap, HeaderValue, header::AUTHORIZATION};
//! let mut headers = HeaderMap::new();
//! headers.insert(AUTHORIZATION, HeaderValue::from_static("bearer s3cret"));
//! assert!(rstar_http::bearer_matches(&headers, "s3cret"));
//! assert!(!rstar_http::bearer_matches(&headers, "s3cre"));
//! ```
//!
//! | bound | default | on breach |
//! |---|---|---|
//! | open connections ([`ConnectionLimits::max_connections`]) | 4096, or half the soft limit on open files when lower | `503` with a JSON error, connection closed |
//! | request head without progress ([`ConnectionLimits::header_timeout`]): the longest a connection waiting for a head (from its start, or the end of the previous answer) may go without a byte, so it is also the idle keep-alive timeout | 10 s | connection closed |
//! | request head below a rate ([`ConnectionLimits::body_min_rate`]): a head may take `header_timeout` plus its bytes at this rate | 1024 bytes/s | connection closed |
//! | request body without progress ([`ConnectionLimits::body_timeout`]): the longest a body may go without a byte arriving | 15 s | the body read fails: `408` naming `body_timeout` where the handler reads it, connection closed |
//! | request body below a rate ([`ConnectionLimits::body_min_rate`]): a body may take `body_timeout` plus its bytes at this rate, counted from the end of the head | 1024 bytes/s | the same, naming `body_min_rate` |
//! | request bytes being read and handled at once ([`BodyBudget`]) | the server's body limit plus 4 MiB | the request waits for its turn |
//!
//! A body that keeps arriving at the minimum rate is never cut off, however long it is (a 28 GB
//! weight upload over a 1 Gbit/s link takes minutes), while one that trickles a byte now and
//! then is cut off within about `body_timeout`, whatever its `Content-Length`. Heads are timed
//! the same way (hyper's own head deadline is a total, so it is turned off): the socket counts
//! the bytes it reads, and a watchdog closes a connection that waits for a head without
//! progress. A request being handled is never cut off for its handler's time.
//!
//! # Crate features
//! None. It serves through hyper and tokio, which it always needs.
#![warn(missing_docs)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use hyper::StatusCode;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Per-connection bounds of [`serve`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConnectionLimits {
    /// Connections open at once; one more is answered `503` and closed.
    pub max_connections: usize,
    /// The longest a connection waiting for a request head may go without a byte, counted
    /// from its start or the end of the previous response (so an idle keep-alive connection
    /// is closed after it too); after it, a head must also keep up with
    /// [`body_min_rate`](Self::body_min_rate).
    pub header_timeout: Duration,
    /// The longest a request body may go without a byte arriving, and the time a body gets
    /// before [`body_min_rate`](Self::body_min_rate) applies.
    pub body_timeout: Duration,
    /// The slowest a request body may arrive, in bytes a second: the body read fails once the
    /// time since the head exceeds `body_timeout` plus the bytes received at this rate. A head
    /// is held to the same rate after `header_timeout`. 0: no rate, only the timeouts without
    /// progress.
    pub body_min_rate: u64,
}

/// 4096 connections, or half the process's soft limit on open files when that is lower (so
/// the cap is reached before `accept` fails for want of descriptors). The paper's tool
/// service holds 45K calls in flight in about 700 batch requests: the cap must not be what
/// bounds a trainer's own load.
fn default_max_connections() -> usize {
    let soft = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3))
                .and_then(|v| v.parse::<usize>().ok())
        });
    match soft {
        Some(n) => (n / 2).clamp(8, 4096),
        None => 4096,
    }
}

impl ConnectionLimits {
    /// 4096 connections (fewer when the process may open fewer than 8192 files: half its
    /// limit), 10 s for a head, a body cut off after 15 s without a byte or below 1 KiB/s.
    pub fn new() -> Self {
        ConnectionLimits {
            max_connections: default_max_connections(),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(15),
            body_min_rate: 1024,
        }
    }

    /// A message naming the bad field, when a bound is zero.
    ///
    /// # Errors
    /// The field and why, as text (each server wraps it in its own error type).
    pub fn validate(&self) -> Result<(), String> {
        if self.max_connections == 0 {
            return Err("max_connections must be at least 1".into());
        }
        if self.header_timeout.is_zero() {
            return Err("header_timeout must be positive".into());
        }
        if self.body_timeout.is_zero() {
            return Err("body_timeout must be positive".into());
        }
        Ok(())
    }
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self::new()
    }
}

/// The body of a request whose head has arrived: an error once it makes no progress for
/// `idle`, or once it falls behind `min_rate` (after a first `idle`). The clock starts when the
/// handler first reads the body: a request that waits its turn (a [`BodyBudget`]) is not
/// charged for the wait, while the client could not send.
struct TimedBody {
    inner: Body,
    /// The earlier of the idle and the rate deadline, moved on by every frame.
    deadline: Pin<Box<tokio::time::Sleep>>,
    /// When the body was first read (`None` before).
    started: Option<tokio::time::Instant>,
    /// When its last bytes arrived (or it was first read).
    last: tokio::time::Instant,
    /// Body bytes received so far.
    received: u64,
    idle: Duration,
    min_rate: u64,
}

impl TimedBody {
    fn new(inner: Body, idle: Duration, min_rate: u64) -> Self {
        TimedBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(idle)),
            started: None,
            last: tokio::time::Instant::now(),
            received: 0,
            idle,
            min_rate,
        }
    }

    fn started(&self) -> tokio::time::Instant {
        self.started.unwrap_or_else(tokio::time::Instant::now)
    }

    /// When the body is behind `min_rate`: `idle` plus its bytes at the rate, from the head.
    fn rate_deadline(&self) -> Option<tokio::time::Instant> {
        (self.min_rate > 0).then(|| {
            self.started()
                + self.idle
                + Duration::from_secs_f64(self.received as f64 / self.min_rate as f64)
        })
    }

    /// The error for a deadline that passed: the rate's unless no byte came for `idle`.
    fn timed_out(&self) -> axum::Error {
        let now = tokio::time::Instant::now();
        let stalled = now.duration_since(self.last) >= self.idle;
        axum::Error::new(if !stalled {
            BodyTimedOut::Rate {
                received: self.received,
                secs: now.duration_since(self.started()).as_secs_f64(),
                min_rate: self.min_rate,
            }
        } else {
            BodyTimedOut::Idle(self.idle.as_secs_f64())
        })
    }
}

impl HttpBody for TimedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        if self.started.is_none() {
            let now = tokio::time::Instant::now();
            self.started = Some(now);
            self.last = now;
            let idle = self.idle;
            self.deadline.as_mut().reset(now + idle);
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.received += data.len() as u64;
                    self.last = tokio::time::Instant::now();
                    let idle = self.last + self.idle;
                    let next = self.rate_deadline().map_or(idle, |rate| rate.min(idle));
                    self.deadline.as_mut().reset(next);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Pending => {
                if self.deadline.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Some(Err(self.timed_out())));
                }
                Poll::Pending
            }
            done => done,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// The error a [`TimedBody`] fails with.
#[derive(Debug)]
enum BodyTimedOut {
    /// No byte for this many seconds.
    Idle(f64),
    /// Behind the minimum rate.
    Rate {
        received: u64,
        secs: f64,
        min_rate: u64,
    },
}

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyTimedOut::Idle(secs) => write!(
                f,
                "the request body stalled: no byte arrived for {secs} s (body_timeout)"
            ),
            BodyTimedOut::Rate {
                received,
                secs,
                min_rate,
            } => write!(
                f,
                "the request body arrived too slowly: {received} bytes in {secs:.1} s, below {min_rate} bytes/s (body_min_rate)"
            ),
        }
    }
}

impl std::error::Error for BodyTimedOut {}

/// Whether an extractor's failure to read the body came from [`TimedBody`]'s deadline.
pub fn is_body_timeout(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cause {
        let text = e.to_string();
        if e.is::<BodyTimedOut>()
            || text.contains("(body_timeout)")
            || text.contains("(body_min_rate)")
        {
            return true;
        }
        cause = e.source();
    }
    false
}

/// A bound on the request bytes being read and handled at once, as an axum middleware
/// ([`BodyBudget::layer`]): a request holds permits for its `Content-Length` (1 MiB when it
/// has none) while its handler runs; requests larger than the whole budget take all of it.
/// Large bodies then queue behind each other instead of being parsed together, and small
/// requests keep the rest of the budget.
#[derive(Debug, Clone)]
pub struct BodyBudget {
    permits: Arc<Semaphore>,
    kib: u32,
}

impl BodyBudget {
    /// A budget of `bytes` (rounded up to KiB).
    pub fn new(bytes: usize) -> Self {
        let kib = u32::try_from(bytes.div_ceil(1024).max(1)).unwrap_or(u32::MAX >> 4);
        BodyBudget {
            permits: Arc::new(Semaphore::new(kib as usize)),
            kib,
        }
    }

    /// The permits (KiB) a request with this `Content-Length` holds.
    fn cost(&self, length: Option<u64>) -> u32 {
        let bytes = length.unwrap_or(1 << 20);
        u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .clamp(1, self.kib)
    }

    /// The middleware: `route.layer(axum::middleware::from_fn_with_state(budget, BodyBudget::layer))`.
    pub async fn layer(State(budget): State<BodyBudget>, request: Request, next: Next) -> Response {
        let length = request
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let cost = budget.cost(length);
        let Ok(_permit) = budget.permits.acquire_many(cost).await else {
            return StatusCode::SERVICE_UNAVAILABLE.into_response();
        };
        next.run(request).await
    }
}

/// A server [`spawn`]ed in the background: where it listens, and how to stop it. The one
/// handle of the project's servers (`rstar_serve::start` returns it; `rstar-toolserver`'s
/// running server holds one).
#[derive(Debug)]
pub struct ServerHandle {
    addr: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl ServerHandle {
    /// The bound address (the real port when the listener asked for port 0).
    pub fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// `http://host:port`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting connections, lets every open connection finish its request, and waits
    /// for the serving loop to end.
    ///
    /// # Errors
    /// The listener's error, or the serving task's failure (a panic), as an I/O error.
    pub async fn shutdown(mut self) -> std::io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match (&mut self.task).await {
            Ok(result) => result,
            Err(e) => Err(std::io::Error::other(format!(
                "the server task on {} failed: {e}",
                self.addr
            ))),
        }
    }
}

/// Serves `app` on `listener` within `limits` on a task of the current tokio runtime, until
/// [`ServerHandle::shutdown`] (or until the handle is dropped: the server stops then too).
///
/// # Errors
/// The listener's address cannot be read.
pub fn spawn(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
) -> std::io::Result<ServerHandle> {
    let addr = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, app, limits, async move {
        // A dropped handle drops the sender: the server stops too.
        let _ = stopped.await;
    }));
    Ok(ServerHandle {
        addr,
        stop: Some(stop),
        task,
    })
}

/// Serves `app` on `listener` until `shutdown` resolves, within `limits`; then stops
/// accepting, lets every open connection finish its request and returns.
///
/// # Errors
/// Never for one connection's failure (logged at debug); only the listener's own errors
/// are returned, as `axum::serve` does.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (idle, min_rate) = (limits.body_timeout, limits.body_min_rate);
    let app = app.layer(axum::middleware::from_fn(
        move |request: Request, next: Next| async move {
            let request = request.map(|inner| Body::new(TimedBody::new(inner, idle, min_rate)));
            next.run(request).await
        },
    ));
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of file descriptors, or a connection reset before it was accepted: the
                // listener itself is fine, so wait a moment and go on (as axum::serve does).
                Err(e) => {
                    tracing::debug!("accept error: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = Arc::clone(&connections).try_acquire_owned() else {
            tokio::spawn(refuse(stream, limits.max_connections));
            continue;
        };
        let mut builder = hyper::server::conn::http1::Builder::new();
        // Heads are timed by progress (`HeadClock`), not by hyper's total deadline.
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(None)
            .keep_alive(true);
        let clock = Arc::new(HeadClock::new());
        let service = Watched {
            app: TowerToHyperService::new(app.clone()),
            clock: Arc::clone(&clock),
        };
        let stream = CountedIo {
            inner: stream,
            clock: Arc::clone(&clock),
        };
        let conn = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        let (idle, min_rate) = (limits.header_timeout, limits.body_min_rate);
        tokio::spawn(async move {
            tokio::select! {
                done = conn => if let Err(e) = done {
                    tracing::debug!(%peer, "connection: {e}");
                },
                cut = clock.head_overdue(idle, min_rate) => tracing::debug!(%peer, "connection closed: {cut}"),
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// What one connection's socket has read, and whether a request is being handled: the
/// clock of [`HeadClock::head_overdue`]. Times are nanoseconds from `epoch`.
#[derive(Debug)]
struct HeadClock {
    epoch: tokio::time::Instant,
    /// Bytes read from the socket.
    read: AtomicU64,
    /// When a read last brought bytes.
    last_read: AtomicU64,
    /// Requests whose head has arrived and whose answer has not been sent.
    handling: AtomicUsize,
    /// When the connection last began to wait for a head: its start, or the end of an answer.
    waiting_since: AtomicU64,
    /// `read` then.
    read_then: AtomicU64,
}

impl HeadClock {
    fn new() -> Self {
        HeadClock {
            epoch: tokio::time::Instant::now(),
            read: AtomicU64::new(0),
            last_read: AtomicU64::new(0),
            handling: AtomicUsize::new(0),
            waiting_since: AtomicU64::new(0),
            read_then: AtomicU64::new(0),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn at(&self, nanos: u64) -> tokio::time::Instant {
        self.epoch + Duration::from_nanos(nanos)
    }

    fn bytes_read(&self, n: usize) {
        self.read.fetch_add(n as u64, Ordering::SeqCst);
        self.last_read.store(self.now(), Ordering::SeqCst);
    }

    /// A request's head has arrived; the [`Handling`] guard marks its answer sent (or dropped).
    fn begin(self: &Arc<Self>) -> Handling {
        self.handling.fetch_add(1, Ordering::SeqCst);
        Handling(Arc::clone(self))
    }

    /// Resolves when the connection, waiting for a request head (or idle between requests),
    /// has gone `idle` without a byte, or has fallen behind `min_rate` bytes a second after a
    /// first `idle` (0: no rate); never while a request is being handled. The reason, for the
    /// log.
    async fn head_overdue(&self, idle: Duration, min_rate: u64) -> String {
        loop {
            if self.handling.load(Ordering::SeqCst) > 0 {
                tokio::time::sleep(idle).await;
                continue;
            }
            let since = self.waiting_since.load(Ordering::SeqCst);
            let bytes = self
                .read
                .load(Ordering::SeqCst)
                .saturating_sub(self.read_then.load(Ordering::SeqCst));
            let last = self.last_read.load(Ordering::SeqCst).max(since);
            let stalled = self.at(last) + idle;
            let behind = (min_rate > 0).then(|| {
                self.at(since) + idle + Duration::from_secs_f64(bytes as f64 / min_rate as f64)
            });
            let deadline = behind.map_or(stalled, |b| b.min(stalled));
            if tokio::time::Instant::now() >= deadline && self.handling.load(Ordering::SeqCst) == 0
            {
                return if deadline == stalled {
                    format!(
                        "no byte of a request head for {} s (header_timeout)",
                        idle.as_secs_f64()
                    )
                } else {
                    format!(
                        "a request head below {min_rate} bytes/s: {bytes} bytes (body_min_rate)"
                    )
                };
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// A request being handled on its connection; dropped with its answer's body (sent, or
/// abandoned), which starts the wait for the next head.
#[derive(Debug)]
struct Handling(Arc<HeadClock>);

impl Drop for Handling {
    fn drop(&mut self) {
        let clock = &self.0;
        clock
            .read_then
            .store(clock.read.load(Ordering::SeqCst), Ordering::SeqCst);
        clock.waiting_since.store(clock.now(), Ordering::SeqCst);
        clock.handling.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A socket that tells its [`HeadClock`] of every byte read.
struct CountedIo {
    inner: tokio::net::TcpStream,
    clock: Arc<HeadClock>,
}

impl tokio::io::AsyncRead for CountedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.clock.bytes_read(n);
        }
        polled
    }
}

impl tokio::io::AsyncWrite for CountedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// The router as one connection's hyper service: each request holds a [`Handling`] mark from
/// its head until its answer's body is done.
struct Watched {
    app: TowerToHyperService<Router>,
    clock: Arc<HeadClock>,
}

type Answer = Result<Response, std::convert::Infallible>;

impl hyper::service::Service<hyper::Request<hyper::body::Incoming>> for Watched {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Answer> + Send>>;

    fn call(&self, request: hyper::Request<hyper::body::Incoming>) -> Self::Future {
        let handling = self.clock.begin();
        let answer = self.app.call(request);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|inner| {
                Body::new(MarkedBody {
                    inner,
                    _handling: handling,
                })
            }))
        })
    }
}

/// An answer's body that holds its request's [`Handling`] mark until dropped.
struct MarkedBody {
    inner: Body,
    _handling: Handling,
}

impl HttpBody for MarkedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// Answers a connection over the cap with a `503` and closes it, after reading its request
/// head (for at most a second), so that the client reads an answer to the request it sent.
async fn refuse(mut stream: tokio::net::TcpStream, cap: usize) {
    use tokio::io::AsyncReadExt;
    let body = format!(
        "{{\"error\":\"too many connections: this server accepts {cap} at once (max_connections); retry later\"}}"
    );
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\nretry-after: 1\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let mut head = Vec::new();
        let mut buf = [0u8; 2048];
        while head.len() < 16 << 10 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        let _ = stream.write_all(response.as_bytes()).await;
        let _ = stream.shutdown().await;
    })
    .await;
}

/// Whether `headers` carry `Authorization: Bearer <token>`, compared in time that depends on
/// the lengths only. The check of `rstar tools serve --token` and of `rstar serve --api-key`.
pub fn bearer_matches(headers: &axum::http::HeaderMap, token: &str) -> bool {
    // The scheme name is case-insensitive (RFC 7235, section 2.1): `bearer`, `BEARER`.
    let given = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, credentials) = v.split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| credentials.trim_start_matches(' '))
        })
        .unwrap_or("");
    constant_time_eq(given.as_bytes(), token.as_bytes())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
