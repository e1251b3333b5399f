//! The wheel's scoring modes from Rust: what `rstar_agent.score(..., mode=...)` answers, per mode.
//!
//! `cargo run -p rstar-python --example modes`
//!
//! The Python side of the same thing is `examples/rewards.py` (after `cargo xtask wheel`).

use rstar_python::{ScoreMode, score_one};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cases = [
        ("so the answer is $\\boxed{1{,}024}$", "1024"),
        ("\\boxed{2\\sqrt{3}}", "\\sqrt{12}"),
        ("\\boxed{0.5}", "\\frac{1}{2}"),
        ("Thus the answer is (B).", "B"),
        ("\\boxed{4200}", "42"),
    ];
    for mode in ["auto", "integer", "math", "choice"] {
        let mode: ScoreMode = mode.parse()?;
        println!("mode {}:", mode.as_str());
        for (response, truth) in cases {
            let mode_used = mode.resolve(truth);
            match score_one(mode, response, truth) {
                Ok(r) => println!("  {response:<40} vs {truth:<12} {r} ({mode_used})"),
                Err(e) => println!("  {response:<40} vs {truth:<12} error: {e}"),
            }
        }
    }
    Ok(())
}
