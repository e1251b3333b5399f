//! `rstar eval`: k samples of every problem of a dataset, scored, with avg@k, pass@k and tool
//! statistics (see `rstar_agent::eval` and `docs/agent.md`).
//!
//! The model is a directory in the HF layout (our checkpoints share it; N local engines share
//! the CPU, each on its own thread) or the URL of an OpenAI-compatible server. Turns are
//! dispatched over the engines by `rstar_agent::scheduler`, tool calls run in the sandboxed pool.
//! Writes `results.jsonl`, `trajectories.jsonl` and `summary.json` into `--out` and prints the
//! summary table (or the summary JSON with `--json`) on stdout.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use rstar_agent::policy::{Sampling, Tokenizer};
use rstar_agent::scheduler::DispatchPolicy;

use rstar_agent::dataset::{DatasetOptions, load_prompts_with};
use rstar_agent::engine::{
    INITIAL_WEIGHT_VERSION, LocalEngineConfig, SharedTokenizer, TurnGenerator,
};
use rstar_agent::eval::{
    EvalOptions, EvalProtocol, EvalSummaryFile, run_eval_with_progress, write_outputs,
};
use rstar_agent::remote::{RemoteEngine, RemoteEngineConfig};
use rstar_agent::rollout::setup::{RolloutSetup, base_limits};
use rstar_agent::rollout::tools::ToolOptions;
use rstar_agent::scheduled::{Progress, ProgressFn, ScheduleConfig};
use rstar_agent::template::TemplateFormat;
use rstar_agent::train::tools::RunTools;

/// Arguments of `rstar eval`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A model directory (HF layout: config.json, *.safetensors, tokenizer) or the URL of an
    /// OpenAI-compatible server, `http://host:port[/v1]`.
    #[arg(long, required_unless_present = "compare")]
    pub model: Option<String>,
    /// A PEFT LoRA adapter directory (adapter_config.json, adapter_model.safetensors) to fold
    /// into the --model directory before evaluating.
    #[arg(long)]
    pub adapter: Option<PathBuf>,
    #[arg(long, default_value = "flex", help = crate::backend::HELP)]
    pub backend: String,
    /// The problems: a JSONL file (../shared/datasets layout) or a verl parquet file.
    #[arg(long, required_unless_present = "compare")]
    pub data: Option<PathBuf>,
    /// An evaluation protocol: `rstar2-agent` (the reference evaluation's 30 720 response
    /// tokens and 16 samples, 15 turns, temperature 1.0); the flags below override it.
    #[arg(long)]
    pub preset: Option<String>,
    /// Samples per problem (k of avg@k and pass@k) [default: 1, or the preset's].
    #[arg(long)]
    pub samples: Option<usize>,
    /// Engines: local model copies on their own threads, or clients of the server.
    #[arg(long, default_value_t = 1)]
    pub engines: usize,
    /// How rollouts are assigned to engines: kv-aware, least-requests or static.
    #[arg(long, default_value = "kv-aware")]
    pub dispatch: String,
    /// Sampling temperature; 0 decodes greedily [default: 1.0, or the preset's].
    #[arg(long)]
    pub temperature: Option<f32>,
    /// Nucleus sampling: keep the most likely tokens up to this probability mass.
    #[arg(long)]
    pub top_p: Option<f32>,
    /// Response budget in tokens, assistant and tool tokens together [default: the preset's, or
    /// 320 compact, 8192 chatml].
    #[arg(long, value_name = "N")]
    pub max_response_tokens: Option<usize>,
    /// Most assistant turns [default: the preset's, or 4 compact, 5 chatml].
    #[arg(long)]
    pub max_turns: Option<usize>,
    /// Prompt template: compact or chatml [default: compact for the built-in character
    /// tokenizer, chatml otherwise].
    #[arg(long)]
    pub template: Option<String>,
    /// Evaluate only the first n problems.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Output directory [default: eval/<dataset name>].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Keep per-token entropies and log-probabilities in trajectories.jsonl (for `rstar analyze entropy`).
    #[arg(long)]
    pub record_entropy: bool,
    /// Print the summary as JSON on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Python interpreter of the tool sandbox.
    #[arg(long, env = "RSTAR_PYTHON", default_value = "python3")]
    pub python: PathBuf,
    /// Tool sandbox workers [default: one per CPU].
    #[arg(long)]
    pub workers: Option<usize>,
    /// Run the tool calls on code-judge servers (`rstar tools serve`, code-judge) at these
    /// URLs, comma-separated, instead of the in-process sandbox; their own time limit applies.
    #[arg(long, value_name = "URL[,URL…]", value_delimiter = ',')]
    pub tools: Vec<String>,
    /// Per-call time limit of the tool, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub tool_timeout: f64,
    /// Leave out problems whose ground truth the verifier cannot score instead of refusing the
    /// dataset.
    #[arg(long)]
    pub skip_unscorable: bool,
    /// Go on when the sandbox's Python cannot import numpy and sympy (the tool's usual
    /// modules); without it such an interpreter stops the command before any rollout.
    #[arg(long)]
    pub allow_missing_preload: bool,
    /// How answers are scored: integer, math (LaTeX answers), choice (a letter A-J), or auto:
    /// integer when every ground truth is an integer, choice when every one is a letter, math
    /// otherwise (MATH-500).
    #[arg(long, default_value = "auto")]
    pub verifier: rstar_agent::verifier::ScoreMode,
    /// Seed of the sampling (each turn of each rollout derives its own).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The tokenizer of a server URL: a tokenizer.json, a model directory, or `char` for the
    /// built-in character tokenizer (ignored for a model directory).
    #[arg(long)]
    pub tokenizer: Option<String>,
    /// Compare two evaluations instead of running one: the `--out` directories (or
    /// results.jsonl files) of two `rstar eval` runs on the same problems. Prints both
    /// accuracies, the paired difference B − A with its 95% interval, and the problems that
    /// flipped (solved by a majority of samples in one and not the other).
    #[arg(long, num_args = 2, value_names = ["A", "B"], conflicts_with_all = ["model", "data", "adapter"])]
    pub compare: Option<Vec<PathBuf>>,
}

/// Runs `rstar eval`.
pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(pair) = &args.compare {
        return crate::compare::run(&pair[0], &pair[1], args.json);
    }
    let (Some(model_arg), Some(data)) = (args.model.clone(), args.data.clone()) else {
        bail!("--model and --data are required (or --compare A B)");
    };
    let policy: DispatchPolicy = args.dispatch.parse().map_err(|_| {
        anyhow::anyhow!(
            "--dispatch: `{}` is not one of kv-aware, least-requests, static",
            args.dispatch
        )
    })?;
    let protocol = args
        .preset
        .as_deref()
        .map(EvalProtocol::by_name)
        .transpose()
        .context("--preset")?;
    let samples = args
        .samples
        .or(protocol.as_ref().map(|p| p.samples))
        .unwrap_or(1);
    let temperature = args
        .temperature
        .or(protocol.as_ref().map(|p| p.temperature))
        .unwrap_or(1.0);
    let top_p = args.top_p.or(protocol.as_ref().and_then(|p| p.top_p));
    if samples == 0 {
        bail!("--samples must be at least 1");
    }
    if args.engines == 0 {
        bail!("--engines must be at least 1");
    }
    let sampling = Sampling::from_openai(Some(temperature), top_p, None)
        .map_err(|e| anyhow::anyhow!("--{}: {}", e.field.replace('_', "-"), e.reason))?;
    let remote = model_arg.starts_with("http://") || model_arg.starts_with("https://");
    if remote && args.adapter.is_some() {
        bail!(
            "--adapter folds an adapter into a model directory; a server URL serves its own model"
        );
    }

    // The tokenizer and, for a local model, the model.
    let (tokenizer, local) = if remote {
        let Some(spec) = &args.tokenizer else {
            bail!(
                "--tokenizer is required with a server URL (a tokenizer.json, a model directory, or `char`)"
            );
        };
        (load_tokenizer(spec)?, None)
    } else {
        let dir = PathBuf::from(&model_arg);
        if !dir.is_dir() {
            bail!(
                "--model {}: not a directory (expected a model directory with config.json and safetensors, or an http:// URL)",
                dir.display()
            );
        }
        let (model, tok) =
            rstar_agent::policy::load_dir(&dir, &crate::backend::device_of(&args.backend)?)
                .with_context(|| {
                    format!(
                        "loading the model {}{}",
                        dir.display(),
                        crate::run_dir_hint(&dir)
                    )
                })?;
        let model = crate::lora::with_adapter(model, args.adapter.as_deref())?;
        (tok, Some(model))
    };
    let template = match args.template.as_deref() {
        Some("compact") => TemplateFormat::Compact,
        Some("chatml") => TemplateFormat::ChatMl,
        Some(other) => bail!("--template: `{other}` is not one of compact, chatml"),
        None => crate::default_template(&tokenizer),
    };
    let mut limits = base_limits(template);
    if let Some(p) = &protocol {
        limits.max_response_tokens = p.max_response_tokens;
        limits.max_assistant_turns = p.max_assistant_turns;
    }
    if let Some(n) = args.max_response_tokens {
        if n == 0 {
            bail!("--max-response-tokens must be at least 1");
        }
        limits.max_response_tokens = n;
    }
    if let Some(n) = args.max_turns {
        if n == 0 {
            bail!("--max-turns must be at least 1");
        }
        limits.max_assistant_turns = n;
    }

    let options = DatasetOptions {
        limit: args.limit,
        ..DatasetOptions::new()
    };
    let mut prompts = load_prompts_with(&data, &options)?;
    // `auto`: one mode for the whole dataset (each answer's own would score a LaTeX set's
    // integer answers as integers and the rest as LaTeX).
    let mode = args
        .verifier
        .resolve_all(prompts.iter().map(|p| p.answer.as_str()));
    eprintln!("{}: scoring with the {mode} verifier", data.display());
    let verifier = rstar_agent::verifier::Verifier::new();
    let scorable = |answer: &str| verifier.check_truth(mode, answer).is_ok();
    if args.skip_unscorable {
        let before = prompts.len();
        prompts.retain(|p| scorable(&p.answer));
        if prompts.len() < before {
            eprintln!(
                "{}: left out {} of {before} problems whose ground truth the {mode} verifier cannot score",
                data.display(),
                before - prompts.len()
            );
        }
    } else if let Some(p) = prompts.iter().find(|p| !scorable(&p.answer)) {
        bail!(
            "{}: problem `{}`: the {mode} verifier cannot score the ground truth {:?}; \
             pass --skip-unscorable to leave such problems out, or choose --verifier",
            data.display(),
            p.id,
            p.answer
        );
    }
    if prompts.is_empty() {
        bail!("{}: no problems to evaluate", data.display());
    }

    let tokenizer = Arc::new(tokenizer);
    let mut setup = RolloutSetup::new(template).sampling(sampling);
    setup.limits = limits;
    let stops = setup.stop_strings();
    let mut generators: Vec<Arc<dyn TurnGenerator>> = Vec::with_capacity(args.engines);
    match local {
        Some(model) => {
            // The model's own EOS ids (HF `eos_token_id`), as `rstar serve` uses them, and the
            // trainer's KV rule (`RolloutSetup::kv_capacity`) at the engine's default batch.
            let setup = setup.clone().eos(model.config.eos_token_ids.clone());
            let batch = LocalEngineConfig::new(Vec::new()).max_batch;
            for engine in setup.spawn_local(
                &model,
                &tokenizer,
                args.engines,
                batch,
                "local",
                INITIAL_WEIGHT_VERSION,
            ) {
                generators.push(engine);
            }
        }
        None => {
            for i in 0..args.engines {
                let mut config = RemoteEngineConfig::new(model_arg.clone(), stops.clone());
                config.sampling = sampling;
                config.logprobs = args.record_entropy;
                config.name = Some(format!("{}#{i}", model_arg));
                generators.push(Arc::new(RemoteEngine::new(config, Arc::clone(&tokenizer))?));
            }
        }
    }

    anyhow::ensure!(
        args.tool_timeout.is_finite() && args.tool_timeout > 0.0,
        "--tool-timeout must be a positive number of seconds (got {})",
        args.tool_timeout
    );
    // The in-process sandbox unless servers are given (kept alive for the whole run): the
    // trainer's own choice of tools.
    let run_tools = RunTools::start(&ToolOptions {
        python: args.python.clone(),
        // `0` is the pool's "one per CPU".
        workers: args.workers.unwrap_or(0),
        timeout_secs: args.tool_timeout,
        servers: args.tools.clone(),
        latency_budget_secs: None,
    })
    .context(if args.tools.is_empty() {
        "starting the tool sandbox (set --python or RSTAR_PYTHON)"
    } else {
        "--tools"
    })?;
    if let RunTools::Pool(pool, _) = &run_tools
        && !args.allow_missing_preload
    {
        crate::check_sandbox_modules(pool, &args.python)?;
    }
    let tools = run_tools.async_tools();
    let eval_options = EvalOptions {
        samples,
        schedule: ScheduleConfig {
            record_entropy: args.record_entropy,
            verifier: mode,
            ..setup.schedule(args.seed, policy)
        },
    };
    let bar = progress_bar(prompts.len() * samples);
    let progress: Option<ProgressFn> = bar.clone().map(|bar| {
        Arc::new(move |p: Progress| {
            bar.set_position(p.done as u64);
            if p.elapsed_secs > 0.0 {
                bar.set_message(format!(
                    "{:.1} tok/s",
                    p.generated_tokens as f64 / p.elapsed_secs
                ));
            }
        }) as ProgressFn
    });
    let run = run_eval_with_progress(
        generators,
        SharedTokenizer(Arc::clone(&tokenizer)),
        tools,
        &prompts,
        &eval_options,
        progress,
    );
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let run = run?;
    let out = args.out.clone().unwrap_or_else(|| {
        let stem = data
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "data".into());
        PathBuf::from("eval").join(stem)
    });
    let mut summary =
        EvalSummaryFile::new(&run, &eval_options, &model_arg, &data.display().to_string());
    summary.sampling = Some(sampling);
    summary.protocol = protocol;
    let paths = write_outputs(&out, &run, &summary)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print!("{}", run.report.table());
        println!("verifier: {mode}");
        println!(
            "{:.1} sampled tokens/s over {:.1} s",
            run.stats.tokens_per_sec(),
            run.stats.generate_secs
        );
    }
    eprintln!(
        "wrote {}, {} and {}",
        paths.results.display(),
        paths.trajectories.display(),
        paths.summary.display()
    );
    Ok(())
}

/// `char`, a tokenizer.json file, or a directory holding one.
fn load_tokenizer(spec: &str) -> anyhow::Result<Tokenizer> {
    if spec == "char" {
        return Ok(Tokenizer::char());
    }
    let path = PathBuf::from(spec);
    let tok = if path.is_dir() {
        Tokenizer::from_dir(&path)
    } else {
        Tokenizer::from_hf_file(&path)
    };
    tok.with_context(|| format!("--tokenizer {spec}"))
}

/// A progress bar on stderr, or none when stderr is not a terminal.
fn progress_bar(total: usize) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(total as u64),
        indicatif::ProgressDrawTarget::stderr(),
    );
    let style = indicatif::ProgressStyle::with_template(
        "{elapsed_precise} [{bar:30}] {pos}/{len} rollouts  {msg}",
    )
    .map(|s| s.progress_chars("=> "))
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style);
    Some(bar)
}
