//! `rstar train --lora`: SFT and GRPO-RoC on LoRA adapters over a frozen base. The run's
//! checkpoints hold the adapters alone (PEFT's files) and the base's digest; a run stopped after
//! RL step 1 and resumed ends as an uninterrupted one, bit for bit; AdamW keeps moments for the
//! adapters alone and none after the curriculum's reset; a base whose weights changed is
//! refused with both digests; a stage's adapter evaluates as its merged model.

use std::collections::HashSet;
use std::path::Path;

use burn::tensor::Device;
use rstar_agent::train::TrainConfig;
use rstar_policy::lora::LoraConfig;
use rstar_policy::{Tokenizer, WeightDtype, save_dir};
use serde_json::Value;

use super::lora::{eval_greedy, merge};
use super::resume::{config_file, records, train};
use super::train::rstar;

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The parameter ids AdamW's record (`optimizer.bpk`) keeps state for.
fn optimizer_ids(dir: &Path) -> Vec<u64> {
    let record = burn_pack::Reader::from_file(dir.join("optimizer.bpk")).unwrap();
    record
        .into_tensors()
        .unwrap()
        .into_iter()
        .map(|t| {
            let (_, _, _, id, _) = t.into_parts().unwrap();
            id.expect("state keyed by a parameter")
        })
        .collect()
}

/// The run in `parts` (stopped and resumed) ended as the one in `whole`: the same records in
/// each of `files` (none empty) and the same adapter bytes in the last checkpoint.
fn same_ending(whole: &Path, parts: &Path, files: &[&str]) {
    for file in files {
        let (a, b) = (records(&whole.join(file)), records(&parts.join(file)));
        assert!(!a.is_empty(), "{file}");
        assert_eq!(a, b, "{file}");
    }
    let adapter = "checkpoints/last/adapter_model.safetensors";
    assert_eq!(
        std::fs::read(whole.join(adapter)).unwrap(),
        std::fs::read(parts.join(adapter)).unwrap()
    );
}

#[test]
fn a_lora_run_trains_the_adapters_alone_and_resumes_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    // The resume test's shrunk smoke run, with SFT on adapters too (over `init`).
    let smoke = config_file(dir.path());
    let mut config = TrainConfig::from_json_file(Path::new(&smoke)).unwrap();
    config.sft.lora = Some(LoraConfig::new(4, 8.0));
    let path = dir.path().join("lora.json");
    std::fs::write(&path, serde_json::to_string(&config).unwrap()).unwrap();
    let config = path.to_str().unwrap();
    let whole = dir.path().join("whole");
    let parts = dir.path().join("parts");
    let (whole_s, parts_s) = (whole.to_str().unwrap(), parts.to_str().unwrap());
    let lora = ["--lora", "4", "--lora-alpha", "16", "--seed", "5"];
    let out = train(&[&["train", "--config", config, "--out", whole_s][..], &lora].concat());
    assert!(
        out.contains("rl: LoRA rank 4 (alpha 16) on q_proj"),
        "{out}"
    );
    assert!(
        out.contains("sft: LoRA rank 4 (alpha 8) on q_proj"),
        "{out}"
    );
    // The table, the report page and TensorBoard say what trained.
    let rl_line = "rl: LoRA rank 4 (alpha 16) on q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj";
    assert!(
        out.contains(&format!("{rl_line} (the base frozen)")),
        "{out}"
    );
    let page = std::fs::read_to_string(whole.join("report.html")).unwrap();
    assert!(
        page.contains("<th>what trains</th><td>sft: LoRA rank 4 (alpha 8) on q_proj"),
        "{page}"
    );
    let tb = std::fs::read_dir(whole.join("tb"))
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .next()
        .unwrap();
    let holds = |needle: &str| tb.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(holds("run/lora") && holds(rl_line));
    let saved = json(&whole.join("config.json"));
    assert_eq!(saved["rl"]["lora"]["rank"], 4);
    assert_eq!(saved["rl"]["lora"]["alpha"], 16.0);
    assert_eq!(saved["sft"]["lora"]["alpha"], 8.0);

    // The last checkpoint: the adapters in PEFT's layout and the base's digest, no model.
    let last = whole.join("checkpoints/last");
    let state = json(&last.join("state.json"));
    assert_eq!(state["lora_base"]["path"], "checkpoints/sft");
    assert!(!last.join("model.safetensors").exists());
    let adapter = json(&last.join("adapter_config.json"));
    assert_eq!(
        (adapter["r"].as_u64(), adapter["lora_alpha"].as_u64()),
        (Some(4), Some(16))
    );
    let base = whole.join("checkpoints/sft");
    let (base_model, _) = rstar_policy::load_dir(&base, &Device::flex()).unwrap();
    let digest = base_model.base_digest().unwrap();
    assert_eq!(state["lora_base"]["digest"], digest.as_str());
    // SFT's adapters were merged into the model RL started from: it is not `init`.
    let (init, _) = rstar_policy::load_dir(&dir.path().join("init"), &Device::flex()).unwrap();
    assert_ne!(init.base_digest().unwrap(), digest);
    // RL moved the adapters away from zero, and only them.
    let tuned = rstar_policy::lora::load_adapter(base_model.clone(), &last).unwrap();
    assert_eq!(tuned.base_digest().unwrap(), digest);
    assert_ne!(
        tuned.hf_tensors().unwrap(),
        base_model.hf_tensors().unwrap(),
        "the adapters changed the model"
    );
    // A stage's checkpoint is its adapter, naming the base by absolute path.
    let stage = whole.join("checkpoints/stage-hard");
    let base_abs = std::path::absolute(&base).unwrap();
    assert_eq!(
        json(&stage.join("adapter_config.json"))["base_model_name_or_path"],
        base_abs.to_str().unwrap()
    );

    // Stopped after SFT step 2 (on adapters) and after RL step 1, then resumed: as the whole run.
    let out = train(
        &[
            &["train", "--config", config, "--out", parts_s][..],
            &lora,
            &["--stop-after-sft-steps", "2"],
        ]
        .concat(),
    );
    assert!(out.contains("stopped early"), "{out}");
    let sft_state = json(&parts.join("checkpoints/last/state.json"));
    assert_eq!(
        sft_state["lora_base"]["path"],
        std::path::absolute(dir.path().join("init"))
            .unwrap()
            .to_str()
            .unwrap()
    );
    train(&["train", "--resume", parts_s, "--stop-after-rl-steps", "1"]);
    // After steps 1 and 2 (the stage `short`, no reset): moments for the adapters alone, the
    // last 2 × 7 × layers ids in visiting order.
    train(&["train", "--resume", parts_s, "--stop-after-rl-steps", "2"]);
    let state = json(&parts.join("checkpoints/last/state.json"));
    let ids: Vec<u64> = state["param_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let adapters = 2 * 7 * base_model.config.num_hidden_layers;
    let adapter_ids: HashSet<u64> = ids[ids.len() - adapters..].iter().copied().collect();
    let kept: HashSet<u64> = optimizer_ids(&parts.join("checkpoints/last"))
        .into_iter()
        .collect();
    assert!(!kept.is_empty());
    assert!(kept.is_subset(&adapter_ids), "state for a base parameter");
    // Step 4 ends the stage `long`; `hard` starts with the optimizer reset: nothing kept.
    train(&["train", "--resume", parts_s, "--stop-after-rl-steps", "4"]);
    assert!(optimizer_ids(&parts.join("checkpoints/last")).is_empty());
    let copy = dir.path().join("copy");
    let copy_s = copy.to_str().unwrap();
    let status = std::process::Command::new("cp")
        .args(["-a", parts_s, copy_s])
        .status()
        .unwrap();
    assert!(status.success());
    let other = rstar_policy::Qwen::random(base_model.config.clone(), 99, &Device::flex()).unwrap();
    let other_digest = other.base_digest().unwrap();
    let copy_base = copy.join("checkpoints/sft");
    std::fs::remove_dir_all(&copy_base).unwrap();
    save_dir(&other, &Tokenizer::char(), &copy_base, WeightDtype::F32).unwrap();
    train(&["train", "--resume", parts_s]);
    same_ending(
        &whole,
        &parts,
        &[
            "sft_metrics.jsonl",
            "metrics.jsonl",
            "eval.jsonl",
            "samples.jsonl",
        ],
    );

    // The stage's adapter evaluates as its merged model.
    let merged = dir.path().join("merged");
    merge(&base, &stage, &merged);
    let data = dir.path().join("problems.jsonl");
    let eval = |model: &Path, adapter: Option<&Path>, out: &str| -> Value {
        let out = dir.path().join(out);
        eval_greedy(model, adapter, &data, "96", &out);
        let summary = json(&out.join("summary.json"))["summary"].clone();
        assert_eq!(summary["problems"], 8);
        // Greedy: the same answers, lengths and tool calls, not only the same accuracy.
        summary
    };
    assert_eq!(
        eval(&base, Some(&stage), "with-adapter"),
        eval(&merged, None, "merged")
    );

    // A resume over a base whose weights changed is refused, naming both digests (a copy of
    // the run as it stood after step 4, its base `checkpoints/sft` replaced).
    let (ok, _, stderr) = rstar(&["train", "--resume", copy_s]);
    assert!(!ok);
    assert!(
        stderr.contains(&digest) && stderr.contains(&other_digest),
        "{stderr}"
    );
    assert!(stderr.contains("not the base"), "{stderr}");
}

/// `--base-precision bf16`: RL's adapters over a base whose projections are held in bf16. The
/// state records it, the log says it, a run stopped after RL step 1 and resumed ends as the
/// uninterrupted one bit for bit (the resumed base is rounded again, the same way), and the flag
/// without LoRA is refused with the reason.
#[test]
fn a_bf16_base_run_resumes_bit_for_bit_and_is_refused_without_lora() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path());
    let (ok, _, stderr) = rstar(&[
        "train",
        "--config",
        &config,
        "--out",
        dir.path().join("refused").to_str().unwrap(),
        "--base-precision",
        "bf16",
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("rl.base_precision") && stderr.contains("needs `rl.lora`"),
        "{stderr}"
    );
    assert!(!dir.path().join("refused/checkpoints").exists());

    let whole = dir.path().join("whole");
    let parts = dir.path().join("parts");
    let (whole_s, parts_s) = (whole.to_str().unwrap(), parts.to_str().unwrap());
    let flags = ["--lora", "4", "--base-precision", "bf16", "--seed", "5"];
    let out = train(
        &[
            &["train", "--config", &config, "--out", whole_s][..],
            &flags,
        ]
        .concat(),
    );
    assert!(out.contains("with its projections in bf16"), "{out}");
    assert_eq!(
        json(&whole.join("config.json"))["rl"]["base_precision"],
        "bf16"
    );
    let state = json(&whole.join("checkpoints/last/state.json"));
    assert_eq!(state["lora_base"]["precision"], "bf16");
    // The digest is the base's as saved (f32), before the rounding.
    let (base, _) =
        rstar_policy::load_dir(&whole.join("checkpoints/sft"), &Device::flex()).unwrap();
    assert_eq!(
        state["lora_base"]["digest"],
        base.base_digest().unwrap().as_str()
    );

    train(
        &[
            &["train", "--config", &config, "--out", parts_s][..],
            &flags,
            &["--stop-after-rl-steps", "1"],
        ]
        .concat(),
    );
    let (ok, _, stderr) = rstar(&["train", "--resume", parts_s, "--base-precision", "f32"]);
    assert!(!ok && stderr.contains("--base-precision"), "{stderr}");
    train(&["train", "--resume", parts_s]);
    same_ending(
        &whole,
        &parts,
        &["metrics.jsonl", "eval.jsonl", "samples.jsonl"],
    );
}
