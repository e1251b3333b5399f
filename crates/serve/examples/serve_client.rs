//! `rstar serve` and `RemoteEngine` end to end: serves a random embedded-default model on a free
//! port in-process (or uses the server at URL), then writes a few turns through the
//! OpenAI-compatible API with a `RemoteEngine`, greedy and seeded. In-process, it then loads a
//! LoRA adapter through `/v1/load_lora_adapter` (as a trainer publishes one each step) and writes
//! a turn with it, which reports the adapter as its weight version.
//!
//! ```sh
//! cargo run -p rstar-serve --example serve_client            # in-process server
//! cargo run -p rstar-serve --example serve_client -- http://127.0.0.1:8000   # `rstar serve --template compact` of a char model
//! ```

use std::sync::Arc;

use burn::tensor::Device;
use rstar_engine::remote::{RemoteEngine, RemoteEngineConfig};
use rstar_engine::{TurnGenerator, TurnSpec};
use rstar_episode::template::Template;
use rstar_policy::{LoraConfig, Qwen, QwenConfig, Sampling, Tokenizer};
use rstar_serve::{ServeConfig, start};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let tokenizer = Arc::new(Tokenizer::char());
    let (url, server) = match std::env::args().nth(1) {
        Some(url) => (url, None),
        None => {
            let model = Qwen::random(QwenConfig::tiny_char(), 0, &Device::flex())?;
            let mut config = ServeConfig::new("tiny-random");
            config.port = 0;
            let server = start(model, (*tokenizer).clone(), config).await?;
            println!("serving a random tiny model on {}", server.url());
            (server.url(), Some(server))
        }
    };
    let template = Template::compact();
    let stops: Vec<String> = template
        .stop_strings()
        .iter()
        .map(|s| s.to_string())
        .collect();
    let context = tokenizer.encode(&template.render_prompt("What is 6 * 7?"))?;
    for sampling in [Sampling::Greedy, Sampling::Temperature { temperature: 1.0 }] {
        let mut config = RemoteEngineConfig::new(url.clone(), stops.clone());
        config.sampling = sampling;
        let engine = RemoteEngine::new(config, Arc::clone(&tokenizer))?;
        for seed in [1, 1, 2] {
            let spec = TurnSpec {
                rollout: 0,
                turn: 0,
                context: context.clone(),
                max_new_tokens: 24,
                seed,
            };
            let turn = engine.generate(spec).await?;
            let mean = turn.logprobs.iter().sum::<f32>() / turn.logprobs.len().max(1) as f32;
            println!(
                "{sampling:?} seed {seed}: {} tokens, mean log-prob {mean:.3}: {:?}",
                turn.tokens.len(),
                tokenizer.decode(&turn.tokens)?
            );
        }
    }
    if let Some(server) = server {
        // A fresh rank-4 adapter in PEFT's layout (B = 0: it writes what the base writes).
        let base = Qwen::random(QwenConfig::tiny_char(), 0, &Device::flex())?;
        let tuned = base.with_lora(&LoraConfig::new(4, 8.0), 1)?;
        let dir = tempfile::tempdir()?;
        rstar_policy::lora::save_adapter(&tuned, dir.path(), "tiny-random")?;
        let admin = RemoteEngine::new(
            RemoteEngineConfig::new(url.clone(), Vec::new()),
            Arc::clone(&tokenizer),
        )?;
        admin.load_lora_adapter("step-0", dir.path()).await?;
        let mut config = RemoteEngineConfig::new(url.clone(), stops.clone());
        config.sampling = Sampling::Greedy;
        config.model = Some("step-0".into());
        config.model_is_version = true;
        let engine = RemoteEngine::new(config, Arc::clone(&tokenizer))?;
        let spec = TurnSpec {
            rollout: 0,
            turn: 0,
            context: context.clone(),
            max_new_tokens: 24,
            seed: 1,
        };
        let turn = engine.generate(spec).await?;
        println!(
            "adapter `step-0` (weight version {:?}): {:?}",
            turn.weight_version,
            tokenizer.decode(&turn.tokens)?
        );
        admin.unload_lora_adapter("step-0").await?;
        server.shutdown().await?;
    }
    Ok(())
}
