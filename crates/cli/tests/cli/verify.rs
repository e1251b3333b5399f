//! End-to-end tests of `rstar verify`: JSONL in, one verdict a line out, summary and malformed lines on stderr.

use std::io::Write;
use std::process::Stdio;

fn verify_stdin(args: &[&str], input: &str) -> (i32, String, String) {
    let r = super::common::run(&[&["verify"], args].concat(), Some(input.as_bytes()), &[]);
    (r.code, r.out(), r.stderr)
}

#[test]
fn scores_lines_in_order_with_a_summary() {
    let input = [
        r#"{"response": "so $\\boxed{42}$", "answer": "42"}"#,
        r#"{"response": "\\boxed{4200}", "answer": 42}"#,
        r#"{"response": "no box", "answer": "7"}"#,
        "",
        r#"{"response": "\\boxed{1{,}000}", "answer": "1000"}"#,
    ]
    .join("\n");
    let (code, out, err) = verify_stdin(&[], &input);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    let got: Vec<(u64, u64, &str)> = lines
        .iter()
        .map(|v| {
            (
                v["line"].as_u64().unwrap(),
                v["reward"].as_u64().unwrap(),
                v["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (1, 1, "right"),
            (2, 0, "wrong"),
            (3, 0, "no_box"),
            (5, 1, "right")
        ]
    );
    assert_eq!(lines[3]["normalized"], "1000");
    assert!(err.contains("accuracy 0.5000 (2/4)"), "{err}");
    assert!(err.contains("right 2, wrong 1, no_box 1"), "{err}");
}

#[test]
fn malformed_lines_are_reported_and_skipped() {
    let input = [
        r#"{"response": "\\boxed{1}", "answer": "1"}"#,
        r#"{not json"#,
        r#"{"response": "\\boxed{1}"}"#,
        r#"{"response": "\\boxed{1}", "answer": "1/2"}"#,
        r#"{"response": "\\boxed{2}", "answer": "2"}"#,
    ]
    .join("\n");
    let (code, out, err) = verify_stdin(&[], &input);
    assert_eq!(code, 2, "{err}");
    assert_eq!(out.lines().count(), 2);
    assert!(err.contains("<stdin>:2: skipped: invalid JSON"), "{err}");
    assert!(
        err.contains("<stdin>:3: skipped: missing field `answer`"),
        "{err}"
    );
    assert!(
        err.contains("<stdin>:4: skipped: field `answer`: ground truth `1/2` is not an integer"),
        "{err}"
    );
    assert!(err.contains("2 scored, 3 skipped"), "{err}");
    // A line that is not UTF-8 is skipped too; the next line is still scored.
    let mut child = super::common::command()
        .arg("verify")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let bytes = b"{\"response\": \"\xff\", \"answer\": \"1\"}\n{\"response\": \"\\\\boxed{1}\", \"answer\": \"1\"}\n";
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("<stdin>:1: skipped: the line is not valid UTF-8"),
        "{err}"
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 1);
}

#[test]
fn field_names_and_input_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.jsonl");
    std::fs::write(
        &path,
        "{\"text\": \"\\\\boxed{2^{10}}\", \"gt\": \"1024\"}\n",
    )
    .unwrap();
    let p = path.to_str().unwrap();
    let (code, out, err) = verify_stdin(
        &[
            "--input",
            p,
            "--response-field",
            "text",
            "--answer-field",
            "gt",
        ],
        "",
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"reason\":\"right\""), "{out}");
    let (_, out, _) = verify_stdin(
        &[
            "-i",
            p,
            "--response-field",
            "text",
            "--answer-field",
            "gt",
            "--no-expressions",
        ],
        "",
    );
    assert!(out.contains("\"reason\":\"not_an_integer\""), "{out}");
    let (code, _, err) = verify_stdin(&["--input", "/no/such/file.jsonl"], "");
    assert_eq!(code, 1);
    assert!(err.contains("/no/such/file.jsonl"), "{err}");
}

#[test]
fn modes_math_and_choice() {
    let input = concat!(
        "{\"response\": \"\\\\boxed{2\\\\sqrt{3}}\", \"answer\": \"\\\\sqrt{12}\"}\n",
        "{\"response\": \"\\\\boxed{(3, 4)}\", \"answer\": \"(3,4]\"}\n",
        "{\"response\": \"\\\\boxed{1}\", \"answer\": \"\"}\n",
    );
    let (code, out, err) = verify_stdin(&["--mode", "math"], input);
    assert_eq!(code, 2, "{err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(lines[0]["reward"], 1);
    assert_eq!(lines[0]["canonical"], "2*sqrt(3)");
    assert_eq!(lines[1]["reason"], "wrong");
    assert!(
        err.contains("(math mode)") && err.contains(":3: skipped"),
        "{err}"
    );
    // The integer mode refuses the LaTeX truths, line by line.
    let (code, out, _) = verify_stdin(&[], input);
    assert_eq!(code, 2);
    assert!(out.is_empty(), "{out}");

    let input = "{\"response\": \"Thus the answer is (B).\", \"answer\": \"B\"}\n\
                 {\"response\": \"Answer: A\", \"answer\": \"(C)\"}\n";
    let (code, out, err) = verify_stdin(&["--mode", "choice"], input);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("\"reward\":1") && out.contains("\"reward\":0"),
        "{out}"
    );
    assert!(err.contains("accuracy 0.5000"), "{err}");
    let (code, _, err) = verify_stdin(&["--mode", "float"], "");
    assert_ne!(code, 0);
    assert!(err.contains("auto, integer, math, choice"), "{err}");
}

#[test]
fn issue_44_choice_mode_keeps_the_closing_bracket() {
    let input = concat!(
        "{\"response\": \"The answer is (B)\", \"answer\": \"B\"}\n",
        "{\"response\": \"answer: **D**\", \"answer\": \"(D)\"}\n",
        "{\"response\": \"The answer is [C].\", \"answer\": \"**C**\"}\n",
    );
    let (code, out, err) = verify_stdin(&["--mode", "choice"], input);
    assert_eq!(code, 0, "{err}");
    let got: Vec<(String, u64)> = out
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["extracted"].as_str().unwrap_or("").to_string(),
                v["reward"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("(B)".to_string(), 1),
            ("**D**".to_string(), 1),
            ("[C]".to_string(), 1)
        ],
        "{out}"
    );
}

#[test]
fn issue_42_choice_truths_that_are_not_one_letter_are_refused() {
    let input = concat!(
        "{\"response\": \"\\\\boxed{E}\", \"answer\": \"1e5\"}\n",
        "{\"response\": \"\\\\boxed{B}\", \"answer\": \"12b34\"}\n",
        "{\"response\": \"\\\\boxed{E}\", \"answer\": \"E\"}\n",
    );
    let (code, out, err) = verify_stdin(&["--mode", "choice"], input);
    // Two lines skipped (exit 2), the one real letter scored.
    assert_eq!(code, 2, "{err}");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(
        out.contains("\"line\":3") && out.contains("\"reward\":1"),
        "{out}"
    );
    for line in [":1: skipped", ":2: skipped"] {
        assert!(err.contains(line), "{line}: {err}");
    }
    assert!(
        err.contains("`1e5`") && err.contains("not one letter"),
        "{err}"
    );
}

/// Issue 70: `--mode auto`, as `verify serve`, `eval` and the Python API default to, scores each
/// line in its own ground truth's mode (an integer, LaTeX, a letter); the summary names it, and
/// a run that scored nothing says so instead of `accuracy 0.0000 (0/0)`.
#[test]
fn auto_mode_scores_each_line_by_its_own_truth() {
    let input = concat!(
        "{\"response\": \"\\\\boxed{42}\", \"answer\": \"42\"}\n",
        "{\"response\": \"\\\\boxed{2\\\\sqrt{3}}\", \"answer\": \"\\\\sqrt{12}\"}\n",
        "{\"response\": \"Thus the answer is (B).\", \"answer\": \"B\"}\n",
        "{\"response\": \"\\\\boxed{5}\", \"answer\": \"\\\\frac{1}{2}\"}\n",
    );
    let (code, out, err) = verify_stdin(&["--mode", "auto"], input);
    assert_eq!(code, 0, "{err}");
    let rewards: Vec<u64> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["reward"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(rewards, [1, 1, 1, 0]);
    assert!(
        err.contains("(auto mode): 4 scored") && err.contains("accuracy 0.7500 (3/4)"),
        "{err}"
    );
    // The integer mode (the default) cannot score the LaTeX truths.
    let (code, _, _) = verify_stdin(&[], input);
    assert_eq!(code, 2);
    let (_, _, err) = verify_stdin(&["--mode", "auto"], "not json\n");
    assert!(
        err.contains("nothing scored, 1 skipped") && !err.contains("0/0"),
        "{err}"
    );
}
