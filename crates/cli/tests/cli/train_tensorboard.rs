//! TensorBoard events read back by the real `tensorboard` package (`tb_events.py`, with
//! `RSTAR_PYTHON`'s interpreter): the events a smoke run writes while it trains, and those
//! `rstar train tensorboard RUN_DIR` writes from a hand-written run, have every scalar of the
//! JSONL files at its step, once, under the verl-like tags; texts render in the text plugin.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use rstar_agent::analysis::tensorboard::{eval_scalars, rl_scalars, sft_scalars};
use serde_json::Value;

use super::train::rstar;

/// What the reader saw.
#[derive(Debug)]
pub(super) struct Events {
    /// tag -> (step, value) in file order.
    pub scalars: BTreeMap<String, Vec<(i64, f64)>>,
    /// tag -> (step, text, the text plugin's HTML).
    pub texts: BTreeMap<String, Vec<(i64, String, String)>>,
    /// The tags the text plugin claims.
    pub text_tags: Vec<String>,
    /// The event files in the directory.
    pub files: Vec<String>,
}

/// Reads an event directory with `tensorboard`'s `EventAccumulator`.
pub(super) fn read_events(dir: &Path) -> Events {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cli/tb_events.py");
    let out = Command::new(rstar_testdata::python())
        .arg(script)
        .arg(dir)
        .output()
        .expect("the Python interpreter runs (set RSTAR_PYTHON to target/venv/bin/python)");
    assert!(
        out.status.success(),
        "reading the events failed (is `tensorboard` installed? `cargo xtask ci` installs xtask/requirements.txt):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let scalars = v["scalars"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(tag, rows)| {
            let rows = rows
                .as_array()
                .unwrap()
                .iter()
                // As 32-bit floats: serde_json's default number parsing can be one f64 ulp off the
                // printed value, which rounding to the stored f32 undoes.
                .map(|r| {
                    (
                        r[0].as_i64().unwrap(),
                        f64::from(r[1].as_f64().unwrap() as f32),
                    )
                })
                .collect();
            (tag.clone(), rows)
        })
        .collect();
    let texts = v["texts"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(tag, rows)| {
            let rows = rows
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    (
                        r[0].as_i64().unwrap(),
                        r[1].as_str().unwrap().to_string(),
                        r[2].as_str().unwrap().to_string(),
                    )
                })
                .collect();
            (tag.clone(), rows)
        })
        .collect();
    let strings = |k: &str| -> Vec<String> {
        v[k].as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    Events {
        scalars,
        texts,
        text_tags: strings("text_tags"),
        files: strings("files"),
    }
}

fn jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Checks that the events in `tb` hold every scalar of the run's JSONL files at its step,
/// exactly once (as TensorBoard's 32-bit `simple_value`), and nothing else under those tags.
pub(super) fn assert_events_match_jsonl(run: &Path, tb: &Path) -> Events {
    let events = read_events(tb);
    let mut expected: BTreeMap<String, Vec<(i64, f64)>> = BTreeMap::new();
    type Split = fn(&Value) -> Option<(i64, Vec<(String, f64)>)>;
    for (file, split) in [
        ("sft_metrics.jsonl", sft_scalars as Split),
        ("metrics.jsonl", rl_scalars as Split),
        ("eval.jsonl", eval_scalars as Split),
    ] {
        let path = run.join(file);
        if !path.exists() {
            continue;
        }
        for line in jsonl(&path) {
            let (step, scalars) = split(&line).expect("a step");
            for (tag, x) in scalars {
                expected
                    .entry(tag)
                    .or_default()
                    .push((step, f64::from(x as f32)));
            }
        }
    }
    assert!(!expected.is_empty(), "{}: no metrics", run.display());
    let got_tags: Vec<&String> = events.scalars.keys().collect();
    let want_tags: Vec<&String> = expected.keys().collect();
    assert_eq!(got_tags, want_tags, "scalar tags");
    for (tag, want) in &expected {
        let got = &events.scalars[tag];
        assert_eq!(got, want, "tag {tag}: (step, value) in order");
    }
    events
}

/// A smoke run shared by the tests of this binary, in `CARGO_TARGET_TMPDIR`: the smoke preset
/// shrunk for debug builds from a small policy that already writes tool calls (the resume
/// test's config: rollouts and evaluations with tool calls, errors and mixed rewards), with
/// entropies recorded.
pub(super) fn smoke_run() -> &'static Path {
    static RUN: OnceLock<PathBuf> = OnceLock::new();
    RUN.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("watch-smoke-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let config = super::resume::config_file(&dir);
        let out = dir.join("run");
        let (ok, stdout, stderr) = rstar(&[
            "train",
            "--config",
            &config,
            "--out",
            out.to_str().unwrap(),
            "--seed",
            "4",
            "--record-entropy",
        ]);
        assert!(ok, "{stderr}");
        let page = out.join("report.html");
        assert!(
            stdout
                .trim_end()
                .ends_with(&format!("report: {}", page.display())),
            "the last line names the report: {stdout}"
        );
        out
    })
}

#[test]
fn a_smoke_runs_events_hold_every_metric_at_its_step_once() {
    let run = smoke_run();
    let events = assert_events_match_jsonl(run, &run.join("tb"));
    assert_eq!(events.files.len(), 1, "{:?}", events.files);
    // The names people know from verl, by hand against the JSONL.
    let metrics = jsonl(&run.join("metrics.jsonl"));
    let steps: Vec<i64> = (1..=metrics.len() as i64).collect();
    for (tag, field) in [
        ("critic/rewards/mean", &["all", "accuracy"][..]),
        ("actor/entropy", &["entropy"]),
        ("actor/pg_clipfrac", &["clip_frac"]),
        ("response_length/mean", &["all", "response_len"]),
        ("timing_s/gen", &["time_rollout"]),
        ("tool/error_rate", &["all", "tool_error_rate"]),
        (
            "tool/error_rate_in_successes",
            &["all", "tool_error_rate_success"],
        ),
        ("curriculum/stage", &["stage"]),
    ] {
        let got = &events.scalars[tag];
        assert_eq!(got.iter().map(|r| r.0).collect::<Vec<_>>(), steps, "{tag}");
        for (m, (_, x)) in metrics.iter().zip(got) {
            let v = field.iter().fold(m, |v, k| &v[*k]).as_f64().unwrap();
            assert_eq!(*x, f64::from(v as f32), "{tag}");
        }
    }
    assert!(events.scalars.keys().any(|t| t.starts_with("roc/")));
    let sft = jsonl(&run.join("sft_metrics.jsonl"));
    assert_eq!(events.scalars["sft/loss"].len(), sft.len());
    // Evaluations after SFT (step 0) and after each of the three stages.
    let evals: Vec<i64> = events.scalars["val/greedy/rewards/mean"]
        .iter()
        .map(|r| r.0)
        .collect();
    assert_eq!(evals, [0, 2, 4, 6]);
    // Texts: claimed by the text plugin, which renders them.
    for tag in [
        "val/table",
        "curriculum/decision",
        "rollouts/samples",
        "val/samples",
    ] {
        assert!(
            events.text_tags.iter().any(|t| t == tag),
            "{tag}: {events:?}"
        );
    }
    let table = &events.texts["val/table"];
    assert_eq!(table.len(), 4);
    let last = &table.last().unwrap().1;
    assert!(last.contains("| stage hard | 6 |"), "{last}");
    assert!(table.last().unwrap().2.contains("<table>"), "{table:?}");
    let decisions: Vec<(i64, &str)> = events.texts["curriculum/decision"]
        .iter()
        .map(|r| (r.0, r.1.as_str()))
        .collect();
    assert_eq!(decisions.len(), 3, "{decisions:?}");
    assert!(decisions[0].1.contains("advance to"), "{decisions:?}");
    let samples = &events.texts["rollouts/samples"];
    assert!(!samples.is_empty());
    assert!(samples[0].1.contains("sample") && samples[0].1.contains("reward"));
}

/// Six steps of hand-written RL metrics (an unknown field among them), two SFT steps and two
/// evaluations.
fn write_run(dir: &Path) {
    let mut m = String::new();
    for step in 1..=6 {
        let stage = (step - 1) / 2;
        m.push_str(&format!(
            r#"{{"step":{step},"stage":{stage},"stage_name":"s{stage}","roc":true,"all":{{"accuracy":{},"response_len":100.5,"tool_error_rate":0.1}},"kept":{{"accuracy":0.5}},"roc_metrics":{{"roc/pass":0.25}},"clip_frac":0.01,"entropy":1.0e-3,"time_rollout":2.0,"new_metric":{{"x":7}},"decision":"{}"}}"#,
            0.1 * step as f64,
            if step % 2 == 0 { "advance to `x`" } else { "stay" }
        ));
        m.push('\n');
    }
    std::fs::write(dir.join("metrics.jsonl"), m).unwrap();
    std::fs::write(
        dir.join("sft_metrics.jsonl"),
        "{\"step\":1,\"loss\":3.25,\"lr\":0.001,\"grad_norm\":1.5,\"tokens\":10,\"secs\":0.5}\n{\"step\":2,\"loss\":2.0,\"lr\":0.001,\"grad_norm\":1.0,\"tokens\":12,\"secs\":0.5}\n",
    )
    .unwrap();
    let stats = r#"{"count":4,"accuracy":0.75,"response_len":50.0,"truncation_rate":0.0,"tool_calls":1.0,"tool_error_rate":0.25,"tool_error_rate_success":0.0,"answered":1.0}"#;
    std::fs::write(
        dir.join("eval.jsonl"),
        format!(
            "{{\"phase\":\"sft\",\"rl_steps\":0,\"greedy\":{stats},\"sampled\":null}}\n{{\"phase\":\"stage <b>\",\"rl_steps\":6,\"greedy\":{stats},\"sampled\":{stats}}}\n"
        ),
    )
    .unwrap();
}

#[test]
fn converting_a_written_run_gives_its_metrics_under_verl_names() {
    let dir = tempfile::tempdir().unwrap();
    write_run(dir.path());
    let (ok, stdout, stderr) = rstar(&["train", "tensorboard", dir.path().to_str().unwrap()]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("events.out.tfevents."), "{stdout}");
    let events = assert_events_match_jsonl(dir.path(), &dir.path().join("tb"));
    // By hand: the reward at step 3 is 0.3 as a 32-bit float, the unknown field has a tag.
    assert_eq!(
        events.scalars["critic/rewards/mean"][2],
        (3, f64::from(0.3f32))
    );
    assert_eq!(
        events.scalars["actor/entropy"][0],
        (1, f64::from(1.0e-3f32))
    );
    assert_eq!(events.scalars["roc/roc/pass"].len(), 6);
    assert_eq!(events.scalars["rstar/new_metric/x"][5], (6, 7.0));
    assert_eq!(events.scalars["roc/enabled"][0], (1, 1.0));
    assert_eq!(events.scalars["sft/loss"], [(1, 3.25), (2, 2.0)]);
    assert_eq!(events.scalars["timing_s/sft_step"].len(), 2);
    assert_eq!(events.scalars["val/sampled/rewards/mean"], [(6, 0.75)]);
    assert_eq!(events.scalars["val/greedy/tool/error_rate"].len(), 2);
    // The hostile stage name is escaped in the Markdown and in the plugin's HTML.
    let table = &events.texts["val/table"][1];
    assert!(table.1.contains("stage \\<b\\>"), "{table:?}");
    assert!(!table.2.contains("<b>"), "{table:?}");

    // Converting again replaces the events: still one file, every step once.
    let (ok, _, stderr) = rstar(&["train", "tensorboard", dir.path().to_str().unwrap()]);
    assert!(ok, "{stderr}");
    let again = assert_events_match_jsonl(dir.path(), &dir.path().join("tb"));
    assert_eq!(again.files.len(), 1, "{:?}", again.files);
}

#[test]
fn converting_a_directory_without_metrics_or_with_a_bad_line_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, _, stderr) = rstar(&["train", "tensorboard", dir.path().to_str().unwrap()]);
    assert!(!ok);
    assert!(stderr.contains("not a run directory"), "{stderr}");
    write_run(dir.path());
    let path = dir.path().join("metrics.jsonl");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("{\"step\":7,\"all");
    std::fs::write(&path, text).unwrap();
    let (ok, _, stderr) = rstar(&["train", "tensorboard", dir.path().to_str().unwrap()]);
    assert!(!ok);
    assert!(stderr.contains("metrics.jsonl:7:"), "{stderr}");
}
