//! `rstar eval --compare A B`: the paired difference of two evaluations' results files, written
//! out by hand here, with the flipped problems; and its errors.

use serde_json::{Value, json};

use super::common::rstar;

/// A results.jsonl line of problem `id` with `correct` of `samples` right.
fn line(id: &str, correct: usize, samples: usize) -> String {
    json!({
        "id": id, "answer": "1", "samples": samples, "correct": correct,
        "avg": correct as f64 / samples as f64, "mean_response_tokens": 10.0,
        "tool_calls": 0, "tool_errors": 0, "truncated": 0,
        "extracted": vec![Value::Null; samples],
    })
    .to_string()
}

#[test]
fn compare_gives_the_paired_difference_and_the_flips() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    // Ten common problems with 2 samples: A's avg 0, 0, 0.5, 1, 1, 1, 0, 0.5, 1, 0;
    // B's       1, 0.5, 1, 1, 0, 1, 0, 0.5, 1, 1; and one problem only A holds.
    let av = [0, 0, 1, 2, 2, 2, 0, 1, 2, 0];
    let bv = [2, 1, 2, 2, 0, 2, 0, 1, 2, 2];
    let mut ta: Vec<String> = (0..10).map(|i| line(&format!("p{i}"), av[i], 2)).collect();
    ta.push(line("only-a", 1, 2));
    let tb: Vec<String> = (0..10).map(|i| line(&format!("p{i}"), bv[i], 2)).collect();
    std::fs::write(a.join("results.jsonl"), ta.join("\n") + "\n").unwrap();
    std::fs::write(b.join("results.jsonl"), tb.join("\n") + "\n").unwrap();
    let (code, out, err) = rstar(&[
        "eval",
        "--compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let c: Value = serde_json::from_str(&out).unwrap();
    // Differences B − A: 1, 0.5, 0.5, 0, −1, 0, 0, 0, 0, 1. Mean 0.2; Σ(d − 0.2)² = 2·0.64 +
    // 2·0.09 + 5·0.04 + 1.44 = 3.1; s² = 3.1/9; half-width z·√(s²/10) = 1.959964·0.185592.
    let half = 1.959_964 * (3.1f64 / 9.0 / 10.0).sqrt();
    let close = |v: &Value, x: f64| (v.as_f64().unwrap() - x).abs() < 1e-5;
    assert_eq!(c["problems"], 10);
    assert_eq!(c["unmatched"], 1);
    assert!(
        close(&c["accuracy_a"], 0.5) && close(&c["accuracy_b"], 0.7),
        "{c}"
    );
    assert!(close(&c["difference"], 0.2), "{c}");
    assert!(close(&c["difference_interval"]["lo"], 0.2 - half), "{c}");
    assert!(close(&c["difference_interval"]["hi"], 0.2 + half), "{c}");
    // Flipped: solved by a majority in one and not the other (0.5 is not a majority).
    assert_eq!(c["gained"], json!(["p0", "p2", "p9"]));
    assert_eq!(c["lost"], json!(["p4"]));
    // The table names both files and says the interval holds 0.
    let (code, out, err) = rstar(&[
        "eval",
        "--compare",
        a.join("results.jsonl").to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("+20.0 points") && out.contains("no difference"),
        "{out}"
    );
    assert!(err.contains("1 problems are in only one"), "{err}");

    // Errors: a missing file, a bad line, nothing in common, --model beside --compare.
    let missing = tmp.path().join("nothing");
    let (code, _, err) = rstar(&[
        "eval",
        "--compare",
        missing.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("nothing"), "{err}");
    std::fs::write(a.join("results.jsonl"), "{\"id\": 3}\n").unwrap();
    let (code, _, err) = rstar(&[
        "eval",
        "--compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("line 1"), "{err}");
    std::fs::write(a.join("results.jsonl"), line("zz", 1, 1) + "\n").unwrap();
    let (code, _, err) = rstar(&[
        "eval",
        "--compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("no problem id in common"), "{err}");
    let (code, _, err) = rstar(&[
        "eval",
        "--model",
        "m",
        "--compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("--compare") || err.contains("--model"),
        "{err}"
    );
}
