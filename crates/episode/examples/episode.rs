//! One scripted episode in each template, built against `rstar-episode` alone: the policy's
//! turns are fixed strings and the tool is a closure, so the example shows the format (the
//! prompt, the parsed call, the tool turn, the loss mask and the trajectory's JSON line) with no
//! model and no sandbox.
//!
//! Run with `cargo run -p rstar-episode --example episode`.

use rstar_episode::{ByteTokenizer, Episode, Limits, Step, Template, ToolOutcome};

fn main() -> Result<(), rstar_episode::Error> {
    let tok = ByteTokenizer;
    for (template, limits, call) in [
        (
            Template::compact(),
            Limits::compact(),
            "<c>print(6*7)</c>".to_string(),
        ),
        (
            Template::chatml(),
            Limits::rstar2_agent(),
            r#"Let me compute it.
<tool_call>
{"name": "python_code_with_standard_io", "arguments": {"code": "print(6*7)", "input": ""}}
</tool_call>"#
                .to_string(),
        ),
    ] {
        println!("== {:?} template ==", template.format);
        let mut ep = Episode::new(&tok, &template, limits, "What is 6*7?");
        let Step::CallTools(calls) = ep.push_assistant_text(&call)? else {
            return Err(rstar_episode::Error::EpisodeState(
                "a tool call was expected".into(),
            ));
        };
        println!("parsed call: {:?}", calls[0].code);
        // A scripted tool: what the sandbox prints for this code.
        let outcomes = calls
            .iter()
            .map(|_| ToolOutcome::code_judge(true, "", "42\n", "", 0.01))
            .collect();
        ep.push_tool_outcomes(outcomes)?;
        let step = ep.push_assistant_text("The product is 42. <answer>\\boxed{42}</answer>")?;
        println!("last step: {step:?}");
        let traj = ep.finish()?;
        let masked = traj.loss_mask.iter().filter(|&&m| m == 0).count();
        println!(
            "{} response bytes, {masked} of them tool output (masked out of the loss)",
            traj.response_ids.len()
        );
        println!("{}\n", traj.response_text());
        println!(
            "trajectory JSON: {} bytes\n",
            serde_json::to_string(&traj)?.len()
        );
    }
    Ok(())
}
