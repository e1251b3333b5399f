//! `rstar train --backend wgpu` end to end (only with the `wgpu` feature; `cargo xtask ci` runs
//! it on Mesa's lavapipe, a Vulkan driver on the CPU): the shrunk smoke run finishes on the
//! wgpu device, and its first SFT loss, computed before any update, matches the flex run's.

use serde_json::Value;

use super::train::rstar;
use super::train_common::{jsonl, small_smoke_config};

/// The `loss` column of a run's `sft_metrics.jsonl`.
fn sft_losses(run: &std::path::Path) -> Vec<f64> {
    jsonl::<Value>(&run.join("sft_metrics.jsonl"))
        .iter()
        .map(|l| l["loss"].as_f64().unwrap())
        .collect()
}

#[test]
fn wgpu_smoke_training_runs_end_to_end_and_starts_like_flex() {
    let dir = tempfile::tempdir().unwrap();
    let config_path = small_smoke_config(dir.path());
    // Shrunk further for lavapipe, where a step costs ten times flex's: two problems per
    // evaluation and 64-token turns everywhere (47 s to 27 s here). The run's shape (8 SFT
    // steps, three stages of two RL steps, four evaluations) is the smoke preset's.
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    config["eval"]["problems"] = 2.into();
    config["eval"]["max_response_tokens"] = 64.into();
    for stage in config["curriculum"]["stage"].as_array_mut().unwrap() {
        stage["max_response_tokens"] = 64.into();
    }
    std::fs::write(&config_path, config.to_string()).unwrap();
    let mut losses = Vec::new();
    for backend in ["flex", "wgpu"] {
        let out = dir.path().join(backend);
        let (ok, stdout, stderr) = rstar(&[
            "train",
            "--config",
            config_path.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--seed",
            "3",
            "--backend",
            backend,
        ]);
        assert!(ok, "{backend}: {stderr}");
        assert!(stdout.contains("| stage hard |"), "{backend}: {stdout}");
        let metrics = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
        assert_eq!(metrics.lines().count(), 6, "{backend}");
        let evals = std::fs::read_to_string(out.join("eval.jsonl")).unwrap();
        assert_eq!(evals.lines().count(), 4, "{backend}");
        let l = sft_losses(&out);
        assert_eq!(l.len(), 8, "{backend}");
        assert!(l.iter().all(|x| x.is_finite()), "{backend}: {l:?}");
        assert!(
            l[7] < l[0],
            "{backend}: the SFT loss did not go down: {l:?}"
        );
        losses.push(l);
    }
    // Same initial weights and first batch: the loss before any update agrees to float
    // rounding (the backends' kernels sum in different orders).
    let (flex, wgpu) = (losses[0][0], losses[1][0]);
    assert!(
        (flex - wgpu).abs() <= 1e-3 * flex.abs().max(1.0),
        "first SFT loss: flex {flex} vs wgpu {wgpu}"
    );
}
