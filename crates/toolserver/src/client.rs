//! The batching client: calls grouped into batches of up to 64, a concurrency
//! limit, retries with exponential backoff, and endpoints chosen by load.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, Request, Uri};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::api::{
    BatchResult, BatchSubmission, ErrorBody, Reason, RunCodeRequest, RunCodeResponse, ServerStatus,
    Submission, SubmissionResult, VerifyItem, VerifyRequest, VerifyResponse, VerifyVerdict,
};
use crate::error::{Error, Result};

/// The largest batch the client sends (the paper's send workers batch 64).
pub const MAX_BATCH: usize = 64;

/// The largest `/verify` request the client sends: scoring is cheap next to a tool call, and
/// the server's default cap (`max_batch`) is 1024.
pub const MAX_VERIFY_BATCH: usize = 1024;

/// Builds a [`Client`]. `Default` delegates to [`ClientBuilder::new`].
///
/// | option | default |
/// |---|---|
/// | `batch_size` | 64 (at most 64) |
/// | `linger` | 5 ms: how long [`Client::run`] waits to fill a batch, only while every batch request is in flight (an idle client sends at once) |
/// | `batch_timeout` | 300 s for one batch request, then it counts as a transport error |
/// | `concurrency` | 8 batch requests in flight (rStar's 8 senders) |
/// | `max_retries` | 4, on `queue_timeout` results and transport errors (rStar retries 4×) |
/// | `patience` | 600 s: how long a call may keep being refused (`429`, `503`) before it is answered `queue_timeout`; refusals do not count against `max_retries` |
/// | `backoff` | 0.5 s, doubled each retry (rStar's base) |
/// | `status_interval` | 1 s between `/status` polls per endpoint |
/// | `long_batch` | true: `/run/long-batch` (no queue limit), as rStar does |
/// | `verify_batch_size` | 256 answers per `/verify` request (at most 1024) |
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    endpoints: Vec<String>,
    token: Option<String>,
    batch_size: usize,
    linger: Duration,
    batch_timeout: Duration,
    concurrency: usize,
    max_retries: u32,
    backoff: Duration,
    status_interval: Duration,
    long_batch: bool,
    verify_batch_size: usize,
    patience: Duration,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl ClientBuilder {
    /// The documented defaults and no endpoint yet.
    pub fn new() -> Self {
        Self {
            endpoints: Vec::new(),
            token: None,
            batch_size: MAX_BATCH,
            linger: Duration::from_millis(5),
            batch_timeout: Duration::from_secs(300),
            concurrency: 8,
            max_retries: 4,
            backoff: Duration::from_millis(500),
            status_interval: Duration::from_secs(1),
            long_batch: true,
            verify_batch_size: 256,
            patience: Duration::from_secs(600),
        }
    }

    /// Adds a server, e.g. `http://10.0.0.7:8000` (plain HTTP only).
    pub fn endpoint(mut self, url: impl Into<String>) -> Self {
        self.endpoints.push(url.into());
        self
    }

    /// Sends `Authorization: Bearer <token>` to every endpoint.
    pub fn token(mut self, token: Option<String>) -> Self {
        self.token = token;
        self
    }

    /// Calls per batch request (1 to 64).
    pub fn batch_size(mut self, n: usize) -> Self {
        self.batch_size = n;
        self
    }

    /// How long [`Client::run`] waits for more calls before sending a partial batch.
    pub fn linger(mut self, wait: Duration) -> Self {
        self.linger = wait;
        self
    }

    /// The time limit of one batch request.
    pub fn batch_timeout(mut self, limit: Duration) -> Self {
        self.batch_timeout = limit;
        self
    }

    /// Batch requests in flight at once, over all endpoints.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }

    /// Retries after the first attempt.
    pub fn max_retries(mut self, n: u32) -> Self {
        self.max_retries = n;
        self
    }

    /// The first retry's delay; each later one doubles it.
    pub fn backoff(mut self, base: Duration) -> Self {
        self.backoff = base;
        self
    }

    /// How often each endpoint's `/status` is refreshed.
    pub fn status_interval(mut self, every: Duration) -> Self {
        self.status_interval = every;
        self
    }

    /// `/run/long-batch` (true) or `/run/batch` (false, subject to the server's queue limit).
    pub fn long_batch(mut self, on: bool) -> Self {
        self.long_batch = on;
        self
    }

    /// How long calls may keep being refused (a server's queue full, `429`; draining, `503`)
    /// before they are answered `queue_timeout`. While refused they wait for room, on another
    /// endpoint when one has it; nothing of a refused request ran, so resending runs nothing
    /// twice.
    pub fn patience(mut self, limit: Duration) -> Self {
        self.patience = limit;
        self
    }

    /// Answers per `/verify` request of [`Client::verify`] (1 to [`MAX_VERIFY_BATCH`]).
    pub fn verify_batch_size(mut self, n: usize) -> Self {
        self.verify_batch_size = n;
        self
    }

    /// Checks the options and starts the batching task (needs a tokio runtime).
    pub fn build(self) -> Result<Client> {
        if self.endpoints.is_empty() {
            return Err(Error::Config(
                "the client needs at least one endpoint".into(),
            ));
        }
        if !(1..=MAX_BATCH).contains(&self.batch_size) {
            return Err(Error::Config(format!(
                "batch_size must be 1 to {MAX_BATCH}, got {}",
                self.batch_size
            )));
        }
        if !(1..=MAX_VERIFY_BATCH).contains(&self.verify_batch_size) {
            return Err(Error::Config(format!(
                "verify_batch_size must be 1 to {MAX_VERIFY_BATCH}, got {}",
                self.verify_batch_size
            )));
        }
        if self.concurrency == 0 || self.batch_timeout.is_zero() {
            return Err(Error::Config(
                "concurrency and batch_timeout must be positive".into(),
            ));
        }
        let endpoints = self
            .endpoints
            .iter()
            .map(|e| Endpoint::parse(e))
            .collect::<Result<Vec<_>>>()?;
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::Config("build the client inside a tokio runtime".into()))?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let http = HttpClient::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        let shared = Arc::new(Shared {
            endpoints,
            http,
            gate: Semaphore::new(self.concurrency),
            token: self.token,
            batch_timeout: self.batch_timeout,
            max_retries: self.max_retries,
            backoff: self.backoff,
            status_interval: self.status_interval,
            long_batch: self.long_batch,
            patience: self.patience,
            concurrency: self.concurrency,
            room: tokio::sync::Notify::new(),
        });
        let (tx, rx) = mpsc::unbounded_channel();
        runtime.spawn(batcher(
            Arc::clone(&shared),
            rx,
            self.batch_size,
            self.linger,
        ));
        Ok(Client {
            shared,
            tx,
            batch_size: self.batch_size,
            verify_batch_size: self.verify_batch_size,
        })
    }
}

/// A client for one or more servers speaking the code-judge protocol. Cheap
/// to clone; the batching task stops when the last clone is dropped.
///
/// Every call gets exactly one [`SubmissionResult`]: after the retries run
/// out, a call that kept timing out in the queue keeps its `queue_timeout`
/// result, and one that kept failing in transport gets `internal_error` with
/// the error in `stderr`.
#[derive(Debug, Clone)]
pub struct Client {
    shared: Arc<Shared>,
    tx: mpsc::UnboundedSender<Pending>,
    batch_size: usize,
    verify_batch_size: usize,
}

type Pending = (Submission, oneshot::Sender<SubmissionResult>);

/// One endpoint's load as the client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointLoad {
    /// The endpoint's URL.
    pub url: String,
    /// Its queue length at the last `/status`.
    pub queue: usize,
    /// Its live workers at the last `/status`.
    pub workers: usize,
    /// Calls this client has sent there and not yet got back.
    pub in_flight: usize,
    /// Calls this client has sent there in total.
    pub sent: usize,
    /// Calls the endpoint held (waiting or running) at the last `/status`.
    pub admitted: usize,
    /// The most calls it holds before refusing (`429`); 0 when it does not say.
    pub max_queue: usize,
    /// Requests of this client it refused (`429`, `503`).
    pub refused: usize,
}

impl Client {
    /// A builder with the documented defaults.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::new()
    }

    /// Runs one call, batched with other concurrent [`Client::run`] calls.
    pub async fn run(&self, sub: Submission) -> SubmissionResult {
        let sub_id = sub.sub_id.clone().unwrap_or_default();
        let (reply, rx) = oneshot::channel();
        if self.tx.send((sub, reply)).is_err() {
            return SubmissionResult::failed(
                sub_id,
                Reason::InternalError,
                "the client is shut down",
            );
        }
        rx.await.unwrap_or_else(|_| {
            SubmissionResult::failed(sub_id, Reason::InternalError, "the batching task stopped")
        })
    }

    /// Runs many calls in batches of the configured size, concurrently up to
    /// the concurrency limit; results in input order.
    pub async fn run_batch(&self, subs: Vec<Submission>) -> Vec<SubmissionResult> {
        self.run_batch_timed(subs)
            .await
            .into_iter()
            .map(|(r, _)| r)
            .collect()
    }

    /// [`run_batch`](Self::run_batch), with each call's latency: from this call to the
    /// answer of the batch request that carried it (retries included).
    pub async fn run_batch_timed(
        &self,
        subs: Vec<Submission>,
    ) -> Vec<(SubmissionResult, Duration)> {
        let started = Instant::now();
        let mut chunks = Vec::new();
        let mut subs = subs.into_iter().peekable();
        while subs.peek().is_some() {
            let chunk: Vec<_> = subs.by_ref().take(self.batch_size).collect();
            let ids: Vec<String> = chunk
                .iter()
                .map(|s| s.sub_id.clone().unwrap_or_default())
                .collect();
            let shared = Arc::clone(&self.shared);
            chunks.push((
                ids,
                tokio::spawn(async move {
                    let results = shared.send_batch(chunk).await;
                    (results, started.elapsed())
                }),
            ));
        }
        let mut out = Vec::new();
        for (ids, chunk) in chunks {
            match chunk.await {
                Ok((results, took)) => out.extend(results.into_iter().map(|r| (r, took))),
                // Still one result per call, even if a batch task died.
                Err(e) => out.extend(ids.into_iter().map(|id| {
                    let r = SubmissionResult::failed(
                        id,
                        Reason::InternalError,
                        format!("the batch task failed: {e}"),
                    );
                    (r, started.elapsed())
                })),
            }
        }
        out
    }

    /// Scores answers on the servers' `POST /verify` (the `rstar-verifier` crate there): in
    /// requests of `verify_batch_size` answers, sent concurrently up to the concurrency limit
    /// to the least loaded endpoints, each retried on transport errors and 5xx answers (on
    /// another endpoint when one went down). One verdict per answer, in input order.
    ///
    /// # Errors
    /// The first request that still failed after its retries, or that the server refused
    /// (a 4xx: a bad mode, too many answers for its `max_batch`, a wrong token): an answer is
    /// never scored by guessing.
    pub async fn verify(&self, items: Vec<VerifyItem>) -> Result<Vec<VerifyVerdict>> {
        let mut chunks = Vec::new();
        let mut items = items.into_iter().peekable();
        while items.peek().is_some() {
            let chunk: Vec<VerifyItem> = items.by_ref().take(self.verify_batch_size).collect();
            let shared = Arc::clone(&self.shared);
            chunks.push(tokio::spawn(async move { shared.send_verify(chunk).await }));
        }
        let mut out = Vec::new();
        for chunk in chunks {
            let verdicts = chunk
                .await
                .map_err(|e| Error::Config(format!("a verify task failed: {e}")))??;
            out.extend(verdicts);
        }
        Ok(out)
    }

    /// Sends one call to `/run` (no batching, same retries).
    pub async fn run_single(&self, sub: Submission) -> SubmissionResult {
        self.shared.send_single(sub).await
    }

    /// SandboxFusion's `/run_code` on the least loaded endpoint, retried on
    /// transport errors and `SandboxError`.
    pub async fn run_code(&self, req: &RunCodeRequest) -> Result<RunCodeResponse> {
        let mut attempt = 0;
        loop {
            let _permit = self
                .shared
                .gate
                .acquire()
                .await
                .map_err(|_| Error::Config("the client is shut down".into()))?;
            let ep = self.shared.pick(1).await;
            let res: Result<RunCodeResponse> = self.shared.post(ep, "/run_code", req, 1).await;
            match res {
                Ok(r)
                    if r.status != crate::api::RunStatus::SandboxError
                        || attempt >= self.shared.max_retries =>
                {
                    return Ok(r);
                }
                Err(e) if !retryable(&e) || attempt >= self.shared.max_retries => return Err(e),
                _ => {}
            }
            tokio::time::sleep(self.shared.delay(attempt)).await;
            attempt += 1;
        }
    }

    /// `GET /status` of endpoint `index` (also refreshes its load).
    pub async fn status(&self, index: usize) -> Result<ServerStatus> {
        self.shared.refresh(index).await
    }

    /// Whether endpoint `index` answers `/ping`.
    pub async fn ping(&self, index: usize) -> Result<()> {
        let ep = &self.shared.endpoints[index];
        let _: serde_json::Value = self.shared.request(ep, Method::GET, "/ping", None).await?;
        Ok(())
    }

    /// Each endpoint's load as last seen.
    pub fn loads(&self) -> Vec<EndpointLoad> {
        self.shared
            .endpoints
            .iter()
            .map(|e| EndpointLoad {
                url: e.url.clone(),
                queue: e.queue.load(Ordering::SeqCst),
                workers: e.workers.load(Ordering::SeqCst),
                in_flight: e.in_flight.load(Ordering::SeqCst),
                sent: e.sent.load(Ordering::SeqCst),
                admitted: e.admitted.load(Ordering::SeqCst),
                max_queue: e.max_queue.load(Ordering::SeqCst),
                refused: e.refused.load(Ordering::SeqCst),
            })
            .collect()
    }
}

#[derive(Debug)]
struct Endpoint {
    url: String,
    queue: AtomicUsize,
    workers: AtomicUsize,
    in_flight: AtomicUsize,
    sent: AtomicUsize,
    /// Calls held there (waiting or running) and its limit, at the last `/status`; and of
    /// those, the ones not this client's.
    admitted: AtomicUsize,
    others: AtomicUsize,
    max_queue: AtomicUsize,
    /// Requests it refused, and until when it is treated as full after the last refusal.
    refused: AtomicUsize,
    full_until: Mutex<Option<Instant>>,
    /// When the last `/status` poll started, and until when the endpoint is
    /// avoided after a transport error.
    polled: Mutex<Option<Instant>>,
    down_until: Mutex<Option<Instant>>,
    /// Consecutive transport failures; each doubles the time avoided.
    failures: AtomicU32,
}

impl Endpoint {
    fn parse(url: &str) -> Result<Self> {
        let trimmed = url.trim_end_matches('/');
        let bad = |message: &str| Error::Endpoint {
            endpoint: url.to_string(),
            message: message.to_string(),
        };
        let uri: Uri = trimmed
            .parse()
            .map_err(|e: hyper::http::uri::InvalidUri| bad(&e.to_string()))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(other) => {
                return Err(bad(&format!(
                    "scheme `{other}` is not supported (plain http only)"
                )));
            }
            None => return Err(bad("expected http://host:port")),
        }
        if uri.host().is_none() {
            return Err(bad("no host"));
        }
        Ok(Self {
            url: trimmed.to_string(),
            queue: AtomicUsize::new(0),
            workers: AtomicUsize::new(1),
            in_flight: AtomicUsize::new(0),
            sent: AtomicUsize::new(0),
            admitted: AtomicUsize::new(0),
            others: AtomicUsize::new(0),
            max_queue: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
            full_until: Mutex::new(None),
            polled: Mutex::new(None),
            down_until: Mutex::new(None),
            failures: AtomicU32::new(0),
        })
    }

    /// Records how a request ended: a transport failure takes the endpoint
    /// out of rotation for `base · 2^(failures-1)` (at most 30 s).
    fn record(&self, failed: bool, base: Duration) {
        if failed {
            let n = self.failures.fetch_add(1, Ordering::SeqCst);
            let wait =
                backoff_delay(base.max(Duration::from_millis(100)), n).min(Duration::from_secs(30));
            *self.down_until.lock().expect("down lock") = Some(Instant::now() + wait);
        } else {
            self.failures.store(0, Ordering::SeqCst);
            *self.down_until.lock().expect("down lock") = None;
        }
    }

    /// Whether `calls` more calls fit: not refused within its `Retry-After`, and, when the
    /// endpoint reports its limit, the calls others hold there (what it last reported, less
    /// what this client had in flight then) plus this client's plus `calls` within it.
    ///
    /// When they fit, they are reserved at once (added to what this client has in flight
    /// there), so two requests never both take the last room.
    fn try_reserve(&self, calls: usize, now: Instant) -> bool {
        if self.is_full(now) {
            return false;
        }
        let limit = self.max_queue.load(Ordering::SeqCst);
        let others = self.others.load(Ordering::SeqCst);
        self.in_flight
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |mine| {
                // A request larger than the whole queue is sent to be refused (422) at once.
                (limit == 0 || calls > limit || others + mine + calls <= limit)
                    .then_some(mine + calls)
            })
            .is_ok()
    }

    /// Records a refusal: the endpoint counts as full for `wait`.
    fn refuse(&self, wait: Duration) {
        self.refused.fetch_add(1, Ordering::SeqCst);
        *self.full_until.lock().expect("full lock") = Some(Instant::now() + wait);
    }

    fn is_full(&self, now: Instant) -> bool {
        self.full_until
            .lock()
            .expect("full lock")
            .is_some_and(|t| t > now)
    }

    /// Expected wait per worker: the reported queue plus what this client has
    /// in flight there, over the live workers.
    fn score(&self) -> f64 {
        let pending = self.queue.load(Ordering::SeqCst) + self.in_flight.load(Ordering::SeqCst);
        pending as f64 / self.workers.load(Ordering::SeqCst).max(1) as f64
    }
}

#[derive(Debug)]
struct Shared {
    endpoints: Vec<Endpoint>,
    http: HttpClient<HttpConnector, Full<Bytes>>,
    gate: Semaphore,
    token: Option<String>,
    batch_timeout: Duration,
    max_retries: u32,
    backoff: Duration,
    status_interval: Duration,
    long_batch: bool,
    patience: Duration,
    concurrency: usize,
    /// Woken whenever a request ends, freeing the room it held.
    room: tokio::sync::Notify,
}

/// How often a request waiting for room looks again without being woken.
const ROOM_POLL: Duration = Duration::from_millis(100);

fn retryable(e: &Error) -> bool {
    match e {
        Error::Transport { .. } | Error::Protocol { .. } | Error::Refused { .. } => true,
        Error::Status { status, .. } => *status >= 500,
        _ => false,
    }
}

impl Shared {
    fn delay(&self, attempt: u32) -> Duration {
        backoff_delay(self.backoff, attempt)
    }

    /// The endpoint with the least expected wait that has room for `calls` calls, skipping
    /// endpoints that failed recently unless all did, with the calls reserved there (counted
    /// in flight until [`Shared::post`] ends). When every live endpoint is full it waits for
    /// room (backpressure: no call is handed to a saturated server), woken as this client's
    /// requests end and at least every [`ROOM_POLL`] (others' load, `Retry-After`), for up
    /// to the patience; then it takes the least loaded. Refreshes stale loads in the
    /// background.
    async fn pick(self: &Arc<Self>, calls: usize) -> usize {
        let started = Instant::now();
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            let now = Instant::now();
            self.refresh_stale(now);
            let up = |e: &Endpoint| {
                e.down_until
                    .lock()
                    .expect("down lock")
                    .is_none_or(|t| t <= now)
            };
            let mut order: Vec<usize> = (0..self.endpoints.len())
                .filter(|&i| up(&self.endpoints[i]))
                .collect();
            order.sort_by(|&a, &b| {
                self.endpoints[a]
                    .score()
                    .total_cmp(&self.endpoints[b].score())
            });
            if let Some(i) = order
                .iter()
                .copied()
                .find(|&i| self.endpoints[i].try_reserve(calls, now))
            {
                return i;
            }
            if order.is_empty() || now.duration_since(started) >= self.patience {
                let best = |keep: &dyn Fn(&Endpoint) -> bool| {
                    self.endpoints
                        .iter()
                        .enumerate()
                        .filter(|(_, e)| keep(e))
                        .min_by(|(_, a), (_, b)| a.score().total_cmp(&b.score()))
                        .map(|(i, _)| i)
                };
                let i = best(&up).or_else(|| best(&|_| true)).unwrap_or(0);
                self.endpoints[i]
                    .in_flight
                    .fetch_add(calls, Ordering::SeqCst);
                return i;
            }
            let _ = tokio::time::timeout(ROOM_POLL, room).await;
        }
    }

    /// Starts a `/status` poll of every endpoint whose load is older than the status
    /// interval: always with several endpoints (to choose among them), and with one when
    /// it is full (to see room come back).
    fn refresh_stale(self: &Arc<Self>, now: Instant) {
        for i in 0..self.endpoints.len() {
            let ep = &self.endpoints[i];
            if self.endpoints.len() == 1
                && ep.max_queue.load(Ordering::SeqCst) == 0
                && !ep.is_full(now)
            {
                continue;
            }
            let stale = {
                let mut polled = ep.polled.lock().expect("poll lock");
                let stale = polled.is_none_or(|t| now.duration_since(t) >= self.status_interval);
                if stale {
                    *polled = Some(now);
                }
                stale
            };
            if stale {
                let shared = Arc::clone(self);
                tokio::spawn(async move {
                    let _ = shared.refresh(i).await;
                });
            }
        }
    }

    async fn refresh(&self, index: usize) -> Result<ServerStatus> {
        let ep = &self.endpoints[index];
        let res = self.request(ep, Method::GET, "/status", None).await;
        ep.record(res.as_ref().is_err_and(retryable), self.backoff);
        let status: ServerStatus = res?;
        ep.queue.store(status.queue, Ordering::SeqCst);
        ep.workers
            .store(status.num_workers.max(1), Ordering::SeqCst);
        ep.admitted.store(status.admitted, Ordering::SeqCst);
        ep.others.store(
            status
                .admitted
                .saturating_sub(ep.in_flight.load(Ordering::SeqCst)),
            Ordering::SeqCst,
        );
        ep.max_queue.store(status.max_queue, Ordering::SeqCst);
        Ok(status)
    }

    async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        index: usize,
        path: &str,
        body: &B,
        calls: usize,
    ) -> Result<T> {
        let ep = &self.endpoints[index];
        let res = match serde_json::to_vec(body) {
            Ok(bytes) => {
                ep.sent.fetch_add(calls, Ordering::SeqCst);
                self.request(ep, Method::POST, path, Some(Bytes::from(bytes)))
                    .await
            }
            Err(e) => Err(Error::Protocol {
                endpoint: ep.url.clone(),
                message: e.to_string(),
            }),
        };
        // The room `pick` reserved is free again.
        ep.in_flight.fetch_sub(calls, Ordering::SeqCst);
        self.room.notify_waiters();
        ep.record(res.as_ref().is_err_and(retryable), self.backoff);
        res
    }

    async fn request<T: DeserializeOwned>(
        &self,
        ep: &Endpoint,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<T> {
        let url = format!("{}{path}", ep.url);
        let transport = |message: String| Error::Transport {
            endpoint: ep.url.clone(),
            message,
        };
        let mut req = Request::builder().method(method).uri(&url);
        if body.is_some() {
            req = req.header(CONTENT_TYPE, "application/json");
        }
        if let Some(token) = &self.token {
            req = req.header(AUTHORIZATION, format!("Bearer {token}"));
        }
        let req = req
            .body(Full::new(body.unwrap_or_default()))
            .map_err(|e| transport(e.to_string()))?;
        let exchange = async {
            let resp = self
                .http
                .request(req)
                .await
                .map_err(|e| transport(format!("{e:?}")))?;
            let status = resp.status();
            let retry_after = resp
                .headers()
                .get(hyper::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(|s| Duration::from_secs_f64(s.min(60.0)));
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| transport(e.to_string()))?
                .to_bytes();
            Ok::<_, Error>((status, bytes, retry_after))
        };
        let (status, bytes, retry_after) = tokio::time::timeout(self.batch_timeout, exchange)
            .await
            .map_err(|_| transport(format!("no answer within {:?}", self.batch_timeout)))??;
        if !status.is_success() {
            let detail = serde_json::from_slice::<ErrorBody>(&bytes)
                .map(|b| b.detail)
                .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).into_owned());
            if matches!(status.as_u16(), 429 | 503) {
                return Err(Error::Refused {
                    endpoint: ep.url.clone(),
                    status: status.as_u16(),
                    detail,
                    retry_after,
                });
            }
            return Err(Error::Status {
                endpoint: ep.url.clone(),
                status: status.as_u16(),
                detail,
            });
        }
        serde_json::from_slice(&bytes).map_err(|e| Error::Protocol {
            endpoint: ep.url.clone(),
            message: e.to_string(),
        })
    }

    async fn send_single(self: &Arc<Self>, sub: Submission) -> SubmissionResult {
        let sub_id = sub.sub_id.clone().unwrap_or_default();
        let mut attempt = 0;
        let mut refusals = Refusals::default();
        loop {
            // The permit is held for the request only, not for the backoff below.
            let (ep, res): (usize, Result<SubmissionResult>) = {
                let Ok(_permit) = self.gate.acquire().await else {
                    return SubmissionResult::failed(
                        sub_id,
                        Reason::InternalError,
                        "the client is shut down",
                    );
                };
                let ep = self.pick(1).await;
                (ep, self.post(ep, "/run", &sub, 1).await)
            };
            let last = attempt >= self.max_retries;
            match res {
                Err(e @ Error::Refused { .. }) => {
                    if let Some(r) = self.refused(&mut refusals, ep, &e, &sub_id) {
                        return r;
                    }
                    continue;
                }
                Ok(r) if r.reason != Reason::QueueTimeout || last => return r,
                Err(e) if !retryable(&e) || last => return failure(sub_id, &e),
                _ => {}
            }
            tokio::time::sleep(self.delay(attempt)).await;
            attempt += 1;
        }
    }

    /// One `/verify` request, retried with exponential backoff on transport errors, 5xx
    /// answers and answers of the wrong length.
    async fn send_verify(self: &Arc<Self>, items: Vec<VerifyItem>) -> Result<Vec<VerifyVerdict>> {
        let request = VerifyRequest { items };
        let mut attempt = 0;
        loop {
            let mut ep = 0;
            let res: Result<VerifyResponse> = match self.gate.acquire().await {
                // One request counts as one call of the endpoint's load.
                Ok(_permit) => {
                    ep = self.pick(1).await;
                    self.post(ep, "/verify", &request, 1).await
                }
                Err(_) => Err(Error::Config("the client is shut down".into())),
            };
            let res = res.and_then(|r| {
                if r.results.len() == request.items.len() {
                    Ok(r.results)
                } else {
                    Err(Error::Protocol {
                        endpoint: self.endpoints[ep].url.clone(),
                        message: format!(
                            "sent {} answers to /verify, got {} verdicts",
                            request.items.len(),
                            r.results.len()
                        ),
                    })
                }
            });
            match res {
                Ok(verdicts) => return Ok(verdicts),
                Err(e) if !retryable(&e) || attempt >= self.max_retries => return Err(e),
                Err(e) => tracing::warn!(error = %e, attempt, "verify request failed; retrying"),
            }
            tokio::time::sleep(self.delay(attempt)).await;
            attempt += 1;
        }
    }

    /// Notes a refusal by endpoint `ep`: it counts as full for its `Retry-After` (or the backoff), so
    /// the next pick waits for room or goes elsewhere. `Some` (a `queue_timeout` result for
    /// `sub_id`) once the calls have been refused for longer than the patience.
    fn refused(
        &self,
        refusals: &mut Refusals,
        ep: usize,
        e: &Error,
        sub_id: &str,
    ) -> Option<SubmissionResult> {
        let Error::Refused { retry_after, .. } = e else {
            return None;
        };
        let wait = retry_after
            .unwrap_or(self.backoff)
            .max(Duration::from_millis(10));
        self.endpoints[ep].refuse(wait);
        let since = *refusals.since.get_or_insert_with(Instant::now);
        refusals.count += 1;
        if refusals.count % 100 == 1 {
            tracing::debug!(error = %e, refusals = refusals.count, "request refused; waiting for room");
        }
        (since.elapsed() >= self.patience).then(|| {
            SubmissionResult::failed(
                sub_id.to_string(),
                Reason::QueueTimeout,
                format!(
                    "every server refused the call for {:?} ({} refusals; last: {e}); it did not run",
                    self.patience, refusals.count
                ),
            )
        })
    }

    /// Sends up to one batch, re-sending the calls that hit `queue_timeout` or a transport
    /// error with exponential backoff, and whole requests the server refused (`429`, `503`:
    /// none of their calls ran) once there is room, without spending a retry on them.
    async fn send_batch(self: &Arc<Self>, subs: Vec<Submission>) -> Vec<SubmissionResult> {
        let mut results: Vec<Option<SubmissionResult>> = vec![None; subs.len()];
        let mut pending: Vec<(usize, Submission)> = subs.into_iter().enumerate().collect();
        let path = if self.long_batch {
            "/run/long-batch"
        } else {
            "/run/batch"
        };
        let mut attempt = 0;
        let mut refusals = Refusals::default();
        while !pending.is_empty() {
            let last = attempt >= self.max_retries;
            let batch = BatchSubmission {
                sub_id: None,
                kind: "batch".into(),
                submissions: pending.iter().map(|(_, s)| s.clone()).collect(),
            };
            let mut ep = 0;
            let res: Result<BatchResult> = match self.gate.acquire().await {
                Ok(_permit) => {
                    ep = self.pick(pending.len()).await;
                    self.post(ep, path, &batch, pending.len()).await
                }
                Err(_) => Err(Error::Config("the client is shut down".into())),
            };
            let res = res.and_then(|b| {
                let ids_match = b.results.len() == pending.len()
                    && b.results
                        .iter()
                        .zip(&pending)
                        .all(|(r, (_, s))| s.sub_id.as_ref().is_none_or(|id| *id == r.sub_id));
                if ids_match {
                    Ok(b)
                } else {
                    Err(Error::Protocol {
                        endpoint: self.endpoints[ep].url.clone(),
                        message: format!(
                            "sent {} calls, got {} results or mismatched sub_ids",
                            pending.len(),
                            b.results.len()
                        ),
                    })
                }
            });
            match res {
                Ok(batch) => {
                    let mut again = Vec::new();
                    for (r, (i, s)) in batch.results.into_iter().zip(pending) {
                        if r.reason == Reason::QueueTimeout && !last {
                            again.push((i, s));
                        } else {
                            results[i] = Some(r);
                        }
                    }
                    pending = again;
                }
                Err(e @ Error::Refused { .. }) => {
                    if let Some(r) = self.refused(&mut refusals, ep, &e, "") {
                        for (i, s) in pending.drain(..) {
                            let mut r = r.clone();
                            r.sub_id = s.sub_id.unwrap_or_default();
                            results[i] = Some(r);
                        }
                    }
                    continue;
                }
                Err(e) if !retryable(&e) || last => {
                    for (i, s) in pending.drain(..) {
                        results[i] = Some(failure(s.sub_id.unwrap_or_default(), &e));
                    }
                }
                Err(e) => tracing::warn!(error = %e, attempt, "batch failed; retrying"),
            }
            if !pending.is_empty() {
                tokio::time::sleep(self.delay(attempt)).await;
                attempt += 1;
            }
        }
        results
            .into_iter()
            .map(|r| r.expect("every call has a result"))
            .collect()
    }
}

/// How long and how often one request has been refused.
#[derive(Debug, Default)]
struct Refusals {
    since: Option<Instant>,
    count: u64,
}

/// `base · 2^attempt`, saturating.
fn backoff_delay(base: Duration, attempt: u32) -> Duration {
    base.saturating_mul(1u32 << attempt.min(16))
}

fn failure(sub_id: String, e: &Error) -> SubmissionResult {
    let reason = match e {
        Error::Status {
            status: 400 | 413 | 422,
            ..
        } => Reason::InvalidInput,
        _ => Reason::InternalError,
    };
    SubmissionResult::failed(sub_id, reason, e.to_string())
}

/// Collects [`Client::run`] calls into batches: up to `size` calls, or
/// whatever arrived within `linger` of the first.
async fn batcher(
    shared: Arc<Shared>,
    mut rx: mpsc::UnboundedReceiver<Pending>,
    size: usize,
    linger: Duration,
) {
    // Batches sent and not yet answered: while fewer than the concurrency limit, a batch
    // could start at once, so waiting to fill it would only add latency.
    let outstanding = Arc::new(AtomicUsize::new(0));
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < size {
            match rx.try_recv() {
                Ok(p) => batch.push(p),
                Err(_) => break,
            }
        }
        if batch.len() < size && outstanding.load(Ordering::SeqCst) >= shared.concurrency {
            let deadline = tokio::time::Instant::now() + linger;
            while batch.len() < size {
                match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some(p)) => batch.push(p),
                    Ok(None) | Err(_) => break,
                }
            }
        }
        let shared = Arc::clone(&shared);
        let outstanding = Arc::clone(&outstanding);
        outstanding.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            let (subs, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
            let results = shared.send_batch(subs).await;
            outstanding.fetch_sub(1, Ordering::SeqCst);
            for (reply, r) in replies.into_iter().zip(results) {
                let _ = reply.send(r);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_needs_a_runtime() {
        let err = Client::builder()
            .endpoint("http://127.0.0.1:1")
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("tokio runtime"), "{err}");
    }

    #[tokio::test]
    async fn builder_checks_its_options() {
        assert!(matches!(Client::builder().build(), Err(Error::Config(_))));
        assert!(matches!(
            Client::builder()
                .endpoint("http://127.0.0.1:1")
                .batch_size(65)
                .build(),
            Err(Error::Config(_))
        ));
        assert!(matches!(
            Client::builder().endpoint("https://x:1").build(),
            Err(Error::Endpoint { .. })
        ));
        assert!(matches!(
            Client::builder().endpoint("not a url").build(),
            Err(Error::Endpoint { .. })
        ));
        assert!(
            Client::builder()
                .endpoint("http://127.0.0.1:1/")
                .build()
                .is_ok()
        );
    }

    #[test]
    fn backoff_doubles() {
        let base = Duration::from_millis(500);
        assert_eq!(
            [0, 1, 2, 3].map(|a| backoff_delay(base, a)),
            [500, 1000, 2000, 4000].map(Duration::from_millis)
        );
        assert_eq!(backoff_delay(Duration::MAX, 3), Duration::MAX);
    }

    #[tokio::test]
    async fn transport_errors_end_as_internal_errors_after_retries() {
        // Nothing listens on port 1: every attempt is a transport error.
        let client = Client::builder()
            .endpoint("http://127.0.0.1:1")
            .max_retries(2)
            .backoff(Duration::from_millis(1))
            .build()
            .unwrap();
        let results = client
            .run_batch(vec![Submission::python("print(1)").with_sub_id("x")])
            .await;
        assert_eq!(results.len(), 1);
        assert_eq!(
            (results[0].sub_id.as_str(), results[0].reason),
            ("x", Reason::InternalError)
        );
        assert_eq!(client.loads()[0].sent, 3, "one try and two retries");
    }
}
