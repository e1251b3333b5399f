//! `rstar lora merge` and `--adapter` on `rstar eval`: PEFT's own adapter merged into the tiny
//! Qwen3 gives PEFT's merged logits; an adapter evaluated with `--adapter` answers as its merged
//! directory does, and not as the base does.

use std::path::Path;

use burn::tensor::{Device, Int, Tensor, TensorData};
use rstar_policy::lora::{LoraConfig, save_adapter};
use rstar_policy::{Qwen, QwenConfig, Tokenizer, WeightDtype, save_dir};
use serde_json::Value;

/// Runs `rstar ARGS` with the sandbox's interpreter: (exit code, stdout, stderr).
fn rstar(args: &[&str]) -> (i32, String, String) {
    let python = rstar_testdata::python();
    let r = super::common::run(args, None, &[("RSTAR_PYTHON", python.as_os_str())]);
    (r.code, r.out(), r.stderr)
}

/// `rstar lora merge --base BASE --adapter ADAPTER --out OUT`: (exit code, stderr).
fn try_merge(base: &Path, adapter: &Path, out: &Path) -> (i32, String) {
    let (code, _, stderr) = rstar(&[
        "lora",
        "merge",
        "--base",
        base.to_str().unwrap(),
        "--adapter",
        adapter.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    (code, stderr)
}

/// [`try_merge`], which must succeed.
pub(super) fn merge(base: &Path, adapter: &Path, out: &Path) {
    let (code, stderr) = try_merge(base, adapter, out);
    assert_eq!(code, 0, "{stderr}");
}

/// `rstar eval` of `model` (with `--adapter` when given) on `data`, greedy, at most
/// `max_tokens` a turn, into `out`, which must succeed.
pub(super) fn eval_greedy(
    model: &Path,
    adapter: Option<&Path>,
    data: &Path,
    max_tokens: &str,
    out: &Path,
) {
    let mut args = vec![
        "eval",
        "--model",
        model.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--temperature",
        "0",
        "--max-response-tokens",
        max_tokens,
        "--workers",
        "1",
        "--out",
        out.to_str().unwrap(),
    ];
    if let Some(a) = adapter {
        args.extend(["--adapter", a.to_str().unwrap()]);
    }
    let (code, _, stderr) = rstar(&args);
    assert_eq!(code, 0, "{stderr}");
}

fn logits(model: &Qwen, ids: &[u32]) -> Vec<f32> {
    let data: Vec<i64> = ids.iter().map(|&x| i64::from(x)).collect();
    let tokens =
        Tensor::<2, Int>::from_data(TensorData::new(data, [1, ids.len()]), &model.device());
    model.forward(tokens).try_into_vec_as::<f32>().unwrap()
}

#[test]
fn merge_writes_a_plain_hf_directory_with_pefts_merged_logits() {
    let base = rstar_testdata::fixture("qwen/qwen3_tiny");
    let peft = rstar_testdata::fixture("peft");
    // PEFT's case 1 adapter, copied into rstar-policy's test data.
    let case_1 = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policy/tests/data/peft/case_1");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("merged");
    merge(&base, &case_1, &out);
    for file in ["config.json", "generation_config.json", "model.safetensors"] {
        assert!(out.join(file).is_file(), "{file}");
    }
    // The base's config is copied byte for byte.
    assert_eq!(
        std::fs::read(out.join("config.json")).unwrap(),
        std::fs::read(base.join("config.json")).unwrap()
    );
    let model = rstar_policy::load_model(&out, &Device::flex()).unwrap();
    assert!(model.lora.is_none());
    let reference: Value =
        serde_json::from_str(&std::fs::read_to_string(peft.join("reference.json")).unwrap())
            .unwrap();
    let input = reference["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["length"] == 7)
        .unwrap();
    let ids: Vec<u32> = input["input_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect();
    let want: Vec<f32> = reference["cases"][0]["merged"]["7"]["logits"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|row| row.as_array().unwrap().iter())
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    let got = logits(&model, &ids);
    let diff = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert_eq!(got.len(), want.len());
    assert!(diff <= 1e-4, "{diff}");

    // A second merge into the same directory is refused; a bad adapter is named.
    let (code, stderr) = try_merge(&base, &case_1, &out);
    assert_ne!(code, 0);
    assert!(stderr.contains("already holds a model"), "{stderr}");
    let (code, stderr) = try_merge(&base, tmp.path(), &tmp.path().join("other"));
    assert_ne!(code, 0);
    assert!(stderr.contains("adapter_config.json"), "{stderr}");
}

/// A random embedded-default model and a random adapter on it (B drawn, not zero).
fn model_and_adapter(dir: &Path) {
    let model = Qwen::random(QwenConfig::tiny_char(), 0, &Device::flex()).unwrap();
    save_dir(
        &model,
        &Tokenizer::char(),
        &dir.join("base"),
        WeightDtype::F32,
    )
    .unwrap();
    let mut tuned = model.with_lora(&LoraConfig::new(4, 8.0), 1).unwrap();
    let lora = tuned.lora.as_mut().unwrap();
    for layer in &mut lora.layers {
        for t in rstar_policy::lora::Target::ALL {
            let pair = layer.slot(t).as_mut().unwrap();
            // B = Aᵀ-shaped noise, large enough to change the greedy answers.
            let [r, out] = pair.b.val().dims();
            let data: Vec<f32> = (0..r * out)
                .map(|i| ((i * 7919) % 13) as f32 * 0.05 - 0.3)
                .collect();
            pair.b =
                burn::module::Param::from_data(TensorData::new(data, [r, out]), &Device::flex());
        }
    }
    save_adapter(&tuned, &dir.join("adapter"), "base").unwrap();
}

#[test]
fn eval_with_an_adapter_answers_as_its_merged_directory() {
    let tmp = tempfile::tempdir().unwrap();
    model_and_adapter(tmp.path());
    let data = tmp.path().join("tiny.jsonl");
    std::fs::write(
        &data,
        "{\"id\": \"a\", \"problem\": \"What is 2+2?\", \"answer\": \"4\"}\n\
         {\"id\": \"b\", \"problem\": \"What is 3*3?\", \"answer\": \"9\"}\n",
    )
    .unwrap();
    let (base, adapter) = (tmp.path().join("base"), tmp.path().join("adapter"));
    let merged = tmp.path().join("merged");
    merge(&base, &adapter, &merged);
    let eval = |model: &Path, adapter: Option<&Path>, out: &str| -> String {
        let out = tmp.path().join(out);
        eval_greedy(model, adapter, &data, "16", &out);
        let lines = std::fs::read_to_string(out.join("trajectories.jsonl")).unwrap();
        lines
            .lines()
            .map(|l| {
                let t: Value = serde_json::from_str(l).unwrap();
                t["turns"].to_string()
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let with_adapter = eval(&base, Some(&adapter), "a");
    assert_eq!(with_adapter, eval(&merged, None, "m"));
    assert_ne!(
        with_adapter,
        eval(&base, None, "b"),
        "the adapter changes the answers"
    );
    // A server URL has its own model: --adapter is refused there.
    let (code, _, stderr) = rstar(&[
        "eval",
        "--model",
        "http://127.0.0.1:9",
        "--adapter",
        adapter.to_str().unwrap(),
        "--tokenizer",
        "char",
        "--data",
        data.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(stderr.contains("--adapter"), "{stderr}");
}

#[test]
fn serve_with_an_adapter_answers_as_its_merged_directory() {
    use super::common::{Listening, command};
    use super::serve_common::post;
    let tmp = tempfile::tempdir().unwrap();
    model_and_adapter(tmp.path());
    let (base, adapter) = (tmp.path().join("base"), tmp.path().join("adapter"));
    let merged = tmp.path().join("merged");
    merge(&base, &adapter, &merged);
    let complete = |model: &Path, adapter: Option<&Path>| -> Value {
        let mut cmd = command();
        cmd.args([
            "serve",
            "--port",
            "0",
            "--served-model-name",
            "m",
            "--model",
        ])
        .arg(model);
        if let Some(a) = adapter {
            cmd.arg("--adapter").arg(a);
        }
        let server = Listening::start(&mut cmd);
        let (status, out) = post(
            &server.addr,
            "/v1/completions",
            &serde_json::json!({"model": "m", "prompt": "12*34=", "max_tokens": 12, "temperature": 0}),
        );
        assert_eq!(status, 200, "{out}");
        let (ok, rest) = server.stop("INT");
        assert!(ok, "{rest}");
        out["choices"][0]["text"].clone()
    };
    let with_adapter = complete(&base, Some(&adapter));
    assert_eq!(with_adapter, complete(&merged, None));
    assert_ne!(
        with_adapter,
        complete(&base, None),
        "the adapter changes the answer"
    );
}
