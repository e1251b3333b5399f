//! Parity with HF transformers on the tiny Qwen2/Qwen3 fixtures.

use super::common::*;
use rstar_policy::{Architecture, GenerationConfig, generate, sequence_logprobs};

fn check_logits(name: &str) {
    let model = load(name);
    let reference = reference(name);
    for seq in reference["sequences"].as_array().unwrap() {
        let ids = u32s(&seq["input_ids"]);
        let logits = model.forward(ids_tensor(std::slice::from_ref(&ids), &device()));
        let ours = to_vec(logits);
        let theirs = f32s(&seq["full_logits"]);
        let diff = max_abs_diff(&ours, &theirs);
        assert!(
            diff <= 1e-4,
            "{name} len {}: logits differ by {diff}",
            ids.len()
        );
        if ids.len() >= 2 {
            let (logp, entropy) =
                sequence_logprobs(&model, ids_tensor(std::slice::from_ref(&ids), &device()));
            let diff = max_abs_diff(&to_vec(logp), &f32s(&seq["next_token_logprobs"]));
            assert!(
                diff <= 1e-4,
                "{name}: next-token log-probs differ by {diff}"
            );
            // Entropy written out by hand from the HF logits (f64).
            let vocab = theirs.len() / ids.len();
            let expected: Vec<f32> = theirs
                .chunks(vocab)
                .take(ids.len() - 1)
                .map(|row| {
                    let max = row.iter().copied().fold(f32::MIN, f32::max) as f64;
                    let z: f64 = row.iter().map(|&l| (l as f64 - max).exp()).sum();
                    row.iter()
                        .map(|&l| {
                            let p = (l as f64 - max).exp() / z;
                            -p * p.ln()
                        })
                        .sum::<f64>() as f32
                })
                .collect();
            let diff = max_abs_diff(&to_vec(entropy), &expected);
            assert!(diff <= 1e-4, "{name}: entropies differ by {diff}");
        }
    }
}

fn check_greedy(name: &str) {
    let model = load(name);
    let reference = reference(name);
    let gen_ref = &reference["generation"];
    let prompt = u32s(&gen_ref["prompt_ids"]);
    let config = GenerationConfig {
        max_new_tokens: 20,
        ..GenerationConfig::new()
    };
    let out = generate(&model, qwen_tokenizer(), &[prompt], &config).unwrap();
    assert_eq!(
        out[0].tokens,
        u32s(&gen_ref["new_token_ids"]),
        "{name} greedy tokens"
    );
    // The reported log-prob of each greedy token is the log-softmax of the HF step logits.
    let steps = f32s(&gen_ref["step_logits"]);
    let vocab = model.config.vocab_size;
    for (k, (&tok, &lp)) in out[0].tokens.iter().zip(&out[0].logprobs).enumerate() {
        let row = &steps[k * vocab..(k + 1) * vocab];
        let max = row.iter().copied().fold(f32::MIN, f32::max) as f64;
        let z: f64 = row.iter().map(|&l| (l as f64 - max).exp()).sum();
        let expected = (row[tok as usize] as f64 - max - z.ln()) as f32;
        assert!(
            (lp - expected).abs() <= 1e-4,
            "{name} step {k}: {lp} vs {expected}"
        );
    }
}

#[test]
fn qwen3_logits_and_logprobs_match_hf() {
    assert_eq!(load("qwen3_tiny").config.architecture, Architecture::Qwen3);
    check_logits("qwen3_tiny");
}

#[test]
fn qwen2_logits_and_logprobs_match_hf() {
    let model = load("qwen2_tiny");
    assert!(model.config.tie_word_embeddings && model.lm_head.is_none());
    check_logits("qwen2_tiny");
}

#[test]
fn qwen3_greedy_generation_matches_hf() {
    check_greedy("qwen3_tiny");
}

#[test]
fn qwen2_greedy_generation_matches_hf() {
    check_greedy("qwen2_tiny");
}

#[test]
fn hidden_states_match_hf() {
    // Localises a mismatch: the residual stream after the final norm.
    let model = load("qwen3_tiny");
    let reference = reference("qwen3_tiny");
    let seq = &reference["sequences"][1];
    let ids = u32s(&seq["input_ids"]);
    let hidden = model.forward_hidden(
        ids_tensor(std::slice::from_ref(&ids), &device()),
        &[0],
        None,
    );
    let diff = max_abs_diff(&to_vec(hidden), &f32s(&seq["hidden_states"]["norm"]));
    assert!(diff <= 1e-4, "final hidden states differ by {diff}");
}
