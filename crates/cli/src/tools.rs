//! `rstar tools`: run JSONL tool calls through the sandboxed Python pool
//! (`run`), or report which isolation layers are active here (`doctor`).

use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use rstar_agent::toolenv::{
    Backend, LayerState, Outcome, Pool, PoolBuilder, ResponseFormat, ToolCall, ToolResult,
};
use serde_json::{Value, json};

/// Arguments of `rstar tools`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    pub command: ToolsCommand,
}

/// The `rstar tools` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum ToolsCommand {
    /// Run JSONL calls (`{"code": …, "input": …}`, optionally `tool`, `history`,
    /// `timeout`) and write one JSON result per line, in input order.
    Run(RunArgs),
    /// Start a pool, print which isolation layers are active and why any is
    /// missing, and try a few escapes to prove it.
    Doctor(DoctorArgs),
    /// Serve the pool over HTTP, speaking the code-judge (`/run`, `/run/batch`,
    /// `/run/long-batch`) and SandboxFusion (`/run_code`) protocols, and scoring answers
    /// (`/verify`, for `rstar train --verify remote`).
    Serve(super::tools_serve::ServeArgs),
}

/// Options shared by both subcommands: how the pool is built.
#[derive(Debug, Clone, clap::Args)]
pub struct PoolArgs {
    /// Python interpreter (numpy and sympy are preloaded when it has them).
    #[arg(long, env = "RSTAR_PYTHON", default_value = "python3")]
    pub python: PathBuf,
    /// Number of workers [default: the number of CPUs].
    #[arg(long)]
    pub workers: Option<usize>,
    /// Wall-clock limit per call, in seconds.
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Address-space limit per call, in MiB.
    #[arg(long, default_value_t = 4096)]
    pub memory_mb: u64,
    /// Bytes kept per output stream before the call is killed.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_output: usize,
    /// `zygote` (preloaded worker, fork per call) or `spawn` (new interpreter per call).
    #[arg(long, default_value = "zygote", value_parser = parse_backend)]
    pub backend: Backend,
    /// Modules to preload, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "numpy,sympy")]
    pub preload: Vec<String>,
}

/// Arguments of `rstar tools doctor`.
#[derive(Debug, Clone, clap::Args)]
pub struct DoctorArgs {
    /// Pool options.
    #[command(flatten)]
    pub pool: PoolArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `rstar tools run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// JSONL file of calls; `-` or nothing reads stdin.
    pub input: Option<PathBuf>,
    /// Pool options.
    #[command(flatten)]
    pub pool: PoolArgs,
    /// Calls in flight at once [default: twice the workers].
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Cut each tool-response `text` in the middle to this many characters.
    #[arg(long)]
    pub budget: Option<usize>,
    /// Hide the progress bar.
    #[arg(long)]
    pub no_progress: bool,
}

fn parse_backend(s: &str) -> Result<Backend, String> {
    match s {
        "zygote" => Ok(Backend::Zygote),
        "spawn" => Ok(Backend::Spawn),
        other => Err(format!("unknown backend `{other}` (zygote or spawn)")),
    }
}

fn builder(args: &PoolArgs) -> anyhow::Result<PoolBuilder> {
    anyhow::ensure!(
        args.timeout.is_finite() && args.timeout > 0.0,
        "--timeout must be positive"
    );
    let mut b = Pool::builder()
        .python(&args.python)
        .timeout(Duration::from_secs_f64(args.timeout))
        .memory(args.memory_mb << 20)
        .max_output(args.max_output)
        .backend(args.backend)
        .preload(args.preload.iter().filter(|m| !m.is_empty()).cloned());
    if let Some(w) = args.workers {
        b = b.workers(w);
    }
    Ok(b)
}

/// Runs `rstar tools`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match args.command {
        ToolsCommand::Run(a) => runtime.block_on(run_calls(a)),
        ToolsCommand::Doctor(a) => runtime.block_on(doctor(a)),
        ToolsCommand::Serve(a) => super::tools_serve::run(a),
    }
}

/// One input line: a call, or why it is not one.
fn parse_line(n: usize, line: &str) -> Result<ToolCall, String> {
    serde_json::from_str::<ToolCall>(line).map_err(|e| format!("line {n}: {e}"))
}

fn result_json(r: &ToolResult, format: &ResponseFormat) -> Value {
    let mut v = serde_json::to_value(r).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.insert("run_success".into(), json!(r.success()));
        m.insert("reason".into(), json!(r.reason()));
        m.insert("text".into(), json!(r.text(format)));
    }
    v
}

async fn run_calls(args: RunArgs) -> anyhow::Result<()> {
    let text = match args.input.as_deref() {
        None => std::io::read_to_string(std::io::stdin()).context("reading stdin")?,
        Some(p) if p.as_os_str() == "-" => {
            std::io::read_to_string(std::io::stdin()).context("reading stdin")?
        }
        Some(p) => {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?
        }
    };
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.trim().is_empty())
        .collect();
    let mut b = builder(&args.pool)?;
    if let Some(budget) = args.budget {
        b = b.format(ResponseFormat::with_budget(budget));
    }
    let pool = b.build()?;
    let report = pool.ready().await?;
    tracing::info!("sandbox:\n{report}");
    let concurrency = args.concurrency.unwrap_or(pool.config().workers * 2).max(1);
    let permits = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let bar = if args.no_progress {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(lines.len() as u64)
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} calls {per_sec} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut handles = Vec::with_capacity(lines.len());
    for (n, line) in &lines {
        let parsed = parse_line(*n, line);
        let pool = pool.clone();
        let permits = Arc::clone(&permits);
        let bar = bar.clone();
        handles.push(tokio::spawn(async move {
            let r = match parsed {
                Ok(call) => {
                    let _permit = permits.acquire_owned().await.expect("semaphore open");
                    Ok(pool.run(call).await)
                }
                Err(e) => Err(e),
            };
            bar.inc(1);
            r
        }));
    }
    let format = pool.format().clone();
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let (mut ok, mut failed, mut invalid) = (0usize, 0usize, 0usize);
    for h in handles {
        let v = match h.await? {
            Ok(r) => {
                if r.success() {
                    ok += 1;
                } else {
                    failed += 1;
                }
                result_json(&r, &format)
            }
            Err(msg) => {
                invalid += 1;
                json!({"outcome": "invalid_input", "run_success": false, "reason": "invalid_input", "message": msg})
            }
        };
        serde_json::to_writer(&mut out, &v)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    bar.finish_and_clear();
    eprintln!(
        "{} calls: {ok} succeeded, {failed} failed, {invalid} invalid",
        lines.len()
    );
    Ok(())
}

/// Escape attempts `doctor` runs inside the sandbox; each prints one line
/// `name blocked|ESCAPED detail`.
const PROBES: &str = r#"
import os, socket, sys
def probe(name, fn):
    try:
        detail = fn()
        print(name, "ESCAPED", detail)
    except Exception as e:
        print(name, "blocked", type(e).__name__)
def connect():
    s = socket.create_connection(("127.0.0.1", PORT), timeout=1)
    return "connected to 127.0.0.1"
probe("network", connect)
probe("write-outside", lambda: open(OUTSIDE, "w").write("x") and "wrote " + OUTSIDE)
probe("write-interpreter", lambda: open(os.__file__, "a") and "opened " + os.__file__ + " for append")
probe("etc-shadow", lambda: open("/etc/shadow").read(1) + "... read /etc/shadow")
probe("parent-environ", lambda: str(len(open("/proc/%d/environ" % PARENT, "rb").read())) + " bytes of the supervisor's environment")
probe("signal-parent", lambda: os.kill(PARENT, 0) or "signalled the supervisor")
leaked = [k for k in os.environ if k not in ("PATH", "HOME", "TMPDIR", "LANG", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")]
print("environment", "ESCAPED" if leaked else "blocked", ",".join(leaked) or "clean")
print("uid", os.getuid())
"#;

async fn doctor(doctor: DoctorArgs) -> anyhow::Result<()> {
    let args = doctor.pool;
    let pool = builder(&PoolArgs {
        workers: Some(1),
        ..args.clone()
    })?
    .build()?;
    let report = pool.ready().await?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let outside = std::env::temp_dir().join(format!("rstar-doctor-{}", std::process::id()));
    let code = PROBES
        .replace("PORT", &listener.local_addr()?.port().to_string())
        .replace("OUTSIDE", &format!("{:?}", outside.display().to_string()))
        .replace("PARENT", &std::process::id().to_string());
    let result = pool.run(ToolCall::python(code, "")).await;
    let fork = pool
        .run(ToolCall::python(
            "import os\nn = 0\ntry:\n    for _ in range(10000):\n        if os.fork() == 0:\n            import time; time.sleep(30)\n        n += 1\nexcept OSError:\n    pass\nprint(n)",
            "",
        ))
        .await;
    let accepted = listener.accept().is_ok();
    let wrote = outside.exists();
    let _ = std::fs::remove_file(&outside);
    let strays = pool.stray_processes();
    let mut probes: Vec<(String, bool, String)> = result
        .stdout
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ' ');
            let name = parts.next()?.to_string();
            let verdict = parts.next()?;
            let detail = parts.next().unwrap_or("").to_string();
            (verdict == "blocked" || verdict == "ESCAPED")
                .then(|| (name, verdict == "ESCAPED", detail))
        })
        .collect();
    if result.outcome != Outcome::Output {
        probes.push((
            "probes".into(),
            true,
            format!(
                "the probe snippet failed: {:?} {}",
                result.outcome, result.stderr
            ),
        ));
    }
    if accepted || wrote {
        probes.push((
            "host-check".into(),
            true,
            format!("listener accepted: {accepted}, outside file written: {wrote}"),
        ));
    }
    let forks = fork.stdout.trim().parse::<u64>().ok();
    probes.push((
        "fork-limit".into(),
        forks.is_none_or(|n| n >= 10000),
        format!(
            "{} processes before the limit ({:?})",
            fork.stdout.trim(),
            fork.outcome
        ),
    ));
    probes.push((
        "cleanup".into(),
        !strays.is_empty(),
        format!("{} processes left after the calls", strays.len()),
    ));
    let escaped = probes.iter().filter(|p| p.1).count();
    if doctor.json {
        let v = json!({
            "report": report,
            "probes": probes.iter().map(|(n, e, d)| json!({"name": n, "escaped": e, "detail": d})).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("{report}");
        println!("probes (run inside the sandbox):");
        for (name, esc, detail) in &probes {
            println!(
                "  {name:<18} {:<8} {detail}",
                if *esc { "ESCAPED" } else { "blocked" }
            );
        }
        let missing: Vec<&str> = report
            .layers
            .iter()
            .filter(|l| l.state != LayerState::Active)
            .map(|l| l.name)
            .collect();
        if missing.is_empty() {
            println!("all layers active");
        } else {
            println!("not fully active: {}", missing.join(", "));
        }
    }
    anyhow::ensure!(escaped == 0, "{escaped} probe(s) escaped the sandbox");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_or_name_the_line() {
        assert_eq!(
            parse_line(1, r#"{"code":"print(1)"}"#).unwrap(),
            ToolCall::python("print(1)", "")
        );
        let err = parse_line(7, r#"{"input":"x"}"#).unwrap_err();
        assert!(err.starts_with("line 7: missing field `code`"), "{err}");
        assert!(
            parse_line(2, "not json")
                .unwrap_err()
                .starts_with("line 2: ")
        );
    }

    #[test]
    fn results_carry_code_judge_fields() {
        let r = ToolResult::internal("x");
        let v = result_json(&r, &ResponseFormat::new());
        assert_eq!(v["reason"], "internal_error");
        assert_eq!(v["run_success"], false);
        assert_eq!(
            v["text"],
            "Tool call failure\nreason: internal_error\nexecution time: 0.00s"
        );
    }
}
