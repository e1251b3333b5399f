//! The KV cache gives the same logits as a full forward pass.

use super::common::*;
use rstar_policy::KvCache;

#[test]
fn cached_decoding_equals_full_forward() {
    for name in ["qwen3_tiny", "qwen2_tiny"] {
        let model = load(name);
        let ids = u32s(&reference(name)["generation"]["all_ids"]);
        let full = to_vec(model.forward(ids_tensor(std::slice::from_ref(&ids), &device())));
        let vocab = model.config.vocab_size;
        // Prefill 5 tokens, then one token at a time, then a chunk of 3.
        let mut cache = KvCache::new(model.config.num_hidden_layers);
        let mut ours =
            to_vec(model.forward_cached(ids_tensor(&[ids[..5].to_vec()], &device()), &mut cache));
        let mut at = 5;
        while at < ids.len() {
            let step = if at + 3 == ids.len() { 3 } else { 1 };
            let chunk = ids[at..at + step].to_vec();
            ours.extend(to_vec(
                model.forward_cached(ids_tensor(&[chunk], &device()), &mut cache),
            ));
            at += step;
        }
        assert_eq!(cache.len(), ids.len());
        let diff = max_abs_diff(&ours, &full);
        assert!(diff <= 1e-4, "{name}: cached vs full differ by {diff}");
        assert_eq!(ours.len(), ids.len() * vocab);
    }
}

#[test]
fn cached_decoding_reproduces_hf_step_logits() {
    let name = "qwen3_tiny";
    let model = load(name);
    let gen_ref = &reference(name)["generation"];
    let prompt = u32s(&gen_ref["prompt_ids"]);
    let new = u32s(&gen_ref["new_token_ids"]);
    let steps = f32s(&gen_ref["step_logits"]);
    let vocab = model.config.vocab_size;
    let mut cache = KvCache::new(model.config.num_hidden_layers);
    let prefill = to_vec(model.forward_cached(
        ids_tensor(std::slice::from_ref(&prompt), &device()),
        &mut cache,
    ));
    let mut ours = prefill[(prompt.len() - 1) * vocab..].to_vec();
    for &tok in &new[..new.len() - 1] {
        ours.extend(to_vec(
            model.forward_cached(ids_tensor(&[vec![tok]], &device()), &mut cache),
        ));
    }
    let diff = max_abs_diff(&ours, &steps);
    assert!(diff <= 1e-4, "step logits differ by {diff}");
}

#[test]
fn left_padded_rows_match_unpadded_rows() {
    let model = load("qwen2_tiny");
    let ids = u32s(&reference("qwen2_tiny")["sequences"][1]["input_ids"]);
    let alone = to_vec(model.forward_hidden(
        ids_tensor(std::slice::from_ref(&ids), &device()),
        &[0],
        None,
    ));
    let mut padded = vec![7u32; 4];
    padded.extend(&ids);
    let mut other = ids.clone();
    other.extend([1, 2, 3, 4]);
    let both = to_vec(model.forward_hidden(ids_tensor(&[padded, other], &device()), &[4, 0], None));
    let d = model.config.hidden_size;
    let row0 = &both[4 * d..(4 + ids.len()) * d];
    let diff = max_abs_diff(row0, &alone);
    assert!(diff <= 1e-5, "padded row differs by {diff}");
    assert!(
        both.iter().all(|x| x.is_finite()),
        "padding positions stay finite"
    );
}
