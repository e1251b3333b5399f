//! Log-probs are differentiable: autodiff gradients agree with finite differences.

use super::common::*;
use burn::tensor::{Device, Tensor, TensorData};
use rstar_policy::Qwen;
use rstar_policy::{QwenConfig, masked_nll, sequence_logprobs};

fn loss_of(model: &Qwen, ids: &[Vec<u32>], mask: &[f32]) -> Tensor<1> {
    let device = model.device();
    let (logp, _) = sequence_logprobs(model, ids_tensor(ids, &device));
    let [b, t] = logp.dims();
    let mask = Tensor::<2>::from_data(TensorData::new(mask.to_vec(), [b, t]), &device);
    masked_nll(logp, mask)
}

#[test]
fn masked_nll_gradient_matches_finite_differences() {
    let config = QwenConfig::test_tiny(40);
    let ids = vec![vec![1, 5, 9, 2, 30, 7], vec![3, 3, 8, 20, 11, 0]];
    // The last target of row 1 is padding and is masked out.
    let mask = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0];
    let base = load_tensors(&config, 5);
    let ad = device().autodiff();
    let model = Qwen::from_tensors(config.clone(), &ad, |s| Ok(base[&s.name].clone())).unwrap();
    let loss = loss_of(&model, &ids, &mask);
    let grads = loss.backward();
    let checks = [
        ("model.embed_tokens.weight", 5 * 32 + 3),
        ("model.layers.0.self_attn.q_proj.weight", 17),
        ("model.layers.1.self_attn.k_norm.weight", 2),
        ("model.layers.1.mlp.down_proj.weight", 40),
    ];
    for (name, flat) in checks {
        let analytic = grad_of(&model, &grads, name, flat);
        let eps = 1e-2f32;
        let mut plus = base.clone();
        plus.get_mut(name).unwrap()[flat] += eps;
        let mut minus = base.clone();
        minus.get_mut(name).unwrap()[flat] -= eps;
        let f = |w: &std::collections::HashMap<String, Vec<f32>>| {
            let m =
                Qwen::from_tensors(config.clone(), &device(), |s| Ok(w[&s.name].clone())).unwrap();
            to_vec(loss_of(&m, &ids, &mask))[0]
        };
        let numeric = (f(&plus) - f(&minus)) / (2.0 * eps);
        assert!(
            (analytic - numeric).abs() <= 2e-3 + 0.05 * numeric.abs(),
            "{name}[{flat}]: autodiff {analytic} vs finite difference {numeric}"
        );
    }
}

#[test]
fn masked_positions_get_no_gradient_signal() {
    // Changing a token that only appears as a masked target leaves the loss unchanged.
    let config = QwenConfig::test_tiny(40);
    let model = Qwen::random(config, 9, &device()).unwrap();
    let mask = [1.0, 1.0, 1.0, 0.0];
    let a = to_vec(loss_of(&model, &[vec![1, 2, 3, 4, 5]], &mask))[0];
    let b = to_vec(loss_of(&model, &[vec![1, 2, 3, 4, 39]], &mask))[0];
    assert_eq!(a, b);
    let c = to_vec(loss_of(&model, &[vec![1, 2, 3, 4, 39]], &[1.0; 4]))[0];
    assert_ne!(a, c);
}

fn load_tensors(config: &QwenConfig, seed: u64) -> std::collections::HashMap<String, Vec<f32>> {
    // Larger weights than the default init so the gradients are not tiny.
    let model = Qwen::random(config.clone(), seed, &device()).unwrap();
    model
        .hf_tensors()
        .unwrap()
        .into_iter()
        .map(|(s, d)| {
            let d = if s.name.ends_with("norm.weight") {
                d
            } else {
                d.iter().map(|x| x * 15.0).collect()
            };
            (s.name, d)
        })
        .collect()
}

/// The gradient of one HF-named element (HF layout index `flat`).
fn grad_of(model: &Qwen, grads: &burn::tensor::Gradients, name: &str, flat: usize) -> f32 {
    let layer = |n: &str| -> usize { n.split('.').nth(2).unwrap().parse().unwrap() };
    let (t2, t1) = match name {
        "model.embed_tokens.weight" => (Some(model.embed_tokens.val()), None),
        n if n.ends_with("q_proj.weight") => {
            (Some(model.layers[layer(n)].self_attn.q_proj.val()), None)
        }
        n if n.ends_with("down_proj.weight") => {
            (Some(model.layers[layer(n)].mlp.down_proj.val()), None)
        }
        n if n.ends_with("k_norm.weight") => (
            None,
            Some(
                model.layers[layer(n)]
                    .self_attn
                    .k_norm
                    .as_ref()
                    .unwrap()
                    .val(),
            ),
        ),
        _ => unreachable!(),
    };
    if let Some(t) = t1 {
        return to_vec(t.grad(grads).expect("gradient exists"))[flat];
    }
    let t = t2.unwrap();
    let [r, c] = t.dims();
    let g = to_vec(t.grad(grads).expect("gradient exists"));
    if name == "model.embed_tokens.weight" {
        g[flat]
    } else {
        // Stored [in, out] = [r, c]; HF index flat = out·in_dim + in.
        let (o, i) = (flat / r, flat % r);
        let _ = c;
        g[i * c + o]
    }
}

#[test]
fn gradient_checkpointing_gives_the_same_gradients() {
    // Burn's checkpointing is a device option; the model needs nothing special.
    let config = QwenConfig::test_tiny(40);
    let base = load_tensors(&config, 6);
    let ids = vec![vec![1, 5, 9, 2, 30, 7, 8, 3]];
    let mask = [1.0; 7];
    let grads_on = |device: Device| {
        let model =
            Qwen::from_tensors(config.clone(), &device, |s| Ok(base[&s.name].clone())).unwrap();
        let grads = loss_of(&model, &ids, &mask).backward();
        let g = model.layers[0].self_attn.q_proj.val().grad(&grads).unwrap();
        to_vec(g)
    };
    let plain = grads_on(device().autodiff());
    let checkpointed = grads_on(device().autodiff().gradient_checkpointing());
    assert!(max_abs_diff(&plain, &checkpointed) <= 1e-6);
    assert!(plain.iter().any(|&x| x != 0.0));
}

#[test]
fn chunked_log_probs_equal_the_one_piece_ones_with_the_same_gradients() {
    use rstar_policy::sequence_logprobs_chunked;
    let vocab = 40;
    let config = QwenConfig::test_tiny(vocab);
    let ids = vec![
        vec![1, 5, 9, 2, 30, 7, 12],
        vec![3, 3, 8, 20, 11, 0, 0],
        vec![39, 1, 2, 3, 4, 5, 6],
    ];
    let ad = device().autodiff();
    let model = Qwen::random(config, 4, &ad).unwrap();
    let run = |limit: usize| {
        let (logp, entropy) = sequence_logprobs_chunked(&model, ids_tensor(&ids, &ad), limit);
        assert_eq!(logp.dims(), [3, 6]);
        let values = (to_vec(logp.clone()), to_vec(entropy.clone()));
        // A loss that weighs every position differently, through both outputs.
        let weights: Vec<f32> = (0..18).map(|i| 0.1 + i as f32 / 18.0).collect();
        let w = Tensor::<2>::from_data(TensorData::new(weights, [3, 6]), &ad);
        let loss = (logp * w.clone()).sum() + (entropy * w).sum().mul_scalar(0.3);
        let grads = loss.backward();
        let embed = model.embed_tokens.val().grad(&grads).expect("a gradient");
        let up = model.layers[1]
            .mlp
            .up_proj
            .val()
            .grad(&grads)
            .expect("a gradient");
        (values, to_vec(embed), to_vec(up))
    };
    let whole = run(usize::MAX);
    // One row and one position at a time; three rows of two positions; two rows at once.
    for limit in [vocab, 2 * vocab, 6 * vocab, 13 * vocab] {
        let chunked = run(limit);
        for (a, b) in [
            (&whole.0.0, &chunked.0.0),
            (&whole.0.1, &chunked.0.1),
            (&whole.1, &chunked.1),
            (&whole.2, &chunked.2),
        ] {
            assert_eq!(a.len(), b.len());
            let diff = max_abs_diff(a, b);
            assert!(diff < 1e-5, "limit {limit}: differs by {diff}");
        }
    }
}

#[test]
fn target_log_probs_are_the_sequence_log_probs_bit_for_bit_with_the_same_gradients() {
    use rstar_policy::{sequence_logprobs_chunked, sequence_target_logprobs_chunked};
    let vocab = 40;
    let ids = vec![vec![1, 5, 9, 2, 30, 7, 12], vec![39, 1, 2, 3, 4, 0, 0]];
    let ad = device().autodiff();
    let model = Qwen::random(QwenConfig::test_tiny(vocab), 5, &ad).unwrap();
    let weights: Vec<f32> = (0..12).map(|i| 0.2 + i as f32 / 12.0).collect();
    let w = Tensor::<2>::from_data(TensorData::new(weights, [2, 6]), &ad);
    // Through the loss, the embedding's gradient: the entropy is left out of the target-only
    // graph, and of this loss, so the two must agree exactly, chunked or not.
    let with = |logp: Tensor<2>| {
        let values = to_vec(logp.clone());
        let grads = (logp * w.clone()).sum().backward();
        let embed = model.embed_tokens.val().grad(&grads).expect("a gradient");
        (values, to_vec(embed))
    };
    for limit in [usize::MAX, vocab, 5 * vocab] {
        let both = sequence_logprobs_chunked(&model, ids_tensor(&ids, &ad), limit).0;
        let target = sequence_target_logprobs_chunked(&model, ids_tensor(&ids, &ad), limit);
        assert_eq!(target.dims(), [2, 6]);
        assert_eq!(with(both), with(target), "limit {limit}");
    }
}

/// The fused loss (`sequence_loss_chunked`: chunked logits, closed-form backward) against the
/// one-piece graph `loss(token_logprobs(model.forward(..)))`, for a loss through log-probs only
/// (the SFT loss), through entropies only, and through both, with tied and untied heads, at
/// chunk limits from one position to everything.
#[test]
fn fused_loss_has_the_one_piece_values_and_gradients() {
    use rstar_policy::{
        sequence_loss, sequence_loss_chunked, sequence_nll, sequence_nll_chunked, token_logprobs,
    };
    let vocab = 40;
    let ids = vec![
        vec![1, 5, 9, 2, 30, 7, 12],
        vec![3, 3, 8, 20, 11, 0, 0],
        vec![39, 1, 2, 3, 4, 5, 6],
    ];
    let ad = device().autodiff();
    let weights: Vec<f32> = (0..18).map(|i| 0.1 + i as f32 / 18.0).collect();
    let w = Tensor::<2>::from_data(TensorData::new(weights, [3, 6]), &ad);
    // The weights as an SFT mask: the last two targets of row 1 are padding.
    let mut mask = vec![1.0f32; 18];
    mask[10] = 0.0;
    mask[11] = 0.0;
    let mask = Tensor::<2>::from_data(TensorData::new(mask, [3, 6]), &ad);
    // (log-prob weight, entropy weight); a non-linear function of both for the last.
    let losses: [(f32, f32, bool); 4] = [
        (1.0, 0.0, false),
        (0.0, 1.0, false),
        (1.0, -0.3, false),
        (1.0, 0.5, true),
    ];
    let loss_of = |logp: Tensor<2>, ent: Tensor<2>, (a, c, nonlinear): (f32, f32, bool)| {
        if nonlinear {
            ((logp * w.clone()).exp().sum() + (ent * w.clone()).square().sum().mul_scalar(c))
                .reshape([1])
        } else {
            ((logp * w.clone()).sum().mul_scalar(a) + (ent * w.clone()).sum().mul_scalar(c))
                .reshape([1])
        }
    };
    for tie in [true, false] {
        let mut config = QwenConfig::test_tiny(vocab);
        config.tie_word_embeddings = tie;
        let model = Qwen::random(config, 4, &ad).unwrap();
        let grads_of = |loss: Tensor<1>| {
            let grads = loss.backward();
            let mut out = to_vec(model.embed_tokens.val().grad(&grads).expect("embedding"));
            out.extend(to_vec(
                model.layers[0]
                    .mlp
                    .up_proj
                    .val()
                    .grad(&grads)
                    .expect("up_proj"),
            ));
            out.extend(to_vec(model.norm.val().grad(&grads).expect("final norm")));
            if let Some(h) = &model.lm_head {
                out.extend(to_vec(h.val().grad(&grads).expect("lm_head")));
            }
            out
        };
        let one_piece = |kind| {
            let logits = model.forward(ids_tensor(&ids, &ad).slice([0..3, 0..6]));
            let targets = ids_tensor(&ids, &ad).slice([0..3, 1..7]);
            let (logp, ent) = token_logprobs(logits, targets);
            let loss = loss_of(logp, ent, kind);
            (to_vec(loss.clone()), grads_of(loss))
        };
        for kind in losses {
            let (value, grads) = one_piece(kind);
            for limit in [vocab, 2 * vocab, 7 * vocab, 13 * vocab, usize::MAX] {
                let (loss, ()) =
                    sequence_loss_chunked(&model, ids_tensor(&ids, &ad), limit, |l, e| {
                        Ok::<_, std::convert::Infallible>((loss_of(l, e, kind), ()))
                    })
                    .unwrap();
                let fused_value = to_vec(loss.clone());
                assert!(
                    (fused_value[0] - value[0]).abs() <= 1e-5 * value[0].abs().max(1.0),
                    "tie {tie}, {kind:?}, limit {limit}: {fused_value:?} vs {value:?}"
                );
                let fused = grads_of(loss);
                let diff = max_abs_diff(&grads, &fused);
                assert!(
                    diff < 2e-5,
                    "tie {tie}, {kind:?}, limit {limit}: gradients differ by {diff}"
                );
            }
        }
        // The SFT loss through `sequence_nll`.
        let logits = model.forward(ids_tensor(&ids, &ad).slice([0..3, 0..6]));
        let (logp, _) = token_logprobs(logits, ids_tensor(&ids, &ad).slice([0..3, 1..7]));
        let reference = masked_nll(logp, mask.clone());
        let value = to_vec(reference.clone())[0];
        let grads = grads_of(reference);
        for limit in [vocab, 5 * vocab] {
            let fused = sequence_nll_chunked(&model, ids_tensor(&ids, &ad), mask.clone(), limit);
            assert!((to_vec(fused.clone())[0] - value).abs() < 1e-5);
            let diff = max_abs_diff(&grads, &grads_of(fused));
            assert!(
                diff < 2e-5,
                "tie {tie}, limit {limit}: SFT gradients differ by {diff}"
            );
        }
        // What training calls: these logits fit in one chunk, so the one-piece graphs, exactly.
        let plain = sequence_nll(&model, ids_tensor(&ids, &ad), mask.clone());
        assert_eq!(to_vec(plain.clone())[0], value);
        assert_eq!(grads_of(plain), grads, "tie {tie}: sequence_nll");
        let kind = losses[3];
        let (loss, ()) = sequence_loss(&model, ids_tensor(&ids, &ad), |l, e| {
            Ok::<_, std::convert::Infallible>((loss_of(l, e, kind), ()))
        })
        .unwrap();
        let (value, grads) = one_piece(kind);
        assert_eq!(to_vec(loss.clone()), value);
        assert_eq!(grads_of(loss), grads, "tie {tie}: sequence_loss");
    }
}

/// Without autodiff the fused loss is just the loss of the chunked values.
#[test]
fn fused_loss_without_autodiff_is_the_plain_loss() {
    use rstar_policy::sequence_loss_chunked;
    let model = Qwen::random(QwenConfig::test_tiny(40), 2, &device()).unwrap();
    let ids = vec![vec![1, 5, 9, 2, 30, 7, 12]];
    let (expected, _) = sequence_logprobs(&model, ids_tensor(&ids, &device()));
    let (loss, seen) = sequence_loss_chunked(&model, ids_tensor(&ids, &device()), 40, |l, _| {
        Ok::<_, ()>((l.clone().sum(), to_vec(l)))
    })
    .unwrap();
    assert!(max_abs_diff(&seen, &to_vec(expected.clone())) < 1e-6);
    assert!((to_vec(loss)[0] - to_vec(expected.sum())[0]).abs() < 1e-4);
}

/// bf16 compute over f32 master weights: the SFT loss and its gradients stay within bf16's
/// precision of the f32 ones (loss within 1% relative, every parameter's gradient within 5% in
/// norm with a cosine above 0.99), the activations are bf16, and the parameters and their
/// gradients stay f32.
#[test]
fn a_bf16_step_matches_the_f32_one_within_bf16_precision_on_f32_master_weights() {
    use burn::tensor::DType;
    use rstar_policy::{Precision, sequence_nll};
    let ad = device().autodiff();
    let mut config = QwenConfig::test_tiny(40);
    config.tie_word_embeddings = false;
    let f32_model = Qwen::random(config, 9, &ad).unwrap();
    let bf16_model = f32_model.clone().with_precision(Precision::Bf16);
    let ids = vec![
        vec![1, 5, 9, 2, 30, 7, 12, 3],
        vec![3, 3, 8, 20, 11, 0, 1, 2],
    ];
    let mask = Tensor::<2>::ones([2, 7], &ad);
    let hidden = bf16_model.forward_hidden(ids_tensor(&ids, &ad), &[0, 0], None);
    assert_eq!(hidden.dtype(), DType::BF16, "bf16 activations");
    assert_eq!(
        f32_model
            .forward_hidden(ids_tensor(&ids, &ad), &[0, 0], None)
            .dtype(),
        DType::F32
    );
    let run = |model: &Qwen| {
        let loss = sequence_nll(model, ids_tensor(&ids, &ad), mask.clone());
        let value = to_vec(loss.clone())[0];
        let grads = loss.backward();
        let params = [
            model.embed_tokens.val(),
            model.layers[0].self_attn.q_proj.val(),
            model.layers[1].mlp.down_proj.val(),
            model.lm_head.as_ref().unwrap().val(),
        ];
        let gs: Vec<Vec<f32>> = params
            .iter()
            .map(|p| {
                assert_eq!(p.dtype(), DType::F32, "master weights stay f32");
                let g = p.grad(&grads).expect("a gradient");
                assert_eq!(
                    g.dtype(),
                    DType::F32,
                    "gradients reach the master weights in f32"
                );
                to_vec(g)
            })
            .collect();
        let norm = model.norm.val().grad(&grads).expect("a gain gradient");
        assert_eq!(norm.dtype(), DType::F32);
        (value, gs)
    };
    let (l32, g32) = run(&f32_model);
    let (l16, g16) = run(&bf16_model);
    assert!(
        (l16 - l32).abs() <= 0.01 * l32.abs(),
        "bf16 loss {l16} vs f32 {l32}"
    );
    for (a, b) in g32.iter().zip(&g16) {
        let dot: f64 = a
            .iter()
            .zip(b)
            .map(|(x, y)| f64::from(*x) * f64::from(*y))
            .sum();
        let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        let cosine = dot / (na * nb);
        assert!(cosine > 0.99, "gradient cosine {cosine}");
        assert!((na - nb).abs() <= 0.05 * na, "gradient norms {na} vs {nb}");
    }
}

/// Every parameter's gradient in `grads`, by id, in visiting order.
fn all_grads(model: &Qwen, grads: &burn::tensor::Gradients) -> Vec<(u64, Vec<f32>)> {
    struct Visit<'a>(&'a burn::tensor::Gradients, Vec<(u64, Vec<f32>)>);
    impl burn::module::ModuleVisitor for Visit<'_> {
        fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<D>>) {
            if let Some(g) = param.val().grad(self.0) {
                self.1.push((param.id.val(), to_vec(g)));
            }
        }
    }
    let mut visit = Visit(grads, Vec::new());
    burn::module::Module::visit(model, &mut visit);
    visit.1
}

#[test]
fn per_layer_checkpointing_gives_the_same_loss_and_every_gradient() {
    use rstar_policy::lora::LoraConfig;
    use rstar_policy::{Architecture, Precision, sequence_loss, sequence_nll};
    let ad = device().autodiff();
    let ids = vec![
        vec![1, 5, 9, 2, 30, 7, 12, 4],
        vec![3, 3, 8, 20, 11, 0, 0, 0],
    ];
    let mut mask = vec![1.0f32; 14];
    mask[12] = 0.0;
    mask[13] = 0.0;
    let mask = Tensor::<2>::from_data(TensorData::new(mask, [2, 7]), &ad);
    let w: Vec<f32> = (0..14).map(|i| 0.2 + i as f32 / 14.0).collect();
    let w = Tensor::<2>::from_data(TensorData::new(w, [2, 7]), &ad);
    let mut cases: Vec<(&str, Qwen)> = Vec::new();
    for (name, arch, tie) in [
        ("qwen3 tied", Architecture::Qwen3, true),
        ("qwen2 untied", Architecture::Qwen2, false),
    ] {
        let mut config = QwenConfig::test_tiny(40).with_architecture(arch);
        config.tie_word_embeddings = tie;
        let tensors = load_tensors(&config, 3);
        let model = Qwen::from_tensors(config, &ad, |s| Ok(tensors[&s.name].clone())).unwrap();
        cases.push((name, model.clone()));
        let lora = LoraConfig::new(4, 8.0);
        let pairs = super::lora::random_pairs(&model.config, &lora, 8);
        let tuned = super::lora::install(model.with_lora(&lora, 1).unwrap(), &pairs);
        cases.push((
            "lora, bf16 base",
            tuned.clone().with_base_precision(Precision::Bf16).unwrap(),
        ));
        cases.push(("lora", tuned));
    }
    for (name, model) in cases {
        let checkpointed = model.clone().with_gradient_checkpointing(true);
        // The RL loss's shape (log-probs and entropies, non-linear in both) and the SFT loss.
        let rl = |m: &Qwen| {
            sequence_loss(m, ids_tensor(&ids, &ad), |logp, ent| {
                Ok::<_, std::convert::Infallible>((
                    ((logp * w.clone()).exp().sum() - (ent * w.clone()).sum().mul_scalar(0.1))
                        .reshape([1]),
                    (),
                ))
            })
            .unwrap()
            .0
        };
        let sft = |m: &Qwen| sequence_nll(m, ids_tensor(&ids, &ad), mask.clone());
        for (loss_name, loss_of) in [("rl", &rl as &dyn Fn(&Qwen) -> Tensor<1>), ("sft", &sft)] {
            let (plain, ckpt) = (loss_of(&model), loss_of(&checkpointed));
            let (lp, lc) = (to_vec(plain.clone())[0], to_vec(ckpt.clone())[0]);
            assert!(
                (lp - lc).abs() <= 1e-5 * lp.abs().max(1.0),
                "{name} {loss_name}: loss {lc} checkpointed, {lp} plain"
            );
            let (gp, gc) = (
                all_grads(&model, &plain.backward()),
                all_grads(&checkpointed, &ckpt.backward()),
            );
            let ids_of = |g: &[(u64, Vec<f32>)]| g.iter().map(|(id, _)| *id).collect::<Vec<_>>();
            assert_eq!(
                ids_of(&gp),
                ids_of(&gc),
                "{name} {loss_name}: the same parameters"
            );
            assert!(!gp.is_empty());
            for ((id, a), (_, b)) in gp.iter().zip(&gc) {
                let largest = a.iter().fold(0.0f32, |m, x| m.max(x.abs()));
                let diff = max_abs_diff(a, b);
                assert!(
                    diff <= 1e-5 * largest.max(1e-3),
                    "{name} {loss_name}: parameter {id} differs by {diff} (largest {largest})"
                );
            }
        }
    }
}
