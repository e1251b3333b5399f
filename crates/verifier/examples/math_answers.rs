//! Scores LaTeX math answers and multiple-choice letters with `rstar-verifier`'s math and choice modes.
//!
//! `cargo run -p rstar-verifier --example math_answers` scores a few pairs;
//! `cargo run -p rstar-verifier --example math_answers -- FILE.jsonl` prints the
//! canonical form of every `answer` of a dataset (`../shared/datasets/math500.jsonl`).

use rstar_verifier::{Mode, Verifier};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let v = Verifier::new();
    if let Some(path) = std::env::args().nth(1) {
        let text = std::fs::read_to_string(&path)?;
        let mut answers = Vec::new();
        for line in text.lines() {
            let row: serde_json::Value = serde_json::from_str(line)?;
            answers.push(row["answer"].as_str().unwrap_or_default().to_string());
        }
        println!("mode: {}", Mode::detect(answers.iter().map(String::as_str)));
        for a in &answers {
            println!("{a:<50} {}", v.math_truth(a)?.canonical());
        }
        return Ok(());
    }
    let pairs = [
        ("\\boxed{\\dfrac{\\sqrt{12}}{4}}", "\\frac{\\sqrt{3}}{2}"),
        ("so $\\boxed{2\\sqrt{3}}$", "\\sqrt{12}"),
        (
            "\\boxed{\\left(3, \\frac{\\pi}{2}\\right)}",
            "\\left( 3, \\frac{\\pi}{2} \\right)",
        ),
        ("\\boxed{[-2, 7]}", "x \\in [-2,7]"),
        ("\\boxed{1+\\sqrt{19}, 1-\\sqrt{19}}", "1 \\pm \\sqrt{19}"),
        ("\\boxed{\\text{East}}", "\\text{east}"),
        ("\\boxed{0.33}", "\\frac{1}{3}"),
        ("\\boxed{1\\tfrac{4}{5}}", "\\frac{9}{5}"),
    ];
    for (response, truth) in pairs {
        let verdict = v.verify_math(response, truth)?;
        println!(
            "{response:<45} truth {truth:<35} {}",
            serde_json::to_string(&verdict)?
        );
    }
    for (response, truth) in [("Thus the answer is (B).", "B"), ("Answer: C", "(D)")] {
        let verdict = v.verify_choice(response, truth)?;
        println!(
            "{response:<45} truth {truth:<35} {}",
            serde_json::to_string(&verdict)?
        );
    }
    Ok(())
}
