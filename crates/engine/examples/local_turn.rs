//! A `LocalEngine` on a random tiny model writes one seeded assistant turn, twice: the same
//! seed gives the same tokens (sampling is seeded per turn, whatever batch a turn lands in),
//! with one log-probability per token. No weights are downloaded.
//!
//! ```sh
//! cargo run -p rstar-engine --example local_turn
//! ```

use burn::tensor::Device;
use rstar_engine::{LocalEngine, LocalEngineConfig, TurnGenerator, TurnSpec};
use rstar_policy::{Qwen, QwenConfig, Tokenizer};

fn main() -> Result<(), rstar_engine::BoxError> {
    let model = Qwen::random(QwenConfig::tiny_char(), 0, &Device::flex())?;
    let tok = Tokenizer::char();
    let context = tok.encode("Q: 2+2?\nA:")?;
    let engine = LocalEngine::spawn(
        model,
        tok.clone(),
        LocalEngineConfig::new(vec!["</c>".into()]),
    );
    println!(
        "engine {} with {} KV tokens",
        engine.name(),
        engine.kv_capacity()
    );
    let spec = TurnSpec {
        rollout: 0,
        turn: 0,
        context,
        max_new_tokens: 12,
        seed: 7,
    };
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    let a = rt.block_on(engine.generate(spec.clone()))?;
    let b = rt.block_on(engine.generate(spec))?;
    println!("turn: {:?}", tok.decode(&a.tokens)?);
    println!("log-probs: {:?}", a.logprobs);
    assert_eq!(a, b, "seeded per turn");
    assert_eq!(a.logprobs.len(), a.tokens.len());
    Ok(())
}
