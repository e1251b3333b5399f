//! End-to-end tests of `rstar tasks`: the embedded task set as dataset JSONL.

use rstar_agent::tasks::{Problem, Split, TaskConfig, TaskSet};

use super::common::rstar;

fn parse(out: &str) -> Vec<Problem> {
    out.lines()
        .map(|l| serde_json::from_str(l).expect("a problem record"))
        .collect()
}

#[test]
fn writes_the_split_the_trainer_draws() {
    let (code, out, err) = rstar(&["tasks", "--split", "held-out", "--n", "6", "--seed", "3"]);
    assert_eq!(code, 0, "{err}");
    let problems = parse(&out);
    let set = TaskSet::new(TaskConfig::embedded_default()).unwrap();
    let expected: Vec<Problem> = set
        .generate(Split::HeldOut, 6, 3)
        .unwrap()
        .iter()
        .map(|t| t.to_problem())
        .collect();
    assert_eq!(problems, expected);
    // Every answer is an integer the verifier accepts as a ground truth.
    for p in &problems {
        assert!(p.answer.parse::<i128>().is_ok(), "{p:?}");
    }
}

#[test]
fn held_out_kinds_are_never_training_kinds_and_out_writes_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kinds.jsonl");
    let (code, out, err) = rstar(&[
        "tasks",
        "--split",
        "held_out_kinds",
        "--n",
        "8",
        "--out",
        path.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.is_empty());
    let problems = parse(&std::fs::read_to_string(&path).unwrap());
    assert_eq!(problems.len(), 8);
    let training: Vec<String> = TaskConfig::embedded_default()
        .kinds
        .iter()
        .map(|k| format!("rstar-agent/tasks/{}", k.as_str()))
        .collect();
    assert!(problems.iter().all(|p| !training.contains(&p.source)));
}

#[test]
fn bad_arguments_are_refused() {
    let (code, _, err) = rstar(&["tasks", "--split", "test"]);
    assert_ne!(code, 0);
    assert!(err.contains("--split `test`"), "{err}");
    let (code, _, err) = rstar(&["tasks", "--n", "0"]);
    assert_ne!(code, 0);
    assert!(err.contains("--n must be at least 1"), "{err}");
}
