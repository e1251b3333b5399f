//! The same forward and greedy decoding on `wgpu` agree with `flex` (run on a
//! CPU through Mesa's lavapipe by `cargo xtask test-wgpu`; needs `--features wgpu`).

use super::common::*;
use burn::tensor::{Device, DeviceKind};
use rstar_policy::{GenerationConfig, generate, load_model};

#[test]
fn wgpu_agrees_with_flex() {
    let name = "qwen3_tiny";
    let ids = u32s(&reference(name)["sequences"][2]["input_ids"]);
    let flex_model = load(name);
    let flex = to_vec(flex_model.forward(ids_tensor(std::slice::from_ref(&ids), &device())));
    let gpu = Device::wgpu(DeviceKind::DefaultDevice);
    let model = load_model(&fixture_dir(name), &gpu).unwrap();
    let out = to_vec(model.forward(ids_tensor(std::slice::from_ref(&ids), &gpu)));
    let diff = max_abs_diff(&out, &flex);
    assert!(diff <= 1e-3, "wgpu vs flex logits differ by {diff}");
    let config = GenerationConfig {
        max_new_tokens: 20,
        ..GenerationConfig::new()
    };
    let prompt = u32s(&reference(name)["generation"]["prompt_ids"]);
    let a = generate(
        &model,
        qwen_tokenizer(),
        std::slice::from_ref(&prompt),
        &config,
    )
    .unwrap();
    let b = generate(&flex_model, qwen_tokenizer(), &[prompt], &config).unwrap();
    assert_eq!(a[0].tokens, b[0].tokens);
}
