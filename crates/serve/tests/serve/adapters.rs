//! LoRA adapters on a running server, as vLLM serves them (`/v1/load_lora_adapter`,
//! `/v1/unload_lora_adapter`) plus the one-file upload: a request naming a loaded adapter is
//! answered token for token and log-prob for log-prob as a server of the merged model's
//! directory answers it, reports the adapter as its model and weight version, and bad adapters
//! (shapes of another base, a NaN, an unknown tensor or adapter name) are refused with a 4xx
//! while the previous adapter keeps serving. [`RemoteEngine`] drives the same routes.

use std::path::Path;
use std::sync::Arc;

use burn::module::Param;
use burn::tensor::{Device, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use rstar_engine::remote::{RemoteEngine, RemoteEngineConfig};
use rstar_engine::{TurnGenerator, TurnSpec};
use rstar_policy::lora::{LoraConfig, Target, adapter_bytes, save_adapter};
use rstar_policy::{Qwen, QwenConfig, Sampling, Tokenizer, WeightDtype};
use rstar_serve::{ServeConfig, ServerHandle, start};
use serde_json::{Value, json};

use super::common::{MODEL, http, load, post, runtime};

const PROMPT: &str = "Q:12*34?\nA:";

/// `base` with rank-4 adapters on every target whose A and B are drawn from `seed` (a fresh
/// adapter's B is zero, which would change nothing).
fn adapted(base: &Qwen, seed: u64) -> Qwen {
    let mut model = base
        .clone()
        .with_lora(&LoraConfig::new(4, 8.0), seed)
        .unwrap();
    let device = model.device();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let lora = model.lora.as_mut().unwrap();
    for layer in &mut lora.layers {
        for t in Target::ALL {
            if let Some(pair) = layer.slot(t) {
                let [r, out] = pair.b.val().dims();
                let values: Vec<f32> = (0..r * out).map(|_| rng.random_range(-0.5..0.5)).collect();
                pair.b = Param::<Tensor<2>>::from_data(TensorData::new(values, [r, out]), &device);
            }
        }
    }
    model
}

/// A server of `model` on a free port, one engine, one choice a batch.
fn serve(rt: &tokio::runtime::Runtime, model: Qwen) -> ServerHandle {
    let mut config = ServeConfig::new(MODEL);
    config.port = 0;
    config.max_batch = 1;
    rt.block_on(start(model, Tokenizer::char(), config))
        .unwrap()
}

/// A seeded temperature-1 completion of `model`: (token ids, log-probs, the answer's `model`,
/// the choice's weight version).
fn sample(addr: &str, model: &str) -> (Vec<u64>, Vec<f64>, String, String) {
    let (status, body) = post(
        addr,
        "/v1/completions",
        &json!({"model": model, "prompt": PROMPT, "max_tokens": 12, "temperature": 1.0,
                "seed": 5, "logprobs": 1}),
    );
    assert_eq!(status, 200, "{body}");
    let choice = &body["choices"][0];
    (
        serde_json::from_value(choice["token_ids"].clone()).unwrap(),
        serde_json::from_value(choice["logprobs"]["token_logprobs"].clone()).unwrap(),
        body["model"].as_str().unwrap().to_string(),
        choice["weight_version"].as_str().unwrap().to_string(),
    )
}

/// The same tokens, and log-probs equal to float rounding.
fn same(a: &(Vec<u64>, Vec<f64>), b: &(Vec<u64>, Vec<f64>)) -> bool {
    a.0 == b.0 && a.1.len() == b.1.len() && a.1.iter().zip(&b.1).all(|(x, y)| (x - y).abs() < 1e-5)
}

fn load_adapter(addr: &str, name: &str, dir: &Path) -> (u16, String) {
    http(
        addr,
        "POST",
        "/v1/load_lora_adapter",
        &json!({"lora_name": name, "lora_path": dir}).to_string(),
    )
}

fn upload(addr: &str, name: &str, bytes: &[u8]) -> (u16, String) {
    rstar_testdata::http_bytes(
        addr,
        "POST",
        &format!("/v1/upload_lora_adapter?lora_name={name}"),
        bytes,
    )
}

fn listed(addr: &str) -> Vec<(String, Option<String>)> {
    let (status, text) = http(addr, "GET", "/v1/models", "");
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap().to_string(),
                m["parent"].as_str().map(str::to_string),
            )
        })
        .collect()
}

#[test]
fn an_adapter_loaded_through_the_route_serves_what_its_merged_directory_serves() {
    let rt = runtime();
    let (base, tokenizer) = load();
    let tuned = adapted(&base, 3);
    let adapter_dir = tempfile::tempdir().unwrap();
    save_adapter(&tuned, adapter_dir.path(), MODEL).unwrap();
    // The merged model as a directory (what a full-weight publish writes), served on its own.
    let merged_dir = tempfile::tempdir().unwrap();
    rstar_policy::save_dir(&tuned, &tokenizer, merged_dir.path(), WeightDtype::F32).unwrap();
    let (merged, _) = rstar_policy::load_dir(merged_dir.path(), &Device::flex()).unwrap();

    let server = serve(&rt, base.clone());
    let merged_server = serve(&rt, merged);
    let addr = server.addr().to_string();
    let reference = sample(&merged_server.addr().to_string(), MODEL);
    let base_before = sample(&addr, MODEL);

    let (status, text) = load_adapter(&addr, "step-1", adapter_dir.path());
    assert_eq!(status, 200, "{text}");
    assert_eq!(text, "Success: LoRA adapter 'step-1' added successfully.");
    let got = sample(&addr, "step-1");
    assert!(
        same(
            &(got.0.clone(), got.1.clone()),
            &(reference.0.clone(), reference.1.clone())
        ),
        "adapter {got:?} vs merged directory {reference:?}"
    );
    assert_eq!((got.2.as_str(), got.3.as_str()), ("step-1", "step-1"));
    // The base is served as before, beside the adapter.
    let base_after = sample(&addr, MODEL);
    assert_eq!(base_after, base_before);
    assert!(!same(&(got.0, got.1), &(base_after.0, base_after.1)));
    assert_eq!(
        listed(&addr),
        vec![
            (MODEL.to_string(), None),
            ("step-1".to_string(), Some(MODEL.to_string()))
        ]
    );

    // The same adapter as one uploaded file, under the next name.
    let (status, text) = upload(&addr, "step-2", &adapter_bytes(&tuned, MODEL).unwrap());
    assert_eq!(status, 200, "{text}");
    let uploaded = sample(&addr, "step-2");
    assert_eq!(uploaded.0, reference.0);
    assert_eq!(uploaded.3, "step-2");

    // Unloaded: requests naming it are refused, and so is unloading it again.
    let (status, text) = http(
        &addr,
        "POST",
        "/v1/unload_lora_adapter",
        &json!({"lora_name": "step-1"}).to_string(),
    );
    assert_eq!(
        (status, text.as_str()),
        (200, "Success: LoRA adapter 'step-1' removed successfully.")
    );
    let (status, body) = post(
        &addr,
        "/v1/completions",
        &json!({"model": "step-1", "prompt": PROMPT, "max_tokens": 2}),
    );
    assert_eq!(status, 404, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`step-2`"),
        "{body}"
    );
    let (status, _) = http(
        &addr,
        "POST",
        "/v1/unload_lora_adapter",
        &json!({"lora_name": "step-1"}).to_string(),
    );
    assert_eq!(status, 404);
    assert_eq!(sample(&addr, "step-2").0, reference.0);

    // RemoteEngine drives the same routes, and reads the adapter back as the turn's version.
    let engine = RemoteEngine::new(
        RemoteEngineConfig::new(server.url(), Vec::new()),
        Arc::new(Tokenizer::char()),
    )
    .unwrap();
    rt.block_on(engine.load_lora_adapter("step-3", adapter_dir.path()))
        .unwrap();
    rt.block_on(engine.unload_lora_adapter("step-2")).unwrap();
    let err = rt
        .block_on(engine.unload_lora_adapter("step-2"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("404") && err.contains("step-2"), "{err}");
    let mut config = RemoteEngineConfig::new(server.url(), Vec::new());
    config.model = Some("step-3".into());
    config.model_is_version = true;
    config.sampling = Sampling::Temperature { temperature: 1.0 };
    let turns = RemoteEngine::new(config, Arc::new(Tokenizer::char())).unwrap();
    let spec = TurnSpec {
        rollout: 0,
        turn: 0,
        context: Tokenizer::char().encode(PROMPT).unwrap(),
        max_new_tokens: 12,
        seed: 5,
    };
    let turn = rt.block_on(turns.generate(spec)).unwrap();
    assert_eq!(turn.weight_version.as_deref(), Some("step-3"));
    let ids: Vec<u64> = turn.tokens.iter().map(|&t| u64::from(t)).collect();
    assert_eq!(ids, reference.0);

    rt.block_on(server.shutdown()).unwrap();
    rt.block_on(merged_server.shutdown()).unwrap();
}

/// `bytes` (a safetensors file) with the first value of the tensor `name` set to NaN.
fn with_nan(bytes: &[u8], name: &str) -> Vec<u8> {
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    let start = header[name]["data_offsets"][0].as_u64().unwrap() as usize;
    let mut out = bytes.to_vec();
    let at = 8 + header_len + start;
    out[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    out
}

/// `bytes` with every `from` in its header replaced by `to` (of the same length, so the
/// offsets hold).
fn renamed(bytes: &[u8], from: &str, to: &str) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&bytes[8..8 + header_len]).unwrap();
    let mut out = bytes[..8].to_vec();
    out.extend_from_slice(header.replace(from, to).as_bytes());
    out.extend_from_slice(&bytes[8 + header_len..]);
    out
}

#[test]
fn bad_adapters_are_refused_and_the_previous_one_keeps_serving() {
    let rt = runtime();
    let (base, _) = load();
    let tuned = adapted(&base, 3);
    let server = serve(&rt, base.clone());
    let addr = server.addr().to_string();
    let good = adapter_bytes(&tuned, MODEL).unwrap();
    let (status, text) = upload(&addr, "step-1", &good);
    assert_eq!(status, 200, "{text}");
    let serving = sample(&addr, "step-1");

    // An adapter of another base: its shapes do not fit this one.
    let other_config = QwenConfig {
        hidden_size: QwenConfig::tiny_char().hidden_size * 2,
        ..QwenConfig::tiny_char()
    };
    let other = adapted(&Qwen::random(other_config, 1, &Device::flex()).unwrap(), 3);
    let first_a = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
    let nan = with_nan(&good, first_a);
    let unknown = renamed(
        &good,
        "layers.0.self_attn.q_proj",
        "layers.0.self_attn.x_proj",
    );
    let cases: [(&str, Vec<u8>, &str); 4] = [
        ("shapes", adapter_bytes(&other, MODEL).unwrap(), "shape"),
        ("nan", nan, "non-finite"),
        ("unknown tensor", unknown, "q_proj"),
        ("not safetensors", b"{}".to_vec(), "uploaded adapter"),
    ];
    for (what, bytes, says) in cases {
        for name in ["step-2", "step-1"] {
            let (status, text) = rstar_testdata::http_bytes(
                &addr,
                "POST",
                &format!("/v1/upload_lora_adapter?lora_name={name}&load_inplace=true"),
                &bytes,
            );
            assert_eq!(status, 400, "{what}: {text}");
            assert!(text.contains(says), "{what}: {text}");
        }
        assert_eq!(sample(&addr, "step-1"), serving, "{what}");
    }
    let dir_missing = load_adapter(&addr, "step-2", Path::new("/nonexistent/adapter"));
    assert_eq!(dir_missing.0, 400, "{}", dir_missing.1);
    assert!(
        dir_missing.1.contains("adapter_config.json"),
        "{}",
        dir_missing.1
    );

    // Unknown names: a request, an unload.
    let (status, body) = post(
        &addr,
        "/v1/completions",
        &json!({"model": "step-9", "prompt": PROMPT, "max_tokens": 2}),
    );
    assert_eq!(status, 404, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`step-1`"),
        "{body}"
    );
    let (status, text) = http(
        &addr,
        "POST",
        "/v1/unload_lora_adapter",
        &json!({"lora_name": "step-9"}).to_string(),
    );
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("'step-9' cannot be found"), "{text}");

    // A name already loaded (without `load_inplace`), the base model's name, no name.
    for (query, says) in [
        ("lora_name=step-1", "already been loaded"),
        (&format!("lora_name={MODEL}") as &str, "base model"),
        ("", "`lora_name`"),
    ] {
        let (status, text) = rstar_testdata::http_bytes(
            &addr,
            "POST",
            &format!("/v1/upload_lora_adapter?{query}"),
            &good,
        );
        assert_eq!(status, 400, "{query}: {text}");
        assert!(text.contains(says), "{query}: {text}");
    }
    // The base stays while adapters are merged over it.
    let dir = tempfile::tempdir().unwrap();
    rstar_policy::save_dir(&base, &Tokenizer::char(), dir.path(), WeightDtype::F32).unwrap();
    let (status, body) = post(
        &addr,
        "/update_weights_from_disk",
        &json!({"model_path": dir.path()}),
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("`step-1`"),
        "{body}"
    );
    assert_eq!(sample(&addr, "step-1"), serving);
    assert_eq!(
        listed(&addr),
        vec![
            (MODEL.to_string(), None),
            ("step-1".to_string(), Some(MODEL.to_string()))
        ]
    );
    rt.block_on(server.shutdown()).unwrap();
}
