//! `rstar serve`: a policy (an HF model directory or one of our checkpoints) behind the
//! OpenAI-compatible API (`/v1/completions`, `/v1/chat/completions`, `/v1/models`, `/health`);
//! see [`rstar_agent::serve`] and `docs/serve.md`.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use rstar_agent::serve::{ServeConfig, start};
use rstar_agent::template::TemplateFormat;

/// The chat layout of `/v1/chat/completions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TemplateArg {
    /// ChatML, as Qwen chat models and our reference template write it.
    Chatml,
    /// The compact `Q:`/`A:`/`O:` layout of the embedded character model.
    Compact,
}

/// Arguments of `rstar serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The model: an HF directory (config.json, *.safetensors, tokenizer.json) or one of our
    /// checkpoints (the same layout).
    #[arg(long)]
    pub model: PathBuf,
    /// A PEFT LoRA adapter directory (adapter_config.json, adapter_model.safetensors) folded
    /// into --model: the server serves the adapted model.
    #[arg(long)]
    pub adapter: Option<PathBuf>,
    #[arg(long, default_value = "flex", help = crate::backend::HELP)]
    pub backend: String,
    /// Port to listen on (0 picks a free one and prints it).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// The model's name in the API [default: the --model argument as given].
    #[arg(long, value_name = "NAME")]
    pub served_model_name: Option<String>,
    /// Engines, each with its own copy of the model (one per GPU; several share the CPU).
    #[arg(long, default_value_t = 1)]
    pub engines: usize,
    /// The most sequences one engine generates in one batch.
    #[arg(long, default_value_t = 64)]
    pub max_batch: usize,
    /// Milliseconds an engine waits after the first request for others to join its batch.
    #[arg(long, default_value_t = 2)]
    pub gather_ms: u64,
    /// The chat layout of /v1/chat/completions [default: the one the checkpoint was trained
    /// with, as `rstar eval` picks it: compact for the character tokenizer, else chatml].
    #[arg(long, value_enum)]
    pub template: Option<TemplateArg>,
    /// `max_tokens` of a completion request that gives none (OpenAI's default).
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub default_max_tokens: usize,
    /// The most choices generated or waiting at once over all requests; more are answered 429.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub max_in_flight: usize,
    /// The most LoRA adapters loaded at once through /v1/load_lora_adapter or
    /// /v1/upload_lora_adapter (each holds a merged copy of the projections per engine); 0
    /// refuses them.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub max_lora_adapters: usize,
    /// Require `Authorization: Bearer <KEY>` on every route but /health (the weight updates
    /// replace the served model: set one when other machines can reach the server).
    #[arg(long, env = "RSTAR_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    #[command(flatten)]
    pub connections: crate::ConnectionArgs,
    /// Skip checking the model directory's files against their SHA-256 digests
    /// (checksums.sha256; weights are still checked for NaN and infinities).
    #[arg(long)]
    pub no_verify: bool,
}

/// Runs `rstar serve` until SIGINT or SIGTERM, then lets in-flight requests finish and exits.
pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.engines >= 1, "--engines must be at least 1");
    anyhow::ensure!(args.max_batch >= 1, "--max-batch must be at least 1");
    anyhow::ensure!(
        args.max_in_flight >= 1,
        "--max-in-flight must be at least 1"
    );
    args.connections.limits()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(serve(args))
}

async fn serve(args: Args) -> anyhow::Result<()> {
    let device = crate::backend::device_of(&args.backend)?;
    let verify = if args.no_verify {
        rstar_agent::policy::Verify::Skip
    } else {
        rstar_agent::policy::Verify::Digests
    };
    let (model, tokenizer) = rstar_agent::policy::load_dir_with(&args.model, &device, verify)
        .with_context(|| {
            format!(
                "loading the model from {}{}",
                args.model.display(),
                crate::run_dir_hint(&args.model)
            )
        })?;
    let model = crate::lora::with_adapter(model, args.adapter.as_deref())?;
    let name = args
        .served_model_name
        .clone()
        .unwrap_or_else(|| args.model.display().to_string());
    let max_len = model.config.max_position_embeddings;
    let mut config = ServeConfig::new(name.clone());
    config.host = args.host;
    config.port = args.port;
    config.engines = args.engines;
    config.max_batch = args.max_batch;
    config.gather = Duration::from_millis(args.gather_ms);
    config.default_max_tokens = args.default_max_tokens;
    config.max_in_flight = args.max_in_flight;
    config.max_lora_adapters = args.max_lora_adapters;
    config.model_dir = Some(args.model.clone());
    config.api_key = args.api_key.clone();
    config.limits = args.connections.limits()?;
    let (template, why) = match args.template {
        Some(TemplateArg::Chatml) => (TemplateFormat::ChatMl, "--template"),
        Some(TemplateArg::Compact) => (TemplateFormat::Compact, "--template"),
        None => (
            crate::default_template(&tokenizer),
            "the checkpoint's tokenizer; --template to change",
        ),
    };
    config.template = template;
    let server = start(model, tokenizer, config).await?;
    eprintln!(
        "rstar serve: listening on {} (model `{name}`, context {max_len} tokens, {} engine(s), chat template {} from {why})",
        server.url(),
        args.engines,
        match template {
            TemplateFormat::ChatMl => "chatml",
            TemplateFormat::Compact => "compact",
        }
    );
    super::wait_for_signal().await?;
    eprintln!("rstar serve: shutting down, letting in-flight requests finish");
    server.shutdown().await?;
    eprintln!("rstar serve: stopped");
    Ok(())
}
