//! Scores a few responses with `rstar-verifier` and prints each verdict as JSON.
//!
//! `cargo run -p rstar-verifier --example score`

use rstar_verifier::{Verifier, verify_batch};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pairs = [
        ("<answer>The total is $\\boxed{1{,}024}$.</answer>", "1024"),
        ("so $x = \\boxed{2^{10}}$", "1024"),
        ("\\boxed{4200}", "42"),
        ("\\boxed{3} or \\boxed{5}", "5"),
        ("I could not finish.", "7"),
        ("\\boxed{\\frac{85}{2}}", "42"),
        ("\\boxed{10^{10^{10}}}", "1"),
    ];
    for ((response, gt), verdict) in pairs.iter().zip(verify_batch(&pairs)) {
        println!(
            "{response:<50} gt {gt:<5} {}",
            serde_json::to_string(&verdict?)?
        );
    }
    // A ground truth that is not an integer is an error, not a verdict.
    match Verifier::new().verify("\\boxed{1}", "\\frac{1}{2}") {
        Err(e) => println!("error: {e}"),
        Ok(v) => println!("unexpected: {v:?}"),
    }
    Ok(())
}
