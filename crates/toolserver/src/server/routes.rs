//! The routes: the guard every request passes, code-judge's and SandboxFusion's handlers, `/verify`, and
//! their error answers.

use super::*;

/// A 4xx/5xx answer with FastAPI's `{"detail": …}` body.
#[derive(Debug)]
pub(crate) struct ApiError(
    pub(crate) StatusCode,
    pub(crate) String,
    pub(crate) Option<u64>,
);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.0, axum::Json(ErrorBody { detail: self.1 })).into_response();
        if self.0 == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        if self.0 == StatusCode::TOO_MANY_REQUESTS {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                header::HeaderValue::from(self.2.unwrap_or(1)),
            );
        }
        response
    }
}

/// A JSON body read whatever its content type, with messages that say what
/// was wrong: 400 for malformed JSON, 422 for a wrong shape, 413 when too big.
pub(crate) struct JsonBody<T>(pub(crate) T);

/// The body's bytes: 413 when too big, 408 when it comes too slowly.
pub(crate) async fn body_bytes<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    Bytes::from_request(req, state).await.map_err(|e| {
        if crate::http::is_body_timeout(&e) {
            return ApiError(
                StatusCode::REQUEST_TIMEOUT,
                format!("cannot read the request body: {}", e.body_text()),
                None,
            );
        }
        let status = e.status();
        let detail = if status == StatusCode::PAYLOAD_TOO_LARGE {
            "request body is larger than the server's limit".to_string()
        } else {
            format!("cannot read the request body: {}", e.body_text())
        };
        ApiError(status, detail, None)
    })
}

/// `/verify`'s body: as [`JsonBody`], but every bad body is a 400 (as `rstar verify serve`
/// answers), its message naming the field (`` `mode`: `exact` is not a mode … ``).
pub(crate) struct VerifyBody(pub(crate) VerifyRequest);

impl<S: Send + Sync> FromRequest<S> for VerifyBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = body_bytes(req, state).await?;
        serde_json::from_slice(&bytes).map(VerifyBody).map_err(|e| {
            ApiError(
                StatusCode::BAD_REQUEST,
                format!("invalid /verify request: {e}"),
                None,
            )
        })
    }
}

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = body_bytes(req, state).await?;
        serde_json::from_slice(&bytes).map(JsonBody).map_err(|e| {
            use serde_json::error::Category;
            let (line, column) = (e.line(), e.column());
            match e.classify() {
                Category::Data => ApiError(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!("invalid request at line {line} column {column}: {e}"),
                    None,
                ),
                _ => ApiError(
                    StatusCode::BAD_REQUEST,
                    format!("malformed JSON at line {line} column {column}: {e}"),
                    None,
                ),
            }
        })
    }
}

pub(crate) fn router_with(state: Arc<ServiceState>) -> Router {
    let limit = state.config.max_body_bytes;
    Router::new()
        .route("/ping", get(ping))
        .route("/status", get(status))
        .route("/run", post(run))
        .route("/run/batch", post(run_batch))
        .route("/run/long-batch", post(run_long_batch))
        .route("/judge", post(judge))
        .route("/judge/batch", post(judge_batch))
        .route("/judge/long-batch", post(judge_long_batch))
        .route("/run_code", post(run_code))
        .route("/run_jupyter", post(run_jupyter))
        .route("/verify", post(verify))
        .fallback(not_found)
        // Inside the guard: an unauthenticated request holds no part of the budget.
        .layer(middleware::from_fn_with_state(
            crate::http::BodyBudget::new(limit.saturating_add(4 << 20)),
            crate::http::BodyBudget::layer,
        ))
        .layer(middleware::from_fn_with_state(Arc::clone(&state), guard))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// Auth, the drain switch and in-flight accounting, for every route.
pub(crate) async fn guard(
    State(state): State<Arc<ServiceState>>,
    headers: HeaderMap,
    req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path().to_string();
    if path != "/ping"
        && let Some(token) = &state.config.token
        && !rstar_http::bearer_matches(&headers, token)
    {
        return ApiError(
            StatusCode::UNAUTHORIZED,
            "missing or wrong bearer token".into(),
            None,
        )
        .into_response();
    }
    if path == "/status" {
        return next.run(req).await;
    }
    if state.draining.load(Ordering::SeqCst) {
        return ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            DRAINING_MESSAGE.into(),
            None,
        )
        .into_response();
    }
    let _in_flight = CountGuard::new(&state.in_flight, Some(&state.idle));
    next.run(req).await
}

pub(crate) async fn ping() -> axum::Json<&'static str> {
    axum::Json("pong")
}

pub(crate) async fn status(State(state): State<Arc<ServiceState>>) -> axum::Json<ServerStatus> {
    axum::Json(state.status())
}

pub(crate) async fn not_found(req: Request) -> ApiError {
    ApiError(
        StatusCode::NOT_FOUND,
        format!("no route {} {}", req.method(), req.uri().path()),
        None,
    )
}

pub(crate) fn check_type(sub: &Submission, at: &str) -> Result<(), ApiError> {
    if sub.kind == "python" {
        return Ok(());
    }
    let known = matches!(sub.kind.as_str(), "cpp" | "math");
    let why = if known {
        "code-judge supports it, this server runs python only"
    } else {
        "expected `python`"
    };
    Err(ApiError(
        StatusCode::UNPROCESSABLE_ENTITY,
        format!(
            "{at}type: unsupported submission type `{}` ({why})",
            sub.kind
        ),
        None,
    ))
}

pub(crate) async fn run(
    state: State<Arc<ServiceState>>,
    body: JsonBody<Submission>,
) -> Result<axum::Json<SubmissionResult>, ApiError> {
    single(state, body).await.map(axum::Json)
}

/// `/run` without the streams: code-judge's `JudgeResult` has no `stdout`/`stderr` fields.
pub(crate) async fn judge(
    state: State<Arc<ServiceState>>,
    body: JsonBody<Submission>,
) -> Result<axum::Json<JudgeResult>, ApiError> {
    single(state, body)
        .await
        .map(|r| axum::Json(JudgeResult::from(r)))
}

pub(crate) async fn single(
    State(state): State<Arc<ServiceState>>,
    JsonBody(sub): JsonBody<Submission>,
) -> Result<SubmissionResult, ApiError> {
    let enqueued = Instant::now();
    check_type(&sub, "")?;
    let admitted = state.admit(1, false)?.pop().expect("one admitted call");
    Ok(state.judge(sub, enqueued, false, admitted).await)
}

pub(crate) async fn run_batch(
    state: State<Arc<ServiceState>>,
    body: JsonBody<BatchSubmission>,
) -> Result<axum::Json<BatchResult>, ApiError> {
    batch(state, body, false).await.map(axum::Json)
}

pub(crate) async fn run_long_batch(
    state: State<Arc<ServiceState>>,
    body: JsonBody<BatchSubmission>,
) -> Result<axum::Json<BatchResult>, ApiError> {
    batch(state, body, true).await.map(axum::Json)
}

pub(crate) async fn judge_batch(
    state: State<Arc<ServiceState>>,
    body: JsonBody<BatchSubmission>,
) -> Result<axum::Json<BatchJudgeResult>, ApiError> {
    batch(state, body, false)
        .await
        .map(|b| axum::Json(BatchJudgeResult::from(b)))
}

pub(crate) async fn judge_long_batch(
    state: State<Arc<ServiceState>>,
    body: JsonBody<BatchSubmission>,
) -> Result<axum::Json<BatchJudgeResult>, ApiError> {
    batch(state, body, true)
        .await
        .map(|b| axum::Json(BatchJudgeResult::from(b)))
}

pub(crate) async fn batch(
    State(state): State<Arc<ServiceState>>,
    JsonBody(batch): JsonBody<BatchSubmission>,
    patient: bool,
) -> Result<BatchResult, ApiError> {
    let enqueued = Instant::now();
    if batch.kind != "batch" {
        return Err(ApiError(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("type: expected `batch`, got `{}`", batch.kind),
            None,
        ));
    }
    if batch.submissions.is_empty() {
        return Err(ApiError(
            StatusCode::UNPROCESSABLE_ENTITY,
            "submissions: a batch needs at least one submission".into(),
            None,
        ));
    }
    if batch.submissions.len() > state.config.max_batch {
        return Err(ApiError(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "submissions: {} submissions exceed the limit of {}",
                batch.submissions.len(),
                state.config.max_batch
            ),
            None,
        ));
    }
    for (i, sub) in batch.submissions.iter().enumerate() {
        check_type(sub, &format!("submissions[{i}]."))?;
    }
    let admitted = state.admit(batch.submissions.len(), patient)?;
    let sub_id = batch.sub_id.unwrap_or_else(|| state.make_id());
    let futures: Vec<_> = batch
        .submissions
        .into_iter()
        .zip(admitted)
        .map(|(sub, admitted)| {
            let state = Arc::clone(&state);
            async move { state.judge(sub, enqueued, patient, admitted).await }
        })
        .collect();
    let mut results = Vec::with_capacity(futures.len());
    // Each `judge` spawns its own task, so awaiting in order still runs them all at once.
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    for h in handles {
        results.push(h.await.map_err(|e| {
            ApiError(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("a call task failed: {e}"),
                None,
            )
        })?);
    }
    Ok(BatchResult { sub_id, results })
}

/// Scores every item with `rstar-verifier` (`Verifier::new()`, the trainer's in-process
/// verifier), off the async executor: on a blocking thread, the items spread over rayon's pool.
pub(crate) async fn verify(
    State(state): State<Arc<ServiceState>>,
    VerifyBody(request): VerifyBody,
) -> Result<axum::Json<VerifyResponse>, ApiError> {
    let items = request.items;
    if items.len() > state.config.max_batch {
        return Err(ApiError(
            StatusCode::BAD_REQUEST,
            format!(
                "items: {} items exceed the limit of {} a request (split them into several requests)",
                items.len(),
                state.config.max_batch
            ),
            None,
        ));
    }
    if items.is_empty() {
        return Ok(axum::Json(VerifyResponse {
            results: Vec::new(),
        }));
    }
    let results = tokio::task::spawn_blocking(move || {
        use rayon::prelude::*;
        let verifier = rstar_verifier::Verifier::new();
        items
            .par_iter()
            .with_min_len(16)
            .map(|item| {
                VerifyVerdict::of(verifier.verify_mode(
                    item.mode,
                    &item.response,
                    &item.ground_truth,
                ))
            })
            .collect::<Vec<_>>()
    })
    .await
    .map_err(|e| {
        ApiError(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the verification task failed: {e}"),
            None,
        )
    })?;
    Ok(axum::Json(VerifyResponse { results }))
}

pub(crate) async fn run_code(
    State(state): State<Arc<ServiceState>>,
    JsonBody(req): JsonBody<RunCodeRequest>,
) -> Result<axum::Json<RunCodeResponse>, ApiError> {
    let enqueued = Instant::now();
    let unprocessable = |m: String| ApiError(StatusCode::UNPROCESSABLE_ENTITY, m, None);
    if !matches!(req.language.as_str(), "python" | "python3") {
        return Err(unprocessable(format!(
            "language: unsupported language `{}` (this server runs python only)",
            req.language
        )));
    }
    if !(req.run_timeout.is_finite() && req.run_timeout > 0.0 && req.run_timeout <= 3600.0) {
        return Err(unprocessable(format!(
            "run_timeout: expected seconds in (0, 3600], got {}",
            req.run_timeout
        )));
    }
    if req.memory_limit_mb == 0 || req.memory_limit_mb < -1 {
        return Err(unprocessable(format!(
            "memory_limit_MB: expected -1 or a positive number, got {}",
            req.memory_limit_mb
        )));
    }
    if !req.files.is_empty() || !req.fetch_files.is_empty() {
        return Err(unprocessable(
            "files, fetch_files: not supported by this server".into(),
        ));
    }
    let call = ToolCall::python(req.code, req.stdin.unwrap_or_default())
        .with_timeout(Duration::from_secs_f64(req.run_timeout));
    let admitted = state.admit(1, true)?.pop();
    let task = tokio::spawn(Arc::clone(&state).execute(call, enqueued, true, admitted));
    match task.await {
        Ok(Ok(r)) => Ok(axum::Json(to_run_code_response(&r, &state.config.name))),
        _ => Ok(axum::Json(to_run_code_response(
            &ToolResult::internal("the call could not be scheduled"),
            &state.config.name,
        ))),
    }
}

/// SandboxFusion's notebook route, served by the `jupyter_code` tool: cell `i` runs as one
/// `jupyter_code` call that first replays cells `0..i` with their output suppressed, so state
/// carries over as in one kernel (the reference agent's stateless emulation of a notebook).
pub(crate) async fn run_jupyter(
    State(state): State<Arc<ServiceState>>,
    JsonBody(req): JsonBody<RunJupyterRequest>,
) -> Result<axum::Json<RunJupyterResponse>, ApiError> {
    let started = Instant::now();
    let unprocessable = |m: String| ApiError(StatusCode::UNPROCESSABLE_ENTITY, m, None);
    if req.kernel != "python3" {
        return Err(unprocessable(format!(
            "kernel: unsupported kernel `{}` (expected `python3`)",
            req.kernel
        )));
    }
    if !(req.total_timeout.is_finite() && req.total_timeout > 0.0 && req.total_timeout <= 3600.0) {
        return Err(unprocessable(format!(
            "total_timeout: expected seconds in (0, 3600], got {}",
            req.total_timeout
        )));
    }
    if !(req.cell_timeout.is_finite() && (0.0..=3600.0).contains(&req.cell_timeout)) {
        return Err(unprocessable(format!(
            "cell_timeout: expected 0 (none) or seconds up to 3600, got {}",
            req.cell_timeout
        )));
    }
    if !req.files.is_empty() || !req.fetch_files.is_empty() {
        return Err(unprocessable(
            "files, fetch_files: not supported by this server".into(),
        ));
    }
    // One place in the queue for the whole notebook: its cells run one after another, and a
    // notebook refused half-way would have run its first cells for nothing.
    let _admitted = state.admit(1, true)?;
    let name = state.config.name.clone();
    let total = Duration::from_secs_f64(req.total_timeout);
    let mut cells = Vec::with_capacity(req.cells.len());
    for (i, code) in req.cells.iter().enumerate() {
        let left = total.saturating_sub(started.elapsed());
        let limit = match req.cell_timeout {
            t if t > 0.0 => left.min(Duration::from_secs_f64(t)),
            _ => left,
        };
        if limit.is_zero() {
            return Ok(axum::Json(jupyter_timed_out(started, name)));
        }
        let call = ToolCall::jupyter(code.clone(), req.cells[..i].to_vec()).with_timeout(limit);
        let task = tokio::spawn(Arc::clone(&state).execute(call, Instant::now(), true, None));
        let r = match task.await {
            Ok(Ok(r)) => r,
            _ => ToolResult::internal("the call could not be scheduled"),
        };
        match r.outcome {
            Outcome::Timeout => return Ok(axum::Json(jupyter_timed_out(started, name))),
            Outcome::Internal => {
                return Ok(axum::Json(RunJupyterResponse {
                    status: RunStatus::SandboxError,
                    message: r.message.unwrap_or_else(|| "the sandbox failed".into()),
                    driver: None,
                    cells: Vec::new(),
                    executor_pod_name: Some(name),
                    files: Default::default(),
                }));
            }
            _ => cells.push(to_cell_result(&r)),
        }
    }
    Ok(axum::Json(RunJupyterResponse {
        status: RunStatus::Success,
        message: String::new(),
        driver: Some(jupyter_driver(CommandRunStatus::Finished, started, Some(0))),
        cells,
        executor_pod_name: Some(name),
        files: Default::default(),
    }))
}

/// The notebook as one command, as SandboxFusion reports its driver process.
pub(crate) fn jupyter_driver(
    status: CommandRunStatus,
    started: Instant,
    return_code: Option<i32>,
) -> CommandRunResult {
    CommandRunResult {
        status,
        execution_time: Some(started.elapsed().as_secs_f64()),
        return_code,
        stdout: Some(String::new()),
        stderr: Some(String::new()),
    }
}

/// What SandboxFusion answers when the notebook runs out of time: `Failed`, no cells.
pub(crate) fn jupyter_timed_out(started: Instant, name: String) -> RunJupyterResponse {
    RunJupyterResponse {
        status: RunStatus::Failed,
        message: String::new(),
        driver: Some(jupyter_driver(
            CommandRunStatus::TimeLimitExceeded,
            started,
            None,
        )),
        cells: Vec::new(),
        executor_pod_name: Some(name),
        files: Default::default(),
    }
}

/// One cell's streams, and its exception as Jupyter's `error` output when it failed.
pub(crate) fn to_cell_result(r: &ToolResult) -> CellRunResult {
    let error = if r.success() {
        Vec::new()
    } else {
        let (ename, evalue) = exception_of(&r.stderr);
        let traceback: Vec<serde_json::Value> = r
            .stderr
            .lines()
            .map(|l| serde_json::Value::String(l.to_string()))
            .collect();
        vec![serde_json::Map::from_iter([
            ("ename".to_string(), ename.into()),
            ("evalue".to_string(), evalue.into()),
            ("traceback".to_string(), traceback.into()),
        ])]
    };
    CellRunResult {
        stdout: r.stdout.clone(),
        stderr: r.stderr.clone(),
        display: Vec::new(),
        error,
    }
}

/// The exception's class and message from a failed cell's stderr: the last line of the form
/// `Name: message` or `Name at line N: message` (how `jupyter_code` and Python's tracebacks
/// end), else `Error` and the last line.
pub(crate) fn exception_of(stderr: &str) -> (String, String) {
    let is_name = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
    };
    for line in stderr.lines().rev() {
        if let Some((head, message)) = line.split_once(':') {
            let name = head.split(" at line ").next().unwrap_or(head);
            if is_name(name) {
                return (name.to_string(), message.trim().to_string());
            }
        }
    }
    let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
    ("Error".into(), last.unwrap_or("").trim().to_string())
}
