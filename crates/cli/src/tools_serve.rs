//! `rstar tools serve`: the sandboxed Python pool as an HTTP service speaking
//! the code-judge and SandboxFusion protocols (see `rstar-toolserver`).

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use rstar_agent::toolenv::Pool;
use rstar_agent::toolserver::{ServerBuilder, ServerConfig};

/// Arguments of `rstar tools serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Port to listen on (0 picks a free one and prints it).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Address to bind. Loopback by default: the service runs arbitrary code.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Require `Authorization: Bearer <TOKEN>` on every route but `/ping`.
    #[arg(long, env = "RSTAR_TOOLS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Number of workers [default: the number of CPUs].
    #[arg(long)]
    pub workers: Option<usize>,
    /// Python interpreter (numpy and sympy are preloaded when it has them).
    #[arg(long, env = "RSTAR_PYTHON", default_value = "python3")]
    pub python: PathBuf,
    /// Wall-clock limit per call, in seconds (SandboxFusion's `run_timeout` overrides it per request).
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Address-space limit per call, in MiB.
    #[arg(long, default_value_t = 4096)]
    pub memory_mb: u64,
    /// Modules to preload, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "numpy,sympy")]
    pub preload: Vec<String>,
    /// Settings preset: `paper` (a 600 s queue life, consistent with --max-queue: the paper's
    /// 45K calls in flight from any client) or `code-judge` (its 4 s queue life).
    #[arg(long, value_name = "NAME", default_value = "paper")]
    pub preset: String,
    /// Seconds a call may wait for a worker before it is answered `queue_timeout`
    /// (code-judge's `MAX_QUEUE_WORK_LIFE_TIME`; `/run/long-batch` and `/run_code` wait); a
    /// request whose calls could not start within it is refused at once with `429`
    /// [default: the preset's: paper 600, code-judge 4].
    #[arg(long, value_name = "SECS")]
    pub queue_timeout: Option<f64>,
    /// Most calls held at once, waiting or running; a request past it is refused whole with
    /// `429` and `Retry-After` before any of its calls runs (the batching client waits and
    /// sends it again).
    #[arg(long, value_name = "CALLS", default_value_t = rstar_agent::toolserver::DEFAULT_MAX_QUEUE)]
    pub max_queue: usize,
    /// Largest request body, in MiB.
    #[arg(long, default_value_t = 16)]
    pub max_body_mb: usize,
    /// Seconds to let in-flight calls finish after SIGINT/SIGTERM.
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    pub drain_timeout: f64,
    #[command(flatten)]
    pub connections: crate::ConnectionArgs,
}

/// Runs `rstar tools serve` until SIGINT or SIGTERM, then drains and exits.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.timeout.is_finite() && args.timeout > 0.0,
        "--timeout must be positive"
    );
    ServerConfig::preset(&args.preset).context("--preset")?;
    if let Some(life) = args.queue_timeout {
        anyhow::ensure!(
            life.is_finite() && life > 0.0,
            "--queue-timeout must be positive"
        );
    }
    anyhow::ensure!(
        args.drain_timeout.is_finite() && args.drain_timeout >= 0.0,
        "--drain-timeout must not be negative"
    );
    anyhow::ensure!(args.max_queue > 0, "--max-queue must be at least 1");
    args.connections.limits()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(serve(args))
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let mut pool = Pool::builder()
        .python(&args.python)
        .timeout(Duration::from_secs_f64(args.timeout))
        .memory(args.memory_mb << 20)
        .preload(args.preload.iter().filter(|m| !m.is_empty()).cloned());
    if let Some(w) = args.workers {
        pool = pool.workers(w);
    }
    let pool = pool.build().context("starting the tool pool")?;
    pool.ready()
        .await
        .context("starting the tool pool's workers")?;
    let limits = args.connections.limits()?;
    let preset = ServerConfig::preset(&args.preset)?;
    let config = ServerConfig {
        host: args.host,
        port: args.port,
        token: args.token,
        queue_timeout_s: args.queue_timeout.unwrap_or(preset.queue_timeout_s),
        max_body_bytes: args.max_body_mb << 20,
        drain_timeout_s: args.drain_timeout,
        max_queue: args.max_queue,
        max_connections: limits.max_connections,
        header_timeout_s: limits.header_timeout.as_secs_f64(),
        body_timeout_s: limits.body_timeout.as_secs_f64(),
        body_min_rate: limits.body_min_rate,
        ..preset
    };
    let workers = pool.config().workers;
    let (life, queue) = (config.queue_timeout_s, config.max_queue);
    let server = ServerBuilder::new().config(config).serve(pool).await?;
    eprintln!(
        "rstar tools serve: listening on {} ({workers} workers; preset {}: queue life {life} s, at most {queue} calls held)",
        server.url(),
        args.preset
    );
    super::wait_for_signal().await?;
    eprintln!("rstar tools serve: shutting down, letting in-flight calls finish");
    server.shutdown().await?;
    eprintln!("rstar tools serve: stopped");
    Ok(())
}
