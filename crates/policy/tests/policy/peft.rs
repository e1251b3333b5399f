//! PEFT adapter files (`rstar_policy::lora::{save_adapter, load_adapter}`): what we save has
//! PEFT's names, shapes and dtypes and reloads bit for bit; the merge equals `W + s·B·A`
//! computed from the files by the test's own loops; and what we cannot compute exactly is
//! refused, naming the file and the field or tensor.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::common::*;
use super::lora::{install, random_pairs};
use rstar_policy::lora::{
    ADAPTER_CONFIG_FILE, ADAPTER_CONFIG_METADATA, ADAPTER_WEIGHTS_FILE, LoraConfig, adapter_bytes,
    load_adapter, load_adapter_bytes, read_adapter_config, save_adapter,
};
use rstar_policy::{Qwen, Tokenizer, WeightDtype, save_dir};
use serde_json::{Value, json};

/// A safetensors file's tensors: name → (dtype, shape, f32 values).
fn read_file(path: &Path) -> BTreeMap<String, (String, Vec<usize>, Vec<f32>)> {
    let bytes = std::fs::read(path).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    file.tensors()
        .into_iter()
        .map(|(name, view)| {
            assert_eq!(view.dtype(), safetensors::Dtype::F32, "{name}");
            let data = view
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            (
                name,
                (format!("{:?}", view.dtype()), view.shape().to_vec(), data),
            )
        })
        .collect()
}

/// A PEFT adapter directory (copied into the crate's test data) or, for the merged weights, the
/// shared fixture.
fn peft_case(name: &str) -> PathBuf {
    if name.starts_with("case_") && !name.ends_with(".safetensors") {
        peft_adapter(name)
    } else {
        rstar_testdata::fixture(&format!("peft/{name}"))
    }
}

/// A random adapter of case 1's config (r 4, alpha 8, all seven targets) on the tiny Qwen3.
fn random_adapter() -> Qwen {
    let base = load("qwen3_tiny");
    let lora = LoraConfig::new(4, 8.0);
    let pairs = random_pairs(&base.config, &lora, 21);
    install(base.with_lora(&lora, 0).unwrap(), &pairs)
}

#[test]
fn a_saved_adapter_has_pefts_layout_and_reloads_bit_for_bit() {
    let tuned = random_adapter();
    let dir = tempfile::tempdir().unwrap();
    save_adapter(&tuned, dir.path(), "Qwen/Qwen3-tiny").unwrap();

    // The same names, shapes and dtypes as PEFT's own file for the same config.
    let ours = read_file(&dir.path().join(ADAPTER_WEIGHTS_FILE));
    let pefts = read_file(&peft_case("case_1").join(ADAPTER_WEIGHTS_FILE));
    let layout = |m: &BTreeMap<String, (String, Vec<usize>, Vec<f32>)>| -> Vec<(String, String, Vec<usize>)> {
        m.iter()
            .map(|(k, (d, s, _))| (k.clone(), d.clone(), s.clone()))
            .collect()
    };
    assert_eq!(layout(&ours), layout(&pefts));

    // The config: PEFT's fields, read back as the same config PEFT's file gives.
    let config: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join(ADAPTER_CONFIG_FILE)).unwrap(),
    )
    .unwrap();
    for (field, value) in [
        ("peft_type", json!("LORA")),
        ("r", json!(4)),
        ("lora_alpha", json!(8)),
        ("use_rslora", json!(false)),
        ("bias", json!("none")),
        ("task_type", json!("CAUSAL_LM")),
        ("fan_in_fan_out", json!(false)),
        ("lora_dropout", json!(0.0)),
        ("use_dora", json!(false)),
        ("base_model_name_or_path", json!("Qwen/Qwen3-tiny")),
    ] {
        assert_eq!(config[field], value, "{field}");
    }
    let mut ours = read_adapter_config(dir.path()).unwrap();
    let mut pefts = read_adapter_config(&peft_case("case_1")).unwrap();
    ours.targets.sort();
    pefts.targets.sort();
    assert_eq!(ours, pefts);

    // Reloaded onto the base: the same adapters and logits, bit for bit.
    let reloaded = load_adapter(load("qwen3_tiny"), dir.path()).unwrap();
    assert_eq!(
        reloaded.adapter_tensors().unwrap(),
        tuned.adapter_tensors().unwrap()
    );
    let rows = vec![vec![96, 234, 446, 220, 68, 502, 498]];
    let logits = |m: &Qwen| to_vec(m.forward(ids_tensor(&rows, &m.device())));
    assert_eq!(logits(&reloaded), logits(&tuned));
    // And only the adapters train.
    let on_autodiff = load_adapter(
        rstar_policy::load_model(&fixture_dir("qwen3_tiny"), &device().autodiff()).unwrap(),
        dir.path(),
    )
    .unwrap();
    assert_eq!(
        on_autodiff.trainable_parameters(),
        on_autodiff.lora.as_ref().unwrap().parameters()
    );
}

/// `W + s·B·A` from the files, by loops: `merged` against `base` and `adapter` (PEFT names).
fn check_merge(
    base: &BTreeMap<String, (String, Vec<usize>, Vec<f32>)>,
    adapter: &BTreeMap<String, (String, Vec<usize>, Vec<f32>)>,
    merged: &BTreeMap<String, (String, Vec<usize>, Vec<f32>)>,
    scale: f64,
    tolerance: f64,
) {
    let mut adapted = 0;
    for (name, (_, shape, w)) in base {
        let got = &merged[name].2;
        let a_key = format!(
            "base_model.model.{}.lora_A.weight",
            name.trim_end_matches(".weight")
        );
        let Some((_, a_shape, a)) = adapter.get(&a_key) else {
            assert_eq!(got, w, "{name} is not a target and must not change");
            continue;
        };
        let (_, b_shape, b) = &adapter[&a_key.replace("lora_A", "lora_B")];
        let (r, fan_in) = (a_shape[0], a_shape[1]);
        let fan_out = b_shape[0];
        assert_eq!(shape, &vec![fan_out, fan_in]);
        for o in 0..fan_out {
            for i in 0..fan_in {
                let mut acc = 0.0f64;
                for k in 0..r {
                    acc += f64::from(b[o * r + k]) * f64::from(a[k * fan_in + i]);
                }
                let want = f64::from(w[o * fan_in + i]) + scale * acc;
                let have = f64::from(got[o * fan_in + i]);
                assert!(
                    (have - want).abs() <= tolerance * want.abs().max(1.0),
                    "{name}[{o}, {i}]: {have} vs {want}"
                );
            }
        }
        adapted += 1;
    }
    assert_eq!(adapted, 14, "7 targets, 2 layers");
}

#[test]
fn the_merge_is_w_plus_s_b_a_computed_from_the_files() {
    let base_model = load("qwen3_tiny");
    // The fixture has no tokenizer; the character one stands in (only the weights are read).
    let tokenizer = Tokenizer::char();
    let base_file = read_file(&fixture_dir("qwen3_tiny").join("model.safetensors"));
    let pairs = random_pairs(&base_model.config, &LoraConfig::new(4, 8.0), 33);
    let tuned = install(
        base_model
            .clone()
            .with_lora(&LoraConfig::new(4, 8.0).with_rslora(true), 0)
            .unwrap(),
        &pairs,
    );
    let dir = tempfile::tempdir().unwrap();
    let (adapter_dir, merged_dir) = (dir.path().join("adapter"), dir.path().join("merged"));
    save_adapter(&tuned, &adapter_dir, "base").unwrap();
    // What every save writes with adapters on: the merged model, a plain HF directory.
    save_dir(&tuned, &tokenizer, &merged_dir, WeightDtype::F32).unwrap();
    let adapter = read_file(&adapter_dir.join(ADAPTER_WEIGHTS_FILE));
    let merged = read_file(&merged_dir.join("model.safetensors"));
    // rsLoRA, r = 4, alpha = 8: s = 8 / √4 = 4.
    check_merge(&base_file, &adapter, &merged, 4.0, 1e-6);
    let plain = rstar_policy::load_model(&merged_dir, &device()).unwrap();
    assert!(plain.lora.is_none());

    // PEFT's case 1 merged by us equals PEFT's merge_and_unload() file.
    let case = load_adapter(base_model, &peft_case("case_1")).unwrap();
    let ours = dir.path().join("case_1_merged");
    save_dir(&case, &tokenizer, &ours, WeightDtype::F32).unwrap();
    let pefts = read_file(&peft_case("case_1_merged.safetensors"));
    let ours = read_file(&ours.join("model.safetensors"));
    check_merge(
        &base_file,
        &read_file(&peft_case("case_1").join(ADAPTER_WEIGHTS_FILE)),
        &ours,
        2.0,
        1e-6,
    );
    for (name, (_, _, want)) in &pefts {
        let d = max_abs_diff(&ours[name].2, want);
        assert!(d <= 1e-6, "{name}: {d} from PEFT's merge");
    }
}

/// A copy of PEFT's case 1 in a temporary directory, its config edited by `config` and its
/// tensors by `tensors`.
fn edited_case(
    config: impl FnOnce(&mut Value),
    tensors: impl FnOnce(&mut BTreeMap<String, (String, Vec<usize>, Vec<f32>)>),
) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let case = peft_case("case_1");
    let mut c: Value =
        serde_json::from_str(&std::fs::read_to_string(case.join(ADAPTER_CONFIG_FILE)).unwrap())
            .unwrap();
    config(&mut c);
    std::fs::write(dir.path().join(ADAPTER_CONFIG_FILE), c.to_string()).unwrap();
    let mut t = read_file(&case.join(ADAPTER_WEIGHTS_FILE));
    tensors(&mut t);
    // Written with the safetensors crate itself: our writer refuses a NaN.
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = t
        .into_iter()
        .map(|(name, (_, shape, data))| {
            let raw = data.iter().flat_map(|x| x.to_le_bytes()).collect();
            (name, shape, raw)
        })
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = bytes
        .iter()
        .map(|(name, shape, raw)| {
            let view =
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), raw)
                    .unwrap();
            (name.clone(), view)
        })
        .collect();
    std::fs::write(
        dir.path().join(ADAPTER_WEIGHTS_FILE),
        safetensors::serialize(views, None).unwrap(),
    )
    .unwrap();
    dir
}

fn refusal(dir: &Path) -> String {
    load_adapter(load("qwen3_tiny"), dir)
        .map(|_| ())
        .unwrap_err()
        .to_string()
}

#[test]
fn what_we_cannot_compute_exactly_is_refused_by_name() {
    let q_a = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
    // Unsupported PEFT features, each named with the file.
    for (field, value) in [
        ("peft_type", json!("IA3")),
        ("use_dora", json!(true)),
        ("modules_to_save", json!(["lm_head"])),
        ("bias", json!("all")),
        ("rank_pattern", json!({"q_proj": 8})),
        ("alpha_pattern", json!({"q_proj": 16})),
        ("fan_in_fan_out", json!(true)),
        ("layers_to_transform", json!([0])),
        ("target_modules", json!(".*proj")),
        ("target_modules", json!(["q_proj", "lm_head"])),
    ] {
        let dir = edited_case(|c| c[field] = value.clone(), |_| {});
        let err = refusal(dir.path());
        assert!(err.contains(field), "{field}: {err}");
        assert!(err.contains(ADAPTER_CONFIG_FILE), "{field}: {err}");
    }
    // A rank the tensors do not have: the key and both shapes.
    let dir = edited_case(|c| c["r"] = json!(8), |_| {});
    let err = refusal(dir.path());
    assert!(err.contains(ADAPTER_WEIGHTS_FILE), "{err}");
    assert!(
        err.contains("lora_A.weight") && err.contains("[4, 64]") && err.contains("[8, 64]"),
        "{err}"
    );
    // A misshapen tensor.
    let dir = edited_case(
        |_| {},
        |t| {
            let (_, shape, data) = t.get_mut(q_a).unwrap();
            *shape = vec![4, 32];
            data.truncate(4 * 32);
        },
    );
    let err = refusal(dir.path());
    assert!(
        err.contains(q_a) && err.contains("[4, 32]") && err.contains("[4, 64]"),
        "{err}"
    );
    // A missing tensor.
    let dir = edited_case(
        |_| {},
        |t| {
            t.remove(q_a);
        },
    );
    let err = refusal(dir.path());
    assert!(
        err.contains(q_a) && err.contains(ADAPTER_WEIGHTS_FILE),
        "{err}"
    );
    // A tensor the config does not account for (an adapter on a layer the base lacks).
    let extra = "base_model.model.model.layers.2.self_attn.q_proj.lora_A.weight";
    let dir = edited_case(
        |_| {},
        |t| {
            let q = t[q_a].clone();
            t.insert(extra.into(), q);
        },
    );
    let err = refusal(dir.path());
    assert!(err.contains(extra), "{err}");
    // A NaN.
    let dir = edited_case(|_| {}, |t| t.get_mut(q_a).unwrap().2[3] = f32::NAN);
    let err = refusal(dir.path());
    assert!(err.contains(q_a), "{err}");
    // Missing files, named.
    let dir = tempfile::tempdir().unwrap();
    let err = refusal(dir.path());
    assert!(err.contains(ADAPTER_CONFIG_FILE), "{err}");
    std::fs::copy(
        peft_case("case_1").join(ADAPTER_CONFIG_FILE),
        dir.path().join(ADAPTER_CONFIG_FILE),
    )
    .unwrap();
    let err = refusal(dir.path());
    assert!(err.contains(ADAPTER_WEIGHTS_FILE), "{err}");
    // No adapter to save.
    let err = save_adapter(&load("qwen3_tiny"), dir.path(), "x")
        .unwrap_err()
        .to_string();
    assert!(err.contains("no LoRA adapters"), "{err}");
}

/// One adapter file (`adapter_bytes`: the weights with the config in the metadata, what
/// `rstar serve`'s upload route takes) reloads as the directory does, bit for bit; bytes without
/// the config, with a config PEFT features we do not compute, or with a tensor of the wrong
/// shape are refused by name.
#[test]
fn a_one_file_adapter_reloads_as_its_directory_does() {
    let tuned = random_adapter();
    let base = || load("qwen3_tiny");
    let bytes = adapter_bytes(&tuned, "tiny").unwrap();
    let source = Path::new("upload");
    let back = load_adapter_bytes(base(), &bytes, source).unwrap();
    assert_eq!(
        back.adapter_tensors().unwrap(),
        tuned.adapter_tensors().unwrap()
    );
    assert_eq!(
        back.lora.as_ref().unwrap().config,
        tuned.lora.as_ref().unwrap().config
    );
    // The same file's weights and config as a directory: the same adapter.
    let dir = tempfile::tempdir().unwrap();
    save_adapter(&tuned, dir.path(), "tiny").unwrap();
    let from_dir = load_adapter(base(), dir.path()).unwrap();
    assert_eq!(
        from_dir.adapter_tensors().unwrap(),
        back.adapter_tensors().unwrap()
    );
    let file = safetensors::SafeTensors::read_metadata(&bytes).unwrap().1;
    let config: Value =
        serde_json::from_str(&file.metadata().as_ref().unwrap()[ADAPTER_CONFIG_METADATA]).unwrap();
    let on_disk: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join(ADAPTER_CONFIG_FILE)).unwrap(),
    )
    .unwrap();
    assert_eq!(config, on_disk);

    // The weights alone, as PEFT writes them: no config to read.
    let plain = std::fs::read(dir.path().join(ADAPTER_WEIGHTS_FILE)).unwrap();
    let err = load_adapter_bytes(base(), &plain, source)
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("upload") && err.contains("`adapter_config`"),
        "{err}"
    );
    // Not a safetensors file at all.
    let err = load_adapter_bytes(base(), b"not a file", source)
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(err.contains("upload"), "{err}");
    // A config with DoRA: named as from the directory's config file.
    let edited = edit_metadata(&bytes, |c| c["use_dora"] = json!(true));
    let err = load_adapter_bytes(base(), &edited, source)
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("use_dora") && err.contains(ADAPTER_CONFIG_FILE),
        "{err}"
    );
    // Another rank in the config than the tensors have.
    let edited = edit_metadata(&bytes, |c| c["r"] = json!(8));
    let err = load_adapter_bytes(base(), &edited, source)
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(err.contains("lora_A") && err.contains("[8, "), "{err}");
}

/// `bytes` (a safetensors file) with its `adapter_config` metadata edited by `edit`.
fn edit_metadata(bytes: &[u8], edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let file = safetensors::SafeTensors::deserialize(bytes).unwrap();
    let metadata = safetensors::SafeTensors::read_metadata(bytes).unwrap().1;
    let mut meta = metadata.metadata().clone().unwrap();
    let mut config: Value = serde_json::from_str(&meta[ADAPTER_CONFIG_METADATA]).unwrap();
    edit(&mut config);
    meta.insert(ADAPTER_CONFIG_METADATA.into(), config.to_string());
    safetensors::serialize(file.tensors(), Some(meta)).unwrap()
}
