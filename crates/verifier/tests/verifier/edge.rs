//! The grader edge cases of the research notes (`tests/data/edge_cases.jsonl`): intended verdicts, and where they leave the rStar2 reference.

use rstar_verifier::verify;

#[test]
fn edge_cases_match_the_intended_verdicts() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/edge_cases.jsonl");
    let text = std::fs::read_to_string(path).unwrap();
    let mut diverging = 0;
    for (i, line) in text.lines().enumerate() {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        let response = row["response"].as_str().unwrap();
        let answer = row["answer"].as_str().unwrap();
        let intended = row["intended"].as_u64().unwrap();
        let v = verify(response, answer).unwrap();
        assert_eq!(
            u64::from(v.reward),
            intended,
            "line {}: {response:?}: {v:?}",
            i + 1
        );
        if row["rstar2_reference"].as_u64().unwrap() != intended {
            diverging += 1;
        }
    }
    // The documented divergences: `1\,000` (we accept), percent leniency and
    // tolerance (4200, 0.42, 41.99999), `42 and 43`, and unboxed answers.
    assert_eq!(diverging, 7);
}
