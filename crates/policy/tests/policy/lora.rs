//! LoRA adapters (`rstar_policy::lora`): a fresh adapter is the base bit for bit; an adapter
//! computes what its merged weights compute (the merge written out here with plain loops) and
//! what PEFT computes (its recorded logits); one optimizer step moves the adapters alone, and
//! the optimizer keeps state for them alone.

use std::collections::{HashMap, HashSet};

use super::common::*;
use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::{AdamWConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rstar_policy::lora::{LoraConfig, LoraPair, Target, load_adapter};
use rstar_policy::{Qwen, QwenConfig, masked_nll, sequence_logprobs, sequence_loss_chunked};
use serde_json::Value;

/// The tensors of a model in HF names and layout.
fn weights(model: &Qwen) -> HashMap<String, Vec<f32>> {
    model
        .hf_tensors()
        .unwrap()
        .into_iter()
        .map(|(s, d)| (s.name, d))
        .collect()
}

/// A model built from HF-layout tensors.
fn from_weights(config: &QwenConfig, w: &HashMap<String, Vec<f32>>, device: &Device) -> Qwen {
    Qwen::from_tensors(config.clone(), device, |s| Ok(w[&s.name].clone())).unwrap()
}

/// An adapter pair in PEFT's layout: `A [r, in]`, `B [out, r]`.
#[derive(Clone)]
pub(super) struct Peft {
    a: Vec<f32>,
    b: Vec<f32>,
    r: usize,
    fan_in: usize,
    fan_out: usize,
}

/// Puts PEFT-layout `pairs` (by `(layer, target)`) into `model`'s adapters, transposing by hand
/// into the stored `[in, r]` and `[r, out]`.
pub(super) fn install(mut model: Qwen, pairs: &HashMap<(usize, Target), Peft>) -> Qwen {
    let device = model.device();
    let lora = model.lora.as_mut().expect("adapters");
    for (&(l, t), p) in pairs {
        let mut a = vec![0.0; p.a.len()];
        for k in 0..p.r {
            for i in 0..p.fan_in {
                a[i * p.r + k] = p.a[k * p.fan_in + i];
            }
        }
        let mut b = vec![0.0; p.b.len()];
        for o in 0..p.fan_out {
            for k in 0..p.r {
                b[k * p.fan_out + o] = p.b[o * p.r + k];
            }
        }
        let layer = &mut lora.layers[l];
        let slot = match t {
            Target::QProj => &mut layer.q_proj,
            Target::KProj => &mut layer.k_proj,
            Target::VProj => &mut layer.v_proj,
            Target::OProj => &mut layer.o_proj,
            Target::GateProj => &mut layer.gate_proj,
            Target::UpProj => &mut layer.up_proj,
            Target::DownProj => &mut layer.down_proj,
        };
        let old = slot.take().expect("the target has an adapter");
        // Keep the ids (and so the trainable state) of the pair being overwritten.
        let keep = |param: Param<Tensor<2>>, data: Vec<f32>, shape: [usize; 2]| {
            let mut fresh = Param::<Tensor<2>>::from_data(TensorData::new(data, shape), &device);
            fresh.id = param.id;
            fresh
        };
        *slot = Some(LoraPair {
            a: keep(old.a, a, [p.fan_in, p.r]),
            b: keep(old.b, b, [p.r, p.fan_out]),
        });
    }
    model
}

/// Random PEFT-layout pairs for every target of `config` on every layer.
pub(super) fn random_pairs(
    qwen: &QwenConfig,
    lora: &LoraConfig,
    seed: u64,
) -> HashMap<(usize, Target), Peft> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = HashMap::new();
    for l in 0..qwen.num_hidden_layers {
        for t in lora.validate().unwrap() {
            let (fan_in, fan_out) = t.features(qwen);
            let r = lora.rank;
            let mut draw =
                |n: usize| -> Vec<f32> { (0..n).map(|_| rng.random_range(-0.3f32..0.3)).collect() };
            out.insert(
                (l, t),
                Peft {
                    a: draw(r * fan_in),
                    b: draw(fan_out * r),
                    r,
                    fan_in,
                    fan_out,
                },
            );
        }
    }
    out
}

/// `W + s·B·A` in HF layout (`W [out, in]`), written out with loops.
fn merge_by_hand(
    base: &HashMap<String, Vec<f32>>,
    pairs: &HashMap<(usize, Target), Peft>,
    scale: f64,
) -> HashMap<String, Vec<f32>> {
    let mut out = base.clone();
    for (&(l, t), p) in pairs {
        let name = format!("model.layers.{l}.{}.weight", t.path());
        let w = out.get_mut(&name).unwrap();
        assert_eq!(w.len(), p.fan_out * p.fan_in);
        for o in 0..p.fan_out {
            for i in 0..p.fan_in {
                let mut acc = 0.0f64;
                for k in 0..p.r {
                    acc += f64::from(p.b[o * p.r + k]) * f64::from(p.a[k * p.fan_in + i]);
                }
                w[o * p.fan_in + i] = (f64::from(w[o * p.fan_in + i]) + scale * acc) as f32;
            }
        }
    }
    out
}

fn logits(model: &Qwen, rows: &[Vec<u32>]) -> Vec<f32> {
    to_vec(model.forward(ids_tensor(rows, &model.device())))
}

fn sequences() -> Vec<Vec<u32>> {
    vec![
        vec![96, 234, 446, 220, 68, 502, 498, 7, 300],
        vec![5, 17, 400, 12, 250, 3, 99, 480, 1],
    ]
}

#[test]
fn a_fresh_adapter_leaves_the_logits_bit_for_bit() {
    for name in ["qwen3_tiny", "qwen2_tiny"] {
        for device in [device(), device().autodiff()] {
            let base = load_model_on(name, &device);
            let tuned = base.clone().with_lora(&LoraConfig::new(4, 8.0), 3).unwrap();
            // A is drawn (not zero), B is zero.
            let lora = tuned.lora.as_ref().unwrap();
            let pair = lora.layers[1].get(Target::DownProj).unwrap();
            assert!(to_vec(pair.a.val()).iter().any(|&x| x != 0.0));
            assert!(to_vec(pair.b.val()).iter().all(|&x| x == 0.0));
            assert_eq!(
                logits(&tuned, &sequences()),
                logits(&base, &sequences()),
                "{name} on {device:?}"
            );
        }
    }
}

#[test]
fn a_is_pefts_kaiming_uniform_and_the_count_is_r_times_in_plus_out() {
    let base = load("qwen2_tiny");
    let config = base.config.clone();
    let lora = LoraConfig::new(3, 6.0).with_targets(&["k_proj", "down_proj"]);
    let tuned = base.with_lora(&lora, 11).unwrap();
    let layers = tuned.lora.as_ref().unwrap();
    let mut expected = 0;
    for layer in &layers.layers {
        for t in Target::ALL {
            let (fan_in, fan_out) = t.features(&config);
            let Some(p) = layer.get(t) else {
                assert!(!["k_proj", "down_proj"].contains(&t.name()));
                continue;
            };
            assert_eq!(p.a.val().dims(), [fan_in, 3]);
            assert_eq!(p.b.val().dims(), [3, fan_out]);
            // nn.Linear's init (kaiming_uniform_, a = √5): U(−1/√in, 1/√in).
            let bound = 1.0 / (fan_in as f32).sqrt();
            let a = to_vec(p.a.val());
            assert!(a.iter().all(|x| x.abs() <= bound));
            assert!(a.iter().any(|x| x.abs() > 0.8 * bound), "spans the range");
            expected += 3 * (fan_in + fan_out);
        }
    }
    assert_eq!(
        expected,
        2 * 3 * ((32 + 64) + (128 + 64)),
        "qwen2_tiny's shapes"
    );
    assert_eq!(layers.parameters(), expected);
    // Every parameter trains without adapters; with them, the adapters alone.
    let on_autodiff = load_model_on("qwen2_tiny", &device().autodiff());
    assert_eq!(
        on_autodiff.trainable_parameters(),
        tensor_sizes(&on_autodiff)
    );
    let adapted = on_autodiff.with_lora(&lora, 11).unwrap();
    assert_eq!(adapted.trainable_parameters(), expected);
}

fn tensor_sizes(model: &Qwen) -> usize {
    model
        .hf_tensors()
        .unwrap()
        .iter()
        .map(|(s, _)| s.shape.iter().product::<usize>())
        .sum()
}

fn load_model_on(name: &str, device: &Device) -> Qwen {
    rstar_policy::load_model(&fixture_dir(name), device).unwrap()
}

#[test]
fn an_adapter_computes_what_its_merged_weights_compute() {
    for (name, lora) in [
        ("qwen3_tiny", LoraConfig::new(4, 8.0)),
        ("qwen3_tiny", LoraConfig::new(4, 8.0).with_rslora(true)),
        ("qwen2_tiny", LoraConfig::new(2, 3.0)),
        (
            "qwen2_tiny",
            LoraConfig::new(3, 4.0).with_targets(&["v_proj", "o_proj", "gate_proj"]),
        ),
    ] {
        let base = load(name);
        let config = base.config.clone();
        let base_w = weights(&base);
        let pairs = random_pairs(&config, &lora, 5);
        let scale = if lora.use_rslora {
            lora.alpha / (lora.rank as f64).sqrt()
        } else {
            lora.alpha / lora.rank as f64
        };
        assert_eq!(lora.scale(), scale);
        let tuned = install(base.with_lora(&lora, 1).unwrap(), &pairs);
        let merged_w = merge_by_hand(&base_w, &pairs, scale);
        let plain = from_weights(&config, &merged_w, &device());
        let (got, want) = (logits(&tuned, &sequences()), logits(&plain, &sequences()));
        let diff = max_abs_diff(&got, &want);
        assert!(diff <= 1e-5, "{name} {lora:?}: {diff}");
        // The adapter moved the logits: the comparison is not of two base models.
        assert!(max_abs_diff(&got, &logits(&load(name), &sequences())) > 0.1);
        // What is saved (hf_tensors) is the merged model; the adapters alone come in PEFT's
        // layout.
        let saved = weights(&tuned);
        for (k, v) in &merged_w {
            let d = max_abs_diff(&saved[k], v);
            assert!(d <= 1e-6, "{k}: {d}");
        }
        let adapters: HashMap<String, (Vec<usize>, Vec<f32>)> = tuned
            .adapter_tensors()
            .unwrap()
            .into_iter()
            .map(|(s, d)| (s.name, (s.shape, d)))
            .collect();
        assert_eq!(adapters.len(), 2 * pairs.len());
        for ((l, t), p) in &pairs {
            let key =
                |w: &str| format!("base_model.model.model.layers.{l}.{}.{w}.weight", t.path());
            assert_eq!(adapters[&key("lora_A")], (vec![p.r, p.fan_in], p.a.clone()));
            assert_eq!(
                adapters[&key("lora_B")],
                (vec![p.fan_out, p.r], p.b.clone())
            );
        }
        // Folding the adapters in gives the same model without them.
        let folded = tuned.clone().merge_lora().unwrap();
        assert!(folded.lora.is_none());
        assert!(max_abs_diff(&logits(&folded, &sequences()), &want) <= 1e-5);
    }
}

/// PEFT's adapter files for the tiny Qwen3 (`../shared/fixtures/peft`), loaded by
/// `load_adapter`: PEFT's logits with the adapter applied, unmerged, and after
/// `merge_and_unload()`.
#[test]
fn pefts_adapters_give_pefts_logits() {
    let dir = rstar_testdata::fixture("peft");
    let reference: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
            .unwrap();
    let ids: Vec<u32> = reference["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["length"] == 7)
        .map(|i| u32s(&i["input_ids"]))
        .expect("the length-7 input");
    let cases = reference["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 3);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let adapter = peft_adapter(case["dir"].as_str().unwrap());
        let tuned = load_adapter(load("qwen3_tiny"), &adapter).unwrap();
        let config = &tuned.lora.as_ref().unwrap().config;
        assert_eq!(config.scale(), case["scaling"].as_f64().unwrap(), "{name}");
        let rows = std::slice::from_ref(&ids);
        let got = logits(&tuned, rows);
        let want = f32s(&case["peft"]["7"]["logits"]);
        let diff = max_abs_diff(&got, &want);
        assert!(diff <= 1e-4, "{name}: {diff}");
        // Not the base's logits: the adapters move them by 3.8 to 5.5.
        assert!(max_abs_diff(&logits(&load("qwen3_tiny"), rows), &want) > 1.0);
        let merged = f32s(&case["merged"]["7"]["logits"]);
        let folded = tuned.merge_lora().unwrap();
        let diff = max_abs_diff(&logits(&folded, rows), &merged);
        assert!(diff <= 1e-4, "{name} merged: {diff}");
    }
}

/// The ids of a model's float parameters, in visiting order.
fn ids(model: &Qwen) -> Vec<u64> {
    struct Ids(Vec<u64>);
    impl ModuleVisitor for Ids {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            self.0.push(param.id.val());
        }
    }
    let mut v = Ids(Vec::new());
    model.visit(&mut v);
    v.0
}

fn nll(model: &Qwen, rows: &[Vec<u32>]) -> Tensor<1> {
    let device = model.device();
    let (logp, _) = sequence_logprobs(model, ids_tensor(rows, &device));
    let [b, t] = logp.dims();
    masked_nll(logp, Tensor::ones([b, t], &device))
}

#[test]
fn one_step_moves_the_adapters_alone_and_adam_keeps_state_for_them_alone() {
    let ad = device().autodiff();
    let base = load_model_on("qwen3_tiny", &ad);
    let lora = LoraConfig::new(4, 8.0);
    let tuned = base.clone().with_lora(&lora, 2).unwrap();
    // The base's parameters keep their ids and order; the adapters come after them.
    let (base_ids, tuned_ids) = (ids(&base), ids(&tuned));
    assert_eq!(tuned_ids[..base_ids.len()], base_ids[..]);
    let adapter_ids: HashSet<u64> = tuned_ids[base_ids.len()..].iter().copied().collect();
    assert_eq!(adapter_ids.len(), 2 * 7 * 2, "A and B, 7 targets, 2 layers");

    let grads = nll(&tuned, &sequences()).backward();
    assert!(tuned.embed_tokens.val().grad(&grads).is_none());
    assert!(
        tuned.layers[0]
            .self_attn
            .q_proj
            .val()
            .grad(&grads)
            .is_none()
    );
    assert!(tuned.norm.val().grad(&grads).is_none());
    let grads = GradientsParams::from_grads(grads, &tuned);
    // Weight decay would move a frozen weight that the optimizer visited.
    let mut optimizer: ModuleOptimizer = AdamWConfig::new().with_weight_decay(0.1).init();
    let before_base = {
        let mut m = tuned.clone();
        m.lora = None;
        weights(&m)
    };
    let before_b = to_vec(
        tuned.lora.as_ref().unwrap().layers[0]
            .q_proj
            .as_ref()
            .unwrap()
            .b
            .val(),
    );
    let stepped = optimizer.step(1e-2, tuned, grads);
    let mut frozen = stepped.clone();
    frozen.lora = None;
    let after_base = weights(&frozen);
    for (k, v) in &before_base {
        assert!(
            after_base[k]
                .iter()
                .zip(v)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{k} moved"
        );
    }
    let after_b = to_vec(
        stepped.lora.as_ref().unwrap().layers[0]
            .q_proj
            .as_ref()
            .unwrap()
            .b
            .val(),
    );
    assert_ne!(before_b, after_b, "B moved");

    // Adam's record: two moments for each adapter tensor and nothing else, Σ r·(in + out)
    // values each.
    let config = &base.config;
    let per_moment: usize = (0..config.num_hidden_layers)
        .flat_map(|_| Target::ALL)
        .map(|t| {
            let (i, o) = t.features(config);
            lora.rank * (i + o)
        })
        .sum();
    assert_eq!(
        per_moment,
        2 * 4 * ((64 + 64) + 2 * (64 + 32) + (64 + 64) + 2 * (64 + 128) + (128 + 64))
    );
    let bytes = optimizer.into_bytes().unwrap();
    let record = burn_pack::Reader::from_bytes(bytes).unwrap();
    let mut values = 0;
    let mut seen = HashSet::new();
    for tensor in record.into_tensors().unwrap() {
        let (_, _, shape, id, _) = tensor.into_parts().unwrap();
        let id = id.expect("state keyed by a parameter");
        assert!(adapter_ids.contains(&id), "state for a base parameter {id}");
        seen.insert(id);
        values += shape.num_elements();
    }
    assert_eq!(seen, adapter_ids);
    assert_eq!(values, 2 * per_moment);
}

#[test]
fn adapter_gradients_agree_with_the_fused_kernels_on_and_off() {
    let ad = device().autodiff();
    let lora = LoraConfig::new(4, 8.0).with_rslora(true);
    let base = load_model_on("qwen3_tiny", &ad);
    let pairs = random_pairs(&base.config, &lora, 9);
    let fused = install(base.with_lora(&lora, 4).unwrap(), &pairs);
    let composed = fused.clone().with_fused_kernels(false);
    let grads_of = |m: &Qwen| {
        let grads = nll(m, &sequences()).backward();
        let mut out = Vec::new();
        for layer in &m.lora.as_ref().unwrap().layers {
            for t in Target::ALL {
                let p = layer.get(t).unwrap();
                for w in [&p.a, &p.b] {
                    out.extend(to_vec(w.val().grad(&grads).expect("an adapter gradient")));
                }
            }
        }
        out
    };
    let (on, off) = (grads_of(&fused), grads_of(&composed));
    let largest = off.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    assert!(largest > 1e-3, "the gradients are not all zero");
    let diff = max_abs_diff(&on, &off);
    assert!(
        diff <= 1e-5 * largest.max(1.0),
        "{diff} (largest {largest})"
    );
}

#[test]
fn the_chunked_loss_builds_no_head_gradient_for_a_frozen_head() {
    let ad = device().autodiff();
    let lora = LoraConfig::new(2, 4.0);
    let base = load_model_on("qwen3_tiny", &ad);
    let pairs = random_pairs(&base.config, &lora, 3);
    let tuned = install(base.with_lora(&lora, 4).unwrap(), &pairs);
    let rows = sequences();
    let one_piece = nll(&tuned, &rows).backward();
    // Chunks of 512 logits: one position of one row at a time.
    let (loss, ()) = sequence_loss_chunked(&tuned, ids_tensor(&rows, &ad), 512, |logp, _| {
        let [b, t] = logp.dims();
        Ok::<_, std::convert::Infallible>((masked_nll(logp, Tensor::ones([b, t], &ad)), ()))
    })
    .unwrap();
    let chunked = loss.backward();
    assert!(tuned.lm_head.as_ref().map_or_else(
        || tuned.embed_tokens.val().grad(&chunked).is_none(),
        |h| h.val().grad(&chunked).is_none()
    ));
    let pair = tuned.lora.as_ref().unwrap().layers[1]
        .get(Target::UpProj)
        .unwrap();
    for w in [&pair.a, &pair.b] {
        let (a, b) = (
            to_vec(w.val().grad(&one_piece).unwrap()),
            to_vec(w.val().grad(&chunked).unwrap()),
        );
        let largest = a.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        assert!(max_abs_diff(&a, &b) <= 1e-5 * largest.max(1.0));
    }
}

#[test]
fn bad_configs_are_refused_naming_the_field() {
    let model = Qwen::random(QwenConfig::test_tiny(40), 0, &device()).unwrap();
    let cases = [
        (LoraConfig::new(0, 8.0), "lora.rank"),
        (LoraConfig::new(4, 0.0), "lora.alpha"),
        (LoraConfig::new(4, -1.0), "lora.alpha"),
        (LoraConfig::new(4, f64::NAN), "lora.alpha"),
        (LoraConfig::new(4, 8.0).with_targets(&[]), "lora.targets"),
        (
            LoraConfig::new(4, 8.0).with_targets(&["q_proj", "lm_head"]),
            "lm_head",
        ),
        (
            LoraConfig::new(4, 8.0).with_targets(&["v_proj", "v_proj"]),
            "named twice",
        ),
    ];
    for (config, needle) in cases {
        let err = model.clone().with_lora(&config, 0).unwrap_err().to_string();
        assert!(err.contains(needle), "{config:?}: {err}");
        assert!(err.contains("lora."), "{err}");
    }
    // Unknown fields in a serialised config are refused too.
    let err = serde_json::from_str::<LoraConfig>(r#"{"rank": 4, "alpha": 8, "dropout": 0.1}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("dropout"), "{err}");
    let parsed: LoraConfig = serde_json::from_str(r#"{"rank": 4, "alpha": 8}"#).unwrap();
    assert_eq!(parsed, LoraConfig::new(4, 8.0));
}

/// The seven projections' dtype in every layer.
fn projection_dtypes(model: &Qwen) -> Vec<burn::tensor::DType> {
    let mut out = Vec::new();
    for l in &model.layers {
        let (a, m) = (&l.self_attn, &l.mlp);
        for w in [
            &a.q_proj,
            &a.k_proj,
            &a.v_proj,
            &a.o_proj,
            &m.gate_proj,
            &m.up_proj,
            &m.down_proj,
        ] {
            out.push(w.val().dtype());
        }
    }
    out
}

/// Every adapter gradient, layer by layer in `Target::ALL` order, A then B.
fn adapter_grads(model: &Qwen, grads: &burn::tensor::Gradients) -> Vec<Vec<f32>> {
    let mut out = Vec::new();
    for layer in &model.lora.as_ref().unwrap().layers {
        for t in Target::ALL {
            let p = layer.get(t).unwrap();
            for w in [&p.a, &p.b] {
                out.push(to_vec(w.val().grad(grads).expect("an adapter gradient")));
            }
        }
    }
    out
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

#[test]
fn a_bf16_base_holds_the_projections_in_bf16_and_trains_like_the_f32_base() {
    use burn::tensor::DType;
    use rstar_policy::Precision;
    let ad = device().autodiff();
    let lora = LoraConfig::new(4, 8.0);
    let base = load_model_on("qwen3_tiny", &ad);
    let pairs = random_pairs(&base.config, &lora, 5);
    let f32_base = install(base.clone().with_lora(&lora, 4).unwrap(), &pairs);
    let bf16_base = f32_base
        .clone()
        .with_base_precision(Precision::Bf16)
        .unwrap();
    assert_eq!(
        (f32_base.base_precision(), bf16_base.base_precision()),
        (Precision::F32, Precision::Bf16)
    );
    // The seven projections in bf16; the adapters, embeddings and norms in f32.
    let dtypes = projection_dtypes(&bf16_base);
    assert_eq!(dtypes.len(), 7 * base.config.num_hidden_layers);
    assert!(dtypes.iter().all(|d| *d == DType::BF16), "{dtypes:?}");
    assert_eq!(bf16_base.embed_tokens.val().dtype(), DType::F32);
    assert_eq!(bf16_base.norm.val().dtype(), DType::F32);
    for l in &bf16_base.layers {
        assert_eq!(l.input_layernorm.val().dtype(), DType::F32);
    }
    for layer in &bf16_base.lora.as_ref().unwrap().layers {
        for t in Target::ALL {
            let p = layer.get(t).unwrap();
            assert_eq!(
                (p.a.val().dtype(), p.b.val().dtype()),
                (DType::F32, DType::F32)
            );
        }
    }

    // The same batch through both: the loss within 1%, the adapters' gradient at cosine > 0.99.
    let rows = sequences();
    let (loss_f32, loss_bf16) = (nll(&f32_base, &rows), nll(&bf16_base, &rows));
    let (lf, lb) = (to_vec(loss_f32.clone())[0], to_vec(loss_bf16.clone())[0]);
    assert!(
        ((lb - lf) / lf).abs() < 0.01,
        "loss {lb} over the bf16 base against {lf}"
    );
    assert_ne!(lb, lf, "the bf16 base computes with rounded weights");
    let (gf, gb) = (
        adapter_grads(&f32_base, &loss_f32.backward()),
        adapter_grads(&bf16_base, &loss_bf16.backward()),
    );
    let (flat_f, flat_b): (Vec<f32>, Vec<f32>) = (gf.concat(), gb.concat());
    let cos = cosine(&flat_f, &flat_b);
    assert!(cos > 0.99, "gradient cosine {cos}");
    let worst = gf
        .iter()
        .zip(&gb)
        .map(|(a, b)| cosine(a, b))
        .fold(1.0f64, f64::min);
    eprintln!("loss {lf} → {lb}, gradient cosine {cos} (worst tensor {worst})");

    // One AdamW step: the projections stay bf16 and unmoved, the moments are f32 and belong to
    // the adapters.
    let grads = GradientsParams::from_grads(nll(&bf16_base, &rows).backward(), &bf16_base);
    let mut optimizer: ModuleOptimizer = AdamWConfig::new().with_weight_decay(0.1).init();
    let before = weights(&bf16_base);
    let stepped = optimizer.step(1e-2, bf16_base.clone(), grads);
    assert!(
        projection_dtypes(&stepped)
            .iter()
            .all(|d| *d == DType::BF16)
    );
    let after = weights(&{
        let mut m = stepped.clone();
        m.lora = None;
        m
    });
    let before_base = weights(&{
        let mut m = bf16_base.clone();
        m.lora = None;
        m
    });
    for (k, v) in &before_base {
        assert_eq!(&after[k], v, "{k} moved");
    }
    assert_ne!(weights(&stepped), before, "the adapters moved");
    let record = burn_pack::Reader::from_bytes(optimizer.into_bytes().unwrap()).unwrap();
    let mut moments = 0;
    for tensor in record.into_tensors().unwrap() {
        let (name, dtype, shape, _, _) = tensor.into_parts().unwrap();
        if shape.num_elements() > 1 {
            assert_eq!(dtype, DType::F32, "{name}");
            moments += shape.num_elements();
        }
    }
    assert_eq!(moments, 2 * bf16_base.lora.as_ref().unwrap().parameters());

    // Merging reads the base as bf16-rounded f32: `round(W) + s·B·A`, written out by hand.
    let rounded: HashMap<String, Vec<f32>> = weights(&base)
        .into_iter()
        .map(|(k, v)| {
            let r = if k.ends_with("_proj.weight") {
                v.iter()
                    .map(|x| half::bf16::from_f32(*x).to_f32())
                    .collect()
            } else {
                v
            };
            (k, r)
        })
        .collect();
    let expected = merge_by_hand(&rounded, &pairs, lora.scale());
    let merged = bf16_base.clone().merge_lora().unwrap();
    assert_eq!(merged.base_precision(), Precision::F32);
    let merged = weights(&merged);
    for (k, v) in &expected {
        let d = max_abs_diff(&merged[k], v);
        assert!(d < 1e-5, "{k}: {d}");
    }
    // And the merged model computes what the adapted bf16 base computes.
    let d = max_abs_diff(
        &logits(&bf16_base, &rows),
        &logits(&f32_base.clone().merge_lora().unwrap(), &rows),
    );
    assert!(d > 0.0);
    let e = max_abs_diff(
        &logits(&bf16_base, &rows),
        &logits(&from_weights(&base.config, &expected, &ad), &rows),
    );
    assert!(e < 1e-4, "{e}");

    // Without adapters a bf16 base is refused, naming the field and the reason.
    let err = base
        .with_base_precision(Precision::Bf16)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("base_precision") && err.contains("LoRA"),
        "{err}"
    );
}
