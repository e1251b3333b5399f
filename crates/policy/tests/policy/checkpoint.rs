//! Checkpoint round trips and the loader's errors.

use super::common::*;
use rstar_policy::checkpoint::write_safetensors;
use rstar_policy::{Error, QwenConfig, WeightDtype, load_dir, save_dir};
use rstar_policy::{Qwen, Tokenizer, load_model};
use serde_json::Value;

fn copy_fixture(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for file in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture_dir(name).join(file), dir.path().join(file)).unwrap();
    }
    dir
}

#[test]
fn save_and_load_round_trip_exactly() {
    let tokenizer = Tokenizer::char();
    let config = QwenConfig::test_tiny(tokenizer.vocab_size());
    let model = Qwen::random(config.clone(), 3, &device()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    save_dir(&model, &tokenizer, dir.path(), WeightDtype::F32).unwrap();
    let (loaded, tok2) = load_dir(dir.path(), &device()).unwrap();
    assert_eq!(loaded.config, config);
    let ids = tokenizer
        .encode("<|im_start|>user\nprint(2**10)<|im_end|>")
        .unwrap();
    assert_eq!(
        tok2.encode("<|im_start|>user\nprint(2**10)<|im_end|>")
            .unwrap(),
        ids
    );
    let a = to_vec(model.forward(ids_tensor(std::slice::from_ref(&ids), &device())));
    let b = to_vec(loaded.forward(ids_tensor(&[ids], &device())));
    assert_eq!(a, b);
}

#[test]
fn an_untied_copy_computes_what_the_tied_model_does() {
    let tokenizer = Tokenizer::char();
    let config = QwenConfig::test_tiny(tokenizer.vocab_size());
    assert!(config.tie_word_embeddings);
    let model = Qwen::random(config.clone(), 5, &device()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    rstar_policy::save_dir_untied(&model, &tokenizer, dir.path(), WeightDtype::F32).unwrap();
    let hf: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("config.json")).unwrap())
            .unwrap();
    assert_eq!(hf["tie_word_embeddings"], false);
    let (loaded, _) = load_dir(dir.path(), &device()).unwrap();
    assert!(!loaded.config.tie_word_embeddings);
    assert!(loaded.lm_head.is_some());
    let names: Vec<String> = loaded
        .hf_tensors()
        .unwrap()
        .into_iter()
        .map(|(s, _)| s.name)
        .collect();
    assert!(names.contains(&"lm_head.weight".to_string()));
    let ids = tokenizer.encode("print(2**10)").unwrap();
    let a = to_vec(model.forward(ids_tensor(std::slice::from_ref(&ids), &device())));
    let b = to_vec(loaded.forward(ids_tensor(&[ids], &device())));
    assert_eq!(a, b);
}

#[test]
fn hf_fixture_round_trips_through_our_format() {
    // Untied Qwen3 and tied Qwen2, with the HF tokenizer saved alongside.
    for name in ["qwen3_tiny", "qwen2_tiny"] {
        let model = load(name);
        let dir = tempfile::tempdir().unwrap();
        save_dir(&model, qwen_tokenizer(), dir.path(), WeightDtype::F32).unwrap();
        let loaded = load_model(dir.path(), &device()).unwrap();
        assert_eq!(loaded.config, model.config);
        let before = model.hf_tensors().unwrap();
        let after = loaded.hf_tensors().unwrap();
        assert_eq!(before, after, "{name}");
        // Names and first values match what transformers saved.
        let reference = reference(name);
        let recorded = reference["safetensors_tensors"].as_object().unwrap();
        assert_eq!(recorded.len(), before.len(), "{name}: tensor count");
        for (spec, data) in &before {
            let r = &recorded[&spec.name];
            assert_eq!(
                u32s(&r["shape"])
                    .iter()
                    .map(|&x| x as usize)
                    .collect::<Vec<_>>(),
                spec.shape
            );
            let first = f32s(&r["first4"]);
            assert_eq!(&data[..first.len()], first.as_slice(), "{}", spec.name);
        }
    }
}

#[test]
fn bf16_weights_load_rounded() {
    let model = load("qwen3_tiny");
    let dir = copy_fixture("qwen3_tiny");
    let tensors = model.hf_tensors().unwrap();
    write_safetensors(
        &dir.path().join("model.safetensors"),
        &tensors,
        WeightDtype::Bf16,
    )
    .unwrap();
    let loaded = load_model(dir.path(), &device()).unwrap();
    for ((spec, want), (_, got)) in tensors.iter().zip(loaded.hf_tensors().unwrap()) {
        let rounded: Vec<f32> = want
            .iter()
            .map(|&x| half::bf16::from_f32(x).to_f32())
            .collect();
        assert_eq!(rounded, got, "{}", spec.name);
    }
}

#[test]
fn sharded_weights_load() {
    let model = load("qwen2_tiny");
    let dir = copy_fixture("qwen2_tiny");
    std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    let tensors = model.hf_tensors().unwrap();
    let (a, b) = tensors.split_at(tensors.len() / 2);
    write_safetensors(
        &dir.path().join("model-00001-of-00002.safetensors"),
        a,
        WeightDtype::F32,
    )
    .unwrap();
    write_safetensors(
        &dir.path().join("model-00002-of-00002.safetensors"),
        b,
        WeightDtype::F32,
    )
    .unwrap();
    let loaded = load_model(dir.path(), &device()).unwrap();
    assert_eq!(loaded.hf_tensors().unwrap(), tensors);
}

#[test]
fn missing_tensor_is_named() {
    let model = load("qwen3_tiny");
    let dir = copy_fixture("qwen3_tiny");
    let tensors: Vec<_> = model
        .hf_tensors()
        .unwrap()
        .into_iter()
        .filter(|(s, _)| s.name != "model.layers.1.mlp.up_proj.weight")
        .collect();
    write_safetensors(
        &dir.path().join("model.safetensors"),
        &tensors,
        WeightDtype::F32,
    )
    .unwrap();
    let err = load_model(dir.path(), &device()).unwrap_err();
    assert!(
        matches!(&err, Error::MissingTensor { name, .. } if name == "model.layers.1.mlp.up_proj.weight"),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("model.layers.1.mlp.up_proj.weight")
    );
}

#[test]
fn shape_mismatch_is_named() {
    let model = load("qwen3_tiny");
    let dir = copy_fixture("qwen3_tiny");
    let mut tensors = model.hf_tensors().unwrap();
    let (spec, data) = tensors
        .iter_mut()
        .find(|(s, _)| s.name == "model.layers.0.self_attn.k_proj.weight")
        .unwrap();
    spec.shape = vec![64, 32];
    let _ = data;
    write_safetensors(
        &dir.path().join("model.safetensors"),
        &tensors,
        WeightDtype::F32,
    )
    .unwrap();
    let err = load_model(dir.path(), &device()).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::ShapeMismatch { .. }), "{msg}");
    assert!(
        msg.contains("model.layers.0.self_attn.k_proj.weight")
            && msg.contains("[64, 32]")
            && msg.contains("[32, 64]"),
        "{msg}"
    );
}

#[test]
fn unsupported_architecture_is_named() {
    let dir = copy_fixture("qwen2_tiny");
    let path = dir.path().join("config.json");
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("Qwen2ForCausalLM", "LlamaForCausalLM");
    std::fs::write(&path, text).unwrap();
    let msg = load_model(dir.path(), &device()).unwrap_err().to_string();
    assert!(
        msg.contains("architectures")
            && msg.contains("LlamaForCausalLM")
            && msg.contains("config.json"),
        "{msg}"
    );
}

#[test]
fn missing_weights_and_tokenizer_are_errors() {
    let dir = copy_fixture("qwen2_tiny");
    assert!(matches!(
        load_dir(dir.path(), &device()),
        Err(Error::NoTokenizer { .. })
    ));
    std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    assert!(matches!(
        load_model(dir.path(), &device()),
        Err(Error::NoWeights { .. })
    ));
}

/// The byte offset of tensor `name`'s data in a safetensors file.
fn data_offset(bytes: &[u8], name: &str) -> usize {
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    8 + header_len + header[name]["data_offsets"][0].as_u64().unwrap() as usize
}

#[test]
fn issue_42_non_finite_weights_are_refused_at_save_and_at_load() {
    let tokenizer = Tokenizer::char();
    let model = Qwen::random(QwenConfig::test_tiny(tokenizer.vocab_size()), 3, &device()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    save_dir(&model, &tokenizer, dir.path(), WeightDtype::F32).unwrap();
    let path = dir.path().join("model.safetensors");
    let name = "model.layers.1.self_attn.o_proj.weight";
    for (value, what) in [(f32::NAN, "NaN"), (f32::INFINITY, "inf")] {
        let mut bytes = std::fs::read(&path).unwrap();
        let at = data_offset(&bytes, name) + 4 * 5;
        bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
        let poisoned = tempfile::tempdir().unwrap();
        for f in std::fs::read_dir(dir.path()).unwrap() {
            let f = f.unwrap().path();
            std::fs::copy(&f, poisoned.path().join(f.file_name().unwrap())).unwrap();
        }
        std::fs::write(poisoned.path().join("model.safetensors"), &bytes).unwrap();
        // The digests catch the change first.
        let err = load_dir(poisoned.path(), &device()).unwrap_err();
        assert!(matches!(err, Error::Digest { .. }), "{what}: {err}");
        // Without them (an HF directory has none), the weights' own check does.
        std::fs::remove_file(poisoned.path().join(rstar_policy::DIGEST_FILE)).unwrap();
        let err = load_dir(poisoned.path(), &device()).unwrap_err();
        assert!(
            matches!(&err, Error::NonFinite { name: n, count: 1, first: 5, .. } if n == name),
            "{what}: {err}"
        );
        assert!(err.to_string().contains("model.safetensors"), "{err}");
        // A model holding such a weight is never written.
        let mut tensors = model.hf_tensors().unwrap();
        tensors[3].1[2] = value;
        let out = tempfile::tempdir().unwrap();
        let err = write_safetensors(
            &out.path().join("m.safetensors"),
            &tensors,
            WeightDtype::F32,
        )
        .unwrap_err();
        assert!(
            matches!(err, Error::NonFinite { first: 2, .. })
                && err.to_string().contains("m.safetensors"),
            "{err}"
        );
        assert!(!out.path().join("m.safetensors").exists());
    }
    // The sound directory loads, its digests checked.
    assert_eq!(
        rstar_policy::verify_digests(dir.path()).unwrap(),
        rstar_policy::DigestCheck::Verified(5)
    );
    load_dir(dir.path(), &device()).unwrap();
}
