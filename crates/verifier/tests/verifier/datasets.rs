//! Agreement over the integer answers of the shared datasets: each written in several styles is right, wrong variants are wrong.

use std::collections::BTreeSet;

use rstar_verifier::{Reason, Verifier};

/// Every distinct ground truth of the integer-answer datasets (all of them integers).
fn answers() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for name in [
        "aime24.jsonl",
        "aime25.jsonl",
        "amc23.jsonl",
        "gsm8k_test.jsonl",
        "dapo_math_17k.jsonl",
    ] {
        let path = rstar_testdata::dataset(name);
        let text = std::fs::read_to_string(&path).unwrap();
        for (i, line) in text.lines().enumerate() {
            let row: serde_json::Value = serde_json::from_str(line).unwrap();
            let answer = row["answer"]
                .as_str()
                .unwrap_or_else(|| panic!("{name}:{}: no answer", i + 1));
            out.insert(answer.to_string());
        }
    }
    out
}

#[test]
fn every_integer_answer_verifies_in_many_styles() {
    let v = Verifier::new();
    let answers = answers();
    assert!(answers.len() > 1000, "{}", answers.len());
    for answer in &answers {
        let gt = v.ground_truth(answer).unwrap_or_else(|e| panic!("{e}"));
        let styles = [
            format!("$\\boxed{{{answer}}}$"),
            format!("<answer>\\boxed{{\\text{{{answer}}}}}</answer>"),
            format!("\\fbox{{x = {answer}}}"),
            format!("\\boxed{{{answer}.0}}"),
            format!("\\boxed{{\\left({answer}\\right) \\text{{ units}}}}"),
        ];
        for s in &styles {
            let verdict = v.verify_integer(s, &gt);
            assert_eq!(verdict.reason, Reason::Right, "{s}");
        }
        let n = gt.to_bigint();
        for wrong in [&n + 1u32, &n - 1u32, &n * 10u32] {
            if wrong == n {
                continue;
            }
            let verdict = v.verify_integer(&format!("\\boxed{{{wrong}}}"), &gt);
            assert_eq!(verdict.reason, Reason::Wrong, "{wrong} vs {answer}");
        }
    }
}

#[test]
fn non_integer_answers_are_clean_errors() {
    // MATH-500 mixes integers and LaTeX answers: every row either parses or is a GroundTruth error.
    let v = Verifier::new();
    let text = std::fs::read_to_string(rstar_testdata::dataset("math500.jsonl")).unwrap();
    let (mut ints, mut errs) = (0, 0);
    for line in text.lines() {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        match v.ground_truth(row["answer"].as_str().unwrap()) {
            Ok(_) => ints += 1,
            Err(_) => errs += 1,
        }
    }
    // The dataset README counts 311 integer answers; a few more LaTeX answers
    // are exact integers too (`\frac{14}{3}`-like ones are not).
    assert!(
        (300..=340).contains(&ints),
        "{ints} integers, {errs} errors"
    );
}
