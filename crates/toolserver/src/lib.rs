//! The `rstar-toolenv` Python pool as an HTTP service that speaks the
//! code-judge and SandboxFusion protocols, and a batching client for a fleet
//! of such servers.
//!
//! rStar2-Agent runs code execution as a separate service: the reference
//! code talks to [code-judge] over HTTP and verl talks to SandboxFusion.
//! [`ServerBuilder::serve`] puts a [`rstar_toolenv::Pool`] behind both
//! protocols, so a trainer written for either can use it unchanged:
//!
//! - code-judge: `GET /ping`, `GET /status`, `POST /run`, `/run/batch`,
//!   `/run/long-batch` (and the `/judge*` twins without stdout/stderr), with
//!   its `queue_timeout` semantics: a call that waited for a worker longer
//!   than [`ServerConfig::queue_timeout_s`] is answered `queue_timeout`
//!   without running;
//! - SandboxFusion: `POST /run_code`, and `POST /run_jupyter` served by the
//!   pool's stateful notebook tool (`jupyter_code`: each cell replays the
//!   earlier ones, so state carries over).
//! - answer verification, as the paper offloads it to its tool service: `POST /verify` scores
//!   a batch of responses against their ground truths with `rstar-verifier` (integer, math
//!   and choice modes), off the async executor ([`api::VerifyRequest`]).
//!
//! [`Client`] batches calls (up to 64 a request), bounds the requests in
//! flight, retries `queue_timeout` results and transport errors with
//! exponential backoff, and spreads calls over several endpoints by their
//! reported queue length; [`Client::verify`] sends answers to `/verify` the same way.
//!
//! It deliberately does **not** start processes itself (only `rstar-toolenv`
//! does), speak TLS (put a proxy in front, or keep it on a private network),
//! or run languages other than Python. It lives apart from `rstar-toolenv`
//! so that crate stays free of HTTP dependencies for people who embed the pool.
//!
//! Main types: [`ServerBuilder`] / [`ServerConfig`] / [`ToolServer`],
//! [`Client`] / [`ClientBuilder`], and the wire types in [`api`].
//!
//! ```no_run
//! use rstar_toolenv::Pool;
//! use rstar_toolserver::{Client, ServerBuilder, ServerConfig, api::Submission};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = Pool::builder().workers(2).build()?;
//! let server = ServerBuilder::new().config(ServerConfig::local()).serve(pool).await?;
//! let client = Client::builder().endpoint(server.url()).build()?;
//! let result = client.run(Submission::python("print(6 * 7)")).await;
//! assert_eq!(result.stdout.as_deref(), Some("42\n"));
//! server.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! The wire types need no server:
//!
//! ```
//! use rstar_toolserver::api::{Reason, SubmissionResult};
//! let r: SubmissionResult = serde_json::from_str(
//!     r#"{"sub_id":"1","success":false,"run_success":false,"cost":0,"reason":"queue_timeout"}"#,
//! ).unwrap();
//! assert_eq!(r.reason, Reason::QueueTimeout);
//! ```
//!
//! [code-judge]: https://github.com/0xWJ/code-judge
//!
//! # Crate features
//! None. The client speaks plain HTTP/1.1 through hyper.
#![warn(missing_docs)]

pub mod api;
mod client;
mod error;
mod server;

pub use client::{Client, ClientBuilder, EndpointLoad, MAX_BATCH, MAX_VERIFY_BATCH};
pub use error::{Error, Result};
/// The hardened serving loop and the bearer check (the `rstar-http` crate, shared with `rstar serve`).
pub use rstar_http as http;
pub use rstar_http::bearer_matches;
pub use server::{
    DEFAULT_MAX_QUEUE, DRAINING_MESSAGE, PAPER_QUEUE_LIFE_S, ServerBuilder, ServerConfig,
    ToolServer, router,
};
