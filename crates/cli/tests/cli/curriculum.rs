//! End-to-end tests of `rstar curriculum show` and `rstar curriculum filter`.

use super::common::rstar;

#[test]
fn show_prints_the_paper_preset() {
    let (code, out, err) = rstar(&["curriculum", "show", "--preset", "rstar2-agent"]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .skip(2)
        .take(3)
        .map(|l| l.split_whitespace().collect())
        .collect();
    // #, stage, tokens, turns, steps, problems…
    assert_eq!(
        rows.iter().map(|r| r[2]).collect::<Vec<_>>(),
        ["8192", "12288", "12288"]
    );
    assert_eq!(
        rows.iter().map(|r| r[3]).collect::<Vec<_>>(),
        ["10", "10", "15"]
    );
    assert_eq!(
        rows.iter().map(|r| r[4]).collect::<Vec<_>>(),
        ["300", "85", "125"]
    );
    assert!(
        out.lines().nth(4).unwrap().contains("hard: not solved 8/8"),
        "{out}"
    );
    assert!(!out.lines().nth(2).unwrap().contains("hard"), "{out}");
    assert!(out.contains("total: 510 steps"), "{out}");
    // The default is the paper's preset.
    assert_eq!(rstar(&["curriculum", "show"]).1, out);
}

#[test]
fn show_reads_a_toml_config_and_reports_errors() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("c.toml");
    std::fs::write(&good, "[[stage]]\nname = \"only\"\nmax_response_tokens = 300\nmax_assistant_turns = 2\nsteps = 5\n").unwrap();
    let (code, out, err) = rstar(&["curriculum", "show", "--config", good.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("only") && out.contains("300"), "{out}");
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[[stage]]\nname = \"x\"\nmax_response_tokens = 300\n").unwrap();
    let (code, _, err) = rstar(&["curriculum", "show", "--config", bad.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(
        err.contains("bad.toml") && err.contains("max_assistant_turns"),
        "{err}"
    );
    let (code, _, err) = rstar(&["curriculum", "show", "--preset", "huge"]);
    assert_ne!(code, 0);
    assert!(err.contains("unknown preset `huge`"), "{err}");
}

#[test]
fn filter_writes_the_hard_subset() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data.jsonl");
    let rollouts = dir.path().join("rollouts.jsonl");
    let out = dir.path().join("hard.jsonl");
    let lines = [
        r#"{"id": "p1", "problem": "easy", "answer": "1"}"#,
        r#"{"id": "p2", "problem": "hard", "answer": "2"}"#,
        r#"{"id": "p3", "problem": "unseen", "answer": "3"}"#,
        r#"{"id": "p4", "problem": "never", "answer": "4"}"#,
    ];
    std::fs::write(
        &data,
        lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
    let mut r = String::new();
    for s in 0..8 {
        r.push_str(&format!("{{\"id\": \"p1\", \"reward\": 1}}\n{{\"id\": \"p2\", \"reward\": {}}}\n{{\"id\": \"p4\", \"reward\": false}}\n", u8::from(s < 7)));
    }
    std::fs::write(&rollouts, r).unwrap();
    let (code, _, err) = rstar(&[
        "curriculum",
        "filter",
        "--rollouts",
        rollouts.to_str().unwrap(),
        "--k",
        "8",
        "--data",
        data.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        format!("{}\n{}\n{}\n", lines[1], lines[2], lines[3])
    );
    assert!(
        err.contains("kept 3 of 4 problems")
            && err.contains("dropped 1")
            && err.contains("1 without rollouts"),
        "{err}"
    );

    std::fs::write(
        &rollouts,
        "{\"id\": \"p1\", \"reward\": 1}\n{\"id\": \"p1\"}\n",
    )
    .unwrap();
    let (code, _, err) = rstar(&[
        "curriculum",
        "filter",
        "--rollouts",
        rollouts.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("rollouts.jsonl:2: missing field `reward`") && err.contains("results.jsonl"),
        "{err}"
    );

    // Issue 70: `rstar eval`'s results.jsonl (a line a problem, `samples` and `correct`) gives
    // the same subset as its rollouts.
    std::fs::write(
        &rollouts,
        "{\"id\": \"p1\", \"samples\": 8, \"correct\": 8, \"avg\": 1.0}\n\
         {\"id\": \"p2\", \"samples\": 8, \"correct\": 7, \"avg\": 0.875}\n\
         {\"id\": \"p4\", \"samples\": 8, \"correct\": 0, \"avg\": 0.0}\n",
    )
    .unwrap();
    let (code, _, err) = rstar(&[
        "curriculum",
        "filter",
        "--rollouts",
        rollouts.to_str().unwrap(),
        "--k",
        "8",
        "--data",
        data.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        format!("{}\n{}\n{}\n", lines[1], lines[2], lines[3])
    );
}
