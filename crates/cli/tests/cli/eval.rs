//! `rstar eval` end to end on a random tiny model saved with `rstar_policy::save_dir`, and its
//! errors for bad input.

use std::path::Path;
use std::process::Command;

use burn::tensor::Device;
use rstar_agent::episode::Trajectory;
use rstar_agent::eval::{EvalSummaryFile, ProblemResult};
use rstar_policy::{Qwen, QwenConfig, Tokenizer, WeightDtype, save_dir};

/// Runs `rstar ARGS` with the sandbox interpreter: (exit code, stdout, stderr).
fn rstar(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rstar"))
        .args(args)
        .env("RSTAR_PYTHON", rstar_testdata::python())
        .output()
        .expect("the rstar binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// The lines of `out/results.jsonl`.
fn results(out: &Path) -> Vec<ProblemResult> {
    std::fs::read_to_string(out.join("results.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn tiny_model(dir: &Path) {
    let model = Qwen::random(QwenConfig::tiny_char(), 0, &Device::flex()).unwrap();
    save_dir(&model, &Tokenizer::char(), dir, WeightDtype::F32).unwrap();
}

#[test]
fn eval_writes_parseable_files_and_reports_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    tiny_model(&model);
    let data = tmp.path().join("tiny.jsonl");
    std::fs::write(
        &data,
        "{\"id\": \"a\", \"problem\": \"What is 2+2?\", \"answer\": \"4\"}\n\
         {\"id\": \"b\", \"problem\": \"What is 3*3?\", \"answer\": \"9\"}\n\
         {\"id\": \"c\", \"problem\": \"What is 1+0?\", \"answer\": \"1\"}\n",
    )
    .unwrap();
    let out = tmp.path().join("out");
    let (code, stdout, stderr) = rstar(&[
        "eval",
        "--model",
        model.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--samples",
        "2",
        "--limit",
        "2",
        "--engines",
        "2",
        "--max-response-tokens",
        "12",
        "--workers",
        "1",
        "--record-entropy",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let summary: EvalSummaryFile =
        serde_json::from_str(&stdout).expect("--json prints the summary");
    assert_eq!(
        (summary.summary.problems, summary.summary.trajectories),
        (2, 4)
    );
    assert_eq!(summary.engines.len(), 2);
    let file: EvalSummaryFile =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(file.summary, summary.summary);
    let results = results(&out);
    let ids: Vec<&str> = results.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
    let trajectories = Trajectory::read_jsonl(&out.join("trajectories.jsonl")).unwrap();
    assert_eq!(trajectories.len(), 4);
    for t in &trajectories {
        t.validate().unwrap();
        assert!(t.response_ids.len() <= 12);
        assert_eq!(
            t.entropies.len(),
            t.assistant_token_count(),
            "--record-entropy"
        );
    }

    // `rstar show` and `rstar analyze entropy` read the file back.
    let traj_path = out.join("trajectories.jsonl");
    let (code, _, stderr) = rstar(&["show", traj_path.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    let (code, stdout, stderr) =
        rstar(&["analyze", "entropy", traj_path.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.trim_start().starts_with('{'), "{stdout}");

    // A missing model directory names it.
    let missing = tmp.path().join("no-such-model");
    let (code, _, stderr) = rstar(&[
        "eval",
        "--model",
        missing.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(stderr.contains("no-such-model"), "{stderr}");

    // A bad policy is refused with the flag's name.
    let (code, _, stderr) = rstar(&[
        "eval",
        "--model",
        model.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--dispatch",
        "round-robin",
    ]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("--dispatch") && stderr.contains("round-robin"),
        "{stderr}"
    );

    // A broken dataset line is reported with the file and the line.
    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"id\": \"a\", \"problem\": \"What is 2+2?\", \"answer\": \"4\"}\n{\"id\": \"b\", \"problem\": \n",
    )
    .unwrap();
    let (code, _, stderr) = rstar(&[
        "eval",
        "--model",
        model.to_str().unwrap(),
        "--data",
        bad.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("bad.jsonl") && stderr.contains('2'),
        "{stderr}"
    );

    // A ground truth the integer verifier cannot score is refused with the ways out, which work.
    let latex = tmp.path().join("latex.jsonl");
    std::fs::write(
        &latex,
        "{\"id\": \"a\", \"problem\": \"What is 2+2?\", \"answer\": \"4\"}\n\
         {\"id\": \"m\", \"problem\": \"Polar?\", \"answer\": \"\\\\left( 3, \\\\frac{\\\\pi}{2} \\\\right)\"}\n",
    )
    .unwrap();
    let base = [
        "eval",
        "--model",
        model.to_str().unwrap(),
        "--data",
        latex.to_str().unwrap(),
        "--max-response-tokens",
        "8",
        "--workers",
        "1",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ];
    let mut integer = base.to_vec();
    integer.extend(["--verifier", "integer"]);
    let (code, _, stderr) = rstar(&integer);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("latex.jsonl")
            && stderr.contains("`m`")
            && stderr.contains("--skip-unscorable")
            && stderr.contains("--verifier"),
        "{stderr}"
    );
    let mut skip = integer.clone();
    skip.push("--skip-unscorable");
    let (code, stdout, stderr) = rstar(&skip);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("left out 1 of 2"), "{stderr}");
    let summary: EvalSummaryFile = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary.summary.problems, 1);
    assert_eq!(
        summary.options.schedule.verifier,
        rstar_agent::verifier::Mode::Integer
    );
    // `--verifier auto` (the default) sees a LaTeX ground truth and scores both in math mode.
    let (code, stdout, stderr) = rstar(&base);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("scoring with the math verifier"),
        "{stderr}"
    );
    let summary: EvalSummaryFile = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary.summary.problems, 2);
    assert_eq!(
        summary.options.schedule.verifier,
        rstar_agent::verifier::Mode::Math
    );
    let (code, _, stderr) = rstar(&[base.as_slice(), &["--verifier", "float"]].concat());
    assert_ne!(code, 0);
    assert!(stderr.contains("--verifier"), "{stderr}");
}

/// `rstar eval` on the whole of MATH-500 (`../shared/datasets/math500.jsonl`) with no
/// `--skip-unscorable`: the ground truths pick the math verifier, every one of the 500 is
/// accepted, and every problem is scored (0: a random model whose 24-position context no
/// prompt fits, so that no forward pass runs and the test takes seconds).
#[test]
fn eval_scores_all_of_math500_in_math_mode() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    let config = QwenConfig {
        max_position_embeddings: 24,
        ..QwenConfig::tiny_char()
    };
    let random = Qwen::random(config, 0, &Device::flex()).unwrap();
    save_dir(&random, &Tokenizer::char(), &model, WeightDtype::F32).unwrap();
    let out = tmp.path().join("out");
    let data = rstar_testdata::dataset("math500.jsonl");
    let (code, stdout, stderr) = rstar(&[
        "eval",
        "--model",
        model.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--max-response-tokens",
        "1",
        "--workers",
        "1",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("scoring with the math verifier"),
        "{stderr}"
    );
    assert!(!stderr.contains("left out"), "{stderr}");
    let summary: EvalSummaryFile = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary.summary.problems, 500);
    assert_eq!(
        summary.options.schedule.verifier,
        rstar_agent::verifier::Mode::Math
    );
    let results = results(&out);
    assert_eq!(results.len(), 500);
    let truths = std::fs::read_to_string(&data).unwrap();
    assert_eq!(truths.lines().count(), 500);
    for r in &results {
        assert!(r.answer.is_some(), "{}", r.id);
        assert_eq!((r.samples, r.correct), (1, 0), "{}", r.id);
    }
}

/// Kills the server when the test ends, however it ends.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn eval_against_rstar_serve_matches_the_in_process_eval() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    tiny_model(&model);
    let data = tmp.path().join("tiny.jsonl");
    std::fs::write(
        &data,
        "{\"id\": \"a\", \"problem\": \"What is 2+2?\", \"answer\": \"4\"}\n\
         {\"id\": \"b\", \"problem\": \"What is 3*3?\", \"answer\": \"9\"}\n",
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _server = Server(
        Command::new(env!("CARGO_BIN_EXE_rstar"))
            .args(["serve", "--model", model.to_str().unwrap(), "--port"])
            .arg(port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("rstar serve starts"),
    );
    let addr = format!("127.0.0.1:{port}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "rstar serve never listened on {addr}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let run = |model_arg: &str, out: &Path, extra: &[&str]| {
        let mut args = vec![
            "eval",
            "--model",
            model_arg,
            "--data",
            data.to_str().unwrap(),
            "--samples",
            "2",
            "--max-response-tokens",
            "16",
            "--workers",
            "1",
            "--seed",
            "5",
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let (code, stdout, stderr) = rstar(&args);
        assert_eq!(code, 0, "{model_arg}: {stderr}");
        (
            stdout,
            Trajectory::read_jsonl(&out.join("trajectories.jsonl")).unwrap(),
        )
    };
    let url = format!("http://{addr}");
    let (_, local) = run(model.to_str().unwrap(), &tmp.path().join("local"), &[]);
    let (table, remote) = run(&url, &tmp.path().join("remote"), &["--tokenizer", "char"]);
    assert!(table.contains("avg@2"), "{table}");
    assert_eq!(local.len(), 4);
    // Not trivially equal: the responses are written, and the two samples of a problem differ.
    assert!(local.iter().all(|t| t.response_ids.len() > 4), "{local:?}");
    assert!(
        local
            .chunks(2)
            .any(|p| p[0].response_ids != p[1].response_ids)
    );
    for (l, r) in local.iter().zip(&remote) {
        assert_eq!((&l.id, l.sample), (&r.id, r.sample));
        assert_eq!(
            l.response_ids, r.response_ids,
            "{} sample {}",
            l.id, l.sample
        );
        assert_eq!((l.stop, l.reward), (r.stop, r.reward));
    }
}

/// A bare virtualenv under `dir`, the standard library alone; its interpreter.
fn bare_python(dir: &Path) -> std::path::PathBuf {
    let bare = dir.join("bare");
    let made = Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&bare)
        .status()
        .unwrap();
    assert!(made.success());
    bare.join("bin").join("python")
}

/// Issue 70: the same for `rstar train` on real problems (`--data`): stopped before training,
/// unless `--allow-missing-preload` (here the run then fails for its own reason, an output path
/// that is a file, after the check).
#[test]
fn a_sandbox_python_without_numpy_stops_a_run_on_real_data_unless_allowed() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    tiny_model(&model);
    let data = tmp.path().join("one.jsonl");
    std::fs::write(
        &data,
        "{\"id\": \"a\", \"problem\": \"What is 2+2?\", \"answer\": \"4\"}\n",
    )
    .unwrap();
    let python = bare_python(tmp.path());
    let taken = tmp.path().join("taken");
    std::fs::write(&taken, "a file where the run directory would go").unwrap();
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_rstar"))
            .args(["train", "--preset", "rstar2-agent", "--model"])
            .arg(&model)
            .arg("--data")
            .arg(&data)
            .arg("--python")
            .arg(&python)
            .arg("--out")
            .arg(&taken)
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, stderr) = run(&[]);
    assert!(
        !ok && stderr.contains("cannot import numpy")
            && stderr.contains("RSTAR_PYTHON")
            && stderr.contains("--allow-missing-preload"),
        "{stderr}"
    );
    let (ok, stderr) = run(&["--allow-missing-preload"]);
    assert!(!ok, "{stderr}");
    assert!(!stderr.contains("cannot import"), "{stderr}");
}

/// Issue 70: a sandbox interpreter without numpy and sympy stops `rstar eval` before any
/// rollout, naming the modules and `RSTAR_PYTHON`, instead of failing every `import numpy`
/// inside the rollouts; `--allow-missing-preload` goes on.
#[test]
fn a_sandbox_python_without_numpy_stops_eval_unless_allowed() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    tiny_model(&model);
    let data = tmp.path().join("one.jsonl");
    std::fs::write(
        &data,
        "{\"id\": \"a\", \"problem\": \"What is 2+2?\", \"answer\": \"4\"}\n",
    )
    .unwrap();
    let python = bare_python(tmp.path());
    let args = |extra: &[&str]| {
        let mut a = vec![
            "eval".to_string(),
            "--model".into(),
            model.to_str().unwrap().into(),
            "--data".into(),
            data.to_str().unwrap().into(),
            "--python".into(),
            python.to_str().unwrap().into(),
            "--max-response-tokens".into(),
            "8".into(),
            "--out".into(),
            tmp.path().join("out").to_str().unwrap().into(),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let refused = Command::new(env!("CARGO_BIN_EXE_rstar"))
        .args(args(&[]))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(
        stderr.contains("cannot import numpy")
            && stderr.contains("RSTAR_PYTHON")
            && stderr.contains("--allow-missing-preload"),
        "{stderr}"
    );
    assert!(!tmp.path().join("out").join("results.jsonl").exists());
    let allowed = Command::new(env!("CARGO_BIN_EXE_rstar"))
        .args(args(&["--allow-missing-preload"]))
        .output()
        .unwrap();
    assert!(
        allowed.status.success(),
        "{}",
        String::from_utf8_lossy(&allowed.stderr)
    );
}
