//! `cargo xtask bench roc`: the whole RoC pass (parse JSONL, penalties, selection) on a step-sized batch,
//! `rstar-roc` against the reference rule in plain Python (`xtask/bench/roc_peer.py`), side by side.
//!
//! The batch is the recorded fixture's 60 groups repeated under new uids to 540 groups (15 408 traces,
//! about one paper step of 512 prompts × 32). Prints medians and ratios, and checks that both keep the same rows.

use std::process::Command;
use std::time::Instant;

use rstar_roc::RocConfig;
use rstar_roc::jsonl::select_jsonl;

const REPS: usize = 7;
const COPIES: usize = 9;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn time<T>(mut f: impl FnMut() -> T) -> (f64, T) {
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..REPS {
        let t = Instant::now();
        last = Some(f());
        times.push(t.elapsed().as_secs_f64());
    }
    (median(times), last.expect("REPS > 0"))
}

fn main() -> anyhow::Result<()> {
    let manifest = env!("CARGO_MANIFEST_DIR");
    let cases: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(format!(
        "{manifest}/tests/data/cases.json"
    ))?)?;
    let mut input = String::new();
    for copy in 0..COPIES {
        for row in cases["rows"].as_array().expect("rows") {
            let mut row = row.clone();
            row["uid"] = format!("{}-{copy}", row["uid"].as_str().expect("uid")).into();
            input.push_str(&serde_json::to_string(&row)?);
            input.push('\n');
        }
    }
    let traces = input.lines().count();
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("rollouts.jsonl");
    std::fs::write(&path, &input)?;

    let (t_ref, (_, sel_ref)) = time(|| {
        select_jsonl(input.as_bytes(), "bench", &RocConfig::reference()).expect("reference")
    });
    let (t_paper, (_, sel_paper)) =
        time(|| select_jsonl(input.as_bytes(), "bench", &RocConfig::paper()).expect("paper"));

    // What a trainer calls: selection on summaries it already holds.
    let (batch, _) =
        select_jsonl(input.as_bytes(), "bench", &RocConfig::reference()).expect("reference");
    let (t_sel, _) =
        time(|| rstar_roc::select(&batch.uids, &batch.traces, &RocConfig::paper()).expect("paper"));

    let python = std::env::var("RSTAR_PYTHON").unwrap_or_else(|_| "python3".into());
    let peer = std::env::var("RSTAR_PEER")
        .unwrap_or_else(|_| format!("{manifest}/../../xtask/bench/roc_peer.py"));
    let out = Command::new(&python)
        .arg(&peer)
        .arg(&path)
        .args([REPS.to_string(), "16".into(), "2".into(), "2".into()])
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "peer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let peer_out: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let t_py = peer_out["median_s"].as_f64().expect("median_s");
    let py_kept: Vec<usize> = peer_out["kept"]
        .as_array()
        .expect("kept")
        .iter()
        .map(|v| v.as_u64().expect("index") as usize)
        .collect();

    println!(
        "roc: {traces} traces in {} groups, median of {REPS} runs (parse + penalties + selection)",
        60 * COPIES
    );
    println!(
        "  rstar-roc reference mode   {:>9.2} ms   {:>7.0} traces/s",
        t_ref * 1e3,
        traces as f64 / t_ref
    );
    println!(
        "  rstar-roc paper mode       {:>9.2} ms   {:>7.0} traces/s",
        t_paper * 1e3,
        traces as f64 / t_paper
    );
    println!(
        "  rstar-roc paper, summaries {:>9.2} ms   {:>7.0} traces/s (selection only)",
        t_sel * 1e3,
        traces as f64 / t_sel
    );
    println!(
        "  python reference rule      {:>9.2} ms   {:>7.0} traces/s",
        t_py * 1e3,
        traces as f64 / t_py
    );
    println!(
        "  ratio python / rstar-roc (reference mode): {:.1}x",
        t_py / t_ref
    );
    println!(
        "  agreement with the peer: {} ({} kept); paper mode kept {}",
        if py_kept == sel_ref.kept {
            "identical"
        } else {
            "DIFFERENT"
        },
        sel_ref.kept.len(),
        sel_paper.kept.len()
    );
    anyhow::ensure!(
        py_kept == sel_ref.kept,
        "the peer and rstar-roc keep different rows"
    );
    Ok(())
}
