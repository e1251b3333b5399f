//! The task set's JSONL files: our own and the shared datasets, and bad input.

use rstar_tasks::Error as TasksError;
use rstar_tasks::tasks::{Problem, Split, TaskConfig, TaskSet, read_problems, write_problems};

#[test]
fn generated_problems_round_trip_through_jsonl() {
    let set = TaskSet::new(TaskConfig::embedded_default()).unwrap();
    let problems: Vec<Problem> = set
        .generate(Split::HeldOut, 20, 11)
        .unwrap()
        .iter()
        .map(|t| t.to_problem())
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("held_out.jsonl");
    write_problems(&path, &problems).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let mut keys: Vec<&String> = first.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["answer", "id", "problem", "source"]);
    assert!(text.starts_with("{\"id\":\"held_out-00000-"), "{text}");
    assert_eq!(read_problems(&path).unwrap(), problems);
}

#[test]
fn reads_the_shared_datasets() {
    let aime = read_problems(&rstar_testdata::dataset("aime24.jsonl")).unwrap();
    assert_eq!(aime.len(), 30);
    assert!(
        aime.iter()
            .all(|p| !p.answer.is_empty() && !p.problem.is_empty())
    );
    assert_eq!(aime[0].id, "aime24_60");
    assert_eq!(aime[0].answer, "204");
}

fn read_err(content: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.jsonl");
    std::fs::write(&path, content).unwrap();
    let err = read_problems(&path).unwrap_err();
    assert!(matches!(err, TasksError::Dataset(_)), "{err:?}");
    err.to_string()
}

#[test]
fn bad_files_name_file_line_and_field() {
    let good = r#"{"id": "a", "problem": "p", "answer": "1", "source": "s"}"#;
    let cases = [
        (
            format!("{good}\n{{\"id\": \"b\", \"problem\": \"p\"}}\n"),
            "bad.jsonl:2: missing field `answer`",
        ),
        (
            format!("{good}\n\n{{\"id\": \"b\", \"problem\": 3, \"answer\": 1}}\n"),
            "bad.jsonl:3: field `problem` must be a string",
        ),
        (
            "[1]\n".to_string(),
            "bad.jsonl:1: the record is not a json object",
        ),
        ("{\"id\": \"a\",\n".to_string(), "bad.jsonl:1: invalid json"),
        (
            r#"{"id": "a", "problem": "p", "answer": [1]}"#.to_string(),
            "bad.jsonl:1: field `answer` must be a string",
        ),
    ];
    for (content, want) in cases {
        let err = read_err(&content);
        assert!(err.contains(want), "{err} lacks {want}");
    }
    let missing = read_problems(std::path::Path::new("/no/such/file.jsonl")).unwrap_err();
    assert!(
        missing.to_string().starts_with("/no/such/file.jsonl: "),
        "{missing}"
    );
}

#[test]
fn numeric_answers_and_extra_fields_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ok.jsonl");
    std::fs::write(
        &path,
        "{\"id\": 7, \"problem\": \"p\", \"answer\": 12, \"lang\": \"en\"}\n",
    )
    .unwrap();
    let p = read_problems(&path).unwrap();
    assert_eq!(
        p,
        vec![Problem {
            id: "7".into(),
            problem: "p".into(),
            answer: "12".into(),
            source: String::new()
        }]
    );
}
