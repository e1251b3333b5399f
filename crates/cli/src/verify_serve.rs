//! `rstar verify serve`: the verifier as an HTTP reward service, speaking OpenRLHF's remote reward-model protocol and a batch route of its own.
//!
//! Routes (every one but `/ping` needs `Authorization: Bearer <TOKEN>` when `--token` is set,
//! checked as `rstar tools serve` checks it):
//! - `POST /get_reward`: OpenRLHF's `--remote_rm_url` protocol. The body is
//!   `{"query": [...], "prompts": [...], "labels": [...]}`: each query is the decoded prompt and
//!   response, each label the ground truth. The answer is `{"rewards": [...], "scores": [...]}`
//!   (`scores` equal to `rewards`, as OpenRLHF uses them for dynamic filtering). The response is
//!   the query after its prompt; a query that does not start with its prompt is scored whole.
//! - `POST /score`: `{"responses": [...], "answers": [...], "mode": "auto"}` →
//!   `{"rewards": [...], "verdicts": [{"reward", "reason", "mode", "extracted", "normalized",
//!   "canonical"} or {"error": "..."}]}`: the verdict of each pair, or why its answer cannot be
//!   scored.
//! - `GET /ping`: `"pong"`.
//!
//! Bad JSON, missing fields and lists of different lengths get a 400 with `{"error": "..."}`
//! naming the field; a wrong or missing token a 401.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rayon::prelude::*;
use rstar_agent::verifier::{Error as VerifyError, Mode, ScoreMode, Scored, Verdict, Verifier};
use serde::{Deserialize, Serialize};

/// The `rstar verify` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum VerifyCommand {
    /// Serve the verifier over HTTP: OpenRLHF's remote reward model (`POST /get_reward`, for
    /// `--remote_rm_url http://HOST:PORT/get_reward`) and a batch route (`POST /score`).
    Serve(ServeArgs),
}

/// Arguments of `rstar verify serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Port to listen on (0 picks a free one and prints it).
    #[arg(long, default_value_t = 5000)]
    pub port: u16,
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Require `Authorization: Bearer <TOKEN>` on every route but `/ping`. OpenRLHF's client
    /// sends no such header: leave it unset for OpenRLHF, on a private network.
    #[arg(long, env = "RSTAR_VERIFY_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// How `/get_reward` compares answers: auto (integer, choice or math, from each label),
    /// integer, math or choice. `/score` takes a `mode` field of its own.
    #[arg(long, default_value = "auto")]
    pub mode: ScoreMode,
    /// Compare literal integers only: do not evaluate `2^{10}`, `\frac{84}{2}`, ….
    #[arg(long)]
    pub no_expressions: bool,
    /// Largest request body, in MiB.
    #[arg(long, default_value_t = 64)]
    pub max_body_mb: usize,
}

#[derive(Debug)]
struct Service {
    verifier: Verifier,
    mode: ScoreMode,
    token: Option<String>,
}

/// A ground truth on the wire: a string, or a number written as JSON writes it.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Label {
    Text(String),
    Number(serde_json::Number),
}

impl Label {
    fn into_text(self) -> String {
        match self {
            Label::Text(s) => s,
            Label::Number(n) => n.to_string(),
        }
    }
}

/// OpenRLHF's request (`openrlhf/utils/remote_rm_utils.py`).
#[derive(Debug, Deserialize)]
struct RewardRequest {
    query: Vec<String>,
    #[serde(default)]
    prompts: Option<Vec<String>>,
    #[serde(default)]
    labels: Option<Vec<Label>>,
}

#[derive(Debug, Serialize)]
struct RewardResponse {
    rewards: Vec<f64>,
    scores: Vec<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScoreRequest {
    responses: Vec<String>,
    answers: Vec<Label>,
    #[serde(default)]
    mode: Option<String>,
}

/// `/score`'s answer: the rewards, and each verdict in the one JSON form of a verdict
/// ([`Scored`], as `/verify` writes it) with the mode it was scored in.
#[derive(Debug, Serialize)]
struct ScoreResponse {
    rewards: Vec<f64>,
    verdicts: Vec<Scored>,
}

/// A 4xx answer with `{"error": message}`.
struct Reject(StatusCode, String);

impl IntoResponse for Reject {
    fn into_response(self) -> Response {
        (self.0, axum::Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}

impl Service {
    fn check_token(&self, headers: &HeaderMap) -> Result<(), Reject> {
        match &self.token {
            Some(t) if !rstar_agent::toolserver::bearer_matches(headers, t) => Err(Reject(
                StatusCode::UNAUTHORIZED,
                "missing or wrong bearer token".into(),
            )),
            _ => Ok(()),
        }
    }

    fn score(
        &self,
        mode: ScoreMode,
        response: &str,
        truth: &str,
    ) -> (Mode, Result<Verdict, VerifyError>) {
        let mode = mode.resolve(truth);
        (mode, self.verifier.verify_mode(mode, response, truth))
    }
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Reject> {
    serde_json::from_slice(body).map_err(|e| {
        Reject(
            StatusCode::BAD_REQUEST,
            format!("invalid request body: {e}"),
        )
    })
}

fn same_length(field: &str, got: usize, want: usize, of: &str) -> Result<(), Reject> {
    if got == want {
        Ok(())
    } else {
        Err(Reject(
            StatusCode::BAD_REQUEST,
            format!("`{field}` has {got} items but `{of}` has {want}"),
        ))
    }
}

/// The response inside an OpenRLHF query: what follows the prompt.
fn response_of<'a>(query: &'a str, prompt: Option<&str>) -> &'a str {
    prompt
        .filter(|p| !p.is_empty())
        .and_then(|p| query.strip_prefix(p))
        .unwrap_or(query)
}

async fn get_reward(
    State(service): State<Arc<Service>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<axum::Json<RewardResponse>, Reject> {
    service.check_token(&headers)?;
    let request: RewardRequest = parse(&body)?;
    let n = request.query.len();
    let labels = request.labels.ok_or_else(|| {
        Reject(
            StatusCode::BAD_REQUEST,
            "missing field `labels`: the ground truths (OpenRLHF's --label_key column)".into(),
        )
    })?;
    same_length("labels", labels.len(), n, "query")?;
    if let Some(p) = &request.prompts {
        same_length("prompts", p.len(), n, "query")?;
    }
    let labels: Vec<String> = labels.into_iter().map(Label::into_text).collect();
    let (queries, prompts) = (request.query, request.prompts);
    let rewards = tokio::task::spawn_blocking(move || {
        (0..n)
            .into_par_iter()
            .with_min_len(64)
            .map(|i| {
                let prompt = prompts.as_ref().map(|p| p[i].as_str());
                let response = response_of(&queries[i], prompt);
                service
                    .score(service.mode, response, &labels[i])
                    .1
                    .map(|v| f64::from(v.reward))
                    .map_err(|e| format!("labels[{i}]: {e}"))
            })
            .collect::<Result<Vec<f64>, String>>()
    })
    .await
    .map_err(|e| Reject(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
    .map_err(|e| Reject(StatusCode::BAD_REQUEST, e))?;
    Ok(axum::Json(RewardResponse {
        scores: rewards.clone(),
        rewards,
    }))
}

async fn score(
    State(service): State<Arc<Service>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<axum::Json<ScoreResponse>, Reject> {
    service.check_token(&headers)?;
    let request: ScoreRequest = parse(&body)?;
    same_length(
        "answers",
        request.answers.len(),
        request.responses.len(),
        "responses",
    )?;
    let mode = match request.mode.as_deref() {
        None => service.mode,
        Some(m) => m
            .parse()
            .map_err(|e| Reject(StatusCode::BAD_REQUEST, format!("`mode`: {e}")))?,
    };
    let answers: Vec<String> = request.answers.into_iter().map(Label::into_text).collect();
    let responses = request.responses;
    let verdicts = tokio::task::spawn_blocking(move || {
        responses
            .par_iter()
            .zip(answers.par_iter())
            .with_min_len(64)
            .map(|(r, a)| {
                let (mode, result) = service.score(mode, r, a);
                Scored::in_mode(result, mode)
            })
            .collect::<Vec<_>>()
    })
    .await
    .map_err(|e| Reject(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let rewards = verdicts.iter().map(|v| f64::from(v.reward)).collect();
    Ok(axum::Json(ScoreResponse { rewards, verdicts }))
}

async fn not_found() -> Reject {
    Reject(
        StatusCode::NOT_FOUND,
        "no such route: POST /get_reward, POST /score or GET /ping".into(),
    )
}

fn router(service: Arc<Service>, max_body: usize) -> Router {
    Router::new()
        .route("/ping", get(|| async { axum::Json("pong") }))
        .route("/get_reward", post(get_reward))
        .route("/score", post(score))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(service)
}

/// Runs `rstar verify serve` until SIGINT or SIGTERM.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.max_body_mb > 0, "--max-body-mb must be positive");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(serve(args))
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let service = Arc::new(Service {
        verifier: Verifier::new().with_expressions(!args.no_expressions),
        mode: args.mode,
        token: args.token,
    });
    let addr = SocketAddr::new(args.host, args.port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let local = listener.local_addr()?;
    let app = router(service, args.max_body_mb << 20);
    eprintln!("rstar verify serve: listening on http://{local} (POST /get_reward, POST /score)");
    // The project's hardened serving loop (rstar_http): connections capped, request heads and
    // bodies timed by their progress, as `rstar tools serve` and `rstar serve` are served.
    let server = rstar_agent::toolserver::http::spawn(
        listener,
        app,
        rstar_agent::toolserver::http::ConnectionLimits::new(),
    )
    .context("serving")?;
    if let Err(e) = super::wait_for_signal().await {
        eprintln!("rstar verify serve: {e:#}");
    }
    server.shutdown().await.context("serving")?;
    eprintln!("rstar verify serve: stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_response_is_what_follows_the_prompt() {
        assert_eq!(
            response_of("P: q\nA: \\boxed{4}", Some("P: q\n")),
            "A: \\boxed{4}"
        );
        assert_eq!(
            response_of("other \\boxed{4}", Some("P: q\n")),
            "other \\boxed{4}"
        );
        assert_eq!(response_of("x", None), "x");
        assert_eq!(response_of("x", Some("")), "x");
    }

    #[test]
    fn auto_mode_follows_each_label() {
        let service = Service {
            verifier: Verifier::new(),
            mode: ScoreMode::Auto,
            token: None,
        };
        assert_eq!(
            service.score(service.mode, "\\boxed{12}", "12").0,
            Mode::Integer
        );
        assert_eq!(
            service
                .score(service.mode, "\\boxed{1/2}", "\\frac{1}{2}")
                .0,
            Mode::Math
        );
        assert_eq!(service.score(service.mode, "(C)", "C").0, Mode::Choice);
    }
}
