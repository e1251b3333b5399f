//! Scheduled rollouts of a random tiny model on two problems, two samples each, through the
//! dispatcher with a scripted tool (an async function; no sandbox): each trajectory's turns,
//! tool calls and the verifier's reward. An untrained model writes noise, so the rewards are 0;
//! the point is the shape of the output.
//!
//! ```sh
//! cargo run -p rstar-rollout --example scheduled
//! ```

use std::sync::Arc;

use burn::tensor::Device;
use rstar_engine::{LocalEngine, LocalEngineConfig, SharedTokenizer, TurnGenerator};
use rstar_episode::template::Template;
use rstar_episode::toolcall::{ToolCall, ToolOutcome};
use rstar_policy::{Qwen, QwenConfig, Tokenizer};
use rstar_rollout::Prompt;
use rstar_rollout::scheduled::{FnTools, ScheduleConfig, run_scheduled_blocking};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model = Qwen::random(QwenConfig::tiny_char(), 0, &Device::flex())?;
    let stops = Template::compact()
        .stop_strings()
        .iter()
        .map(|s| s.to_string())
        .collect();
    let engine = LocalEngine::spawn(model, Tokenizer::char(), LocalEngineConfig::new(stops));
    let generators: Vec<Arc<dyn TurnGenerator>> = vec![Arc::new(engine)];
    let tools = Arc::new(FnTools(|call: ToolCall| async move {
        // A stand-in sandbox: echoes the code's length.
        ToolOutcome::code_judge(true, "", &format!("{}\n", call.code.len()), "", 0.0)
    }));
    let mut config = ScheduleConfig::compact(7);
    config.limits.max_response_tokens = 32;
    let prompts = [
        Prompt::new("p0", "What is 2*3?", "6"),
        Prompt::new("p1", "What is 7+5?", "12"),
    ];
    let tok = SharedTokenizer(Arc::new(Tokenizer::char()));
    let out = run_scheduled_blocking(generators, tok, tools, &prompts, 2, &config)?;
    for t in &out.rollout.trajectories {
        println!(
            "{} sample {}: {} response tokens, {} tool calls, reward {:?}, stop {:?}",
            t.id,
            t.sample,
            t.response_ids.len(),
            t.tool_calls.len(),
            t.reward,
            t.stop
        );
    }
    assert_eq!(out.rollout.trajectories.len(), 4);
    println!(
        "dispatch: {} turns over {} engine(s)",
        out.dispatch.turns.iter().sum::<u64>(),
        out.dispatch.turns.len()
    );
    Ok(())
}
