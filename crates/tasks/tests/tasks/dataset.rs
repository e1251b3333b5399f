//! `rstar_tasks::dataset`: every shared dataset loads, verl's parquet agrees with the DAPO JSONL, bad files fail naming the line and field.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rstar_episode::Prompt;
use rstar_tasks::Error as AgentError;
use rstar_tasks::dataset::{
    DAPO_PREFIX, DAPO_SUFFIX, DatasetOptions, load_prompts, load_prompts_with,
};

/// Rows of verl's parquet, from its footer: `pyarrow.parquet.ParquetFile(path).metadata.num_rows`
/// (pyarrow 19 in a scratch virtualenv, run once; the dataset README says 17917 too).
const VERL_ROWS: usize = 17917;

/// Non-blank lines, counted without the loader.
fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count()
}

/// Loads a shared JSONL file and checks its row count and first row (written out by hand from the file).
fn check_jsonl(name: &str, id: &str, problem_prefix: &str, answer: &str) -> Vec<Prompt> {
    let path = rstar_testdata::dataset(name);
    let prompts = load_prompts(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(prompts.len(), lines(&path), "{name}");
    let first = &prompts[0];
    assert_eq!(first.id, id, "{name}");
    assert!(
        first.problem.starts_with(problem_prefix),
        "{name}: {:?}",
        &first.problem[..80.min(first.problem.len())]
    );
    assert_eq!(first.answer, answer, "{name}");
    prompts
}

#[test]
fn shared_jsonl_datasets_load() {
    check_jsonl(
        "aime24.jsonl",
        "aime24_60",
        "Every morning Aya goes for a $9$-kilometer-long walk",
        "204",
    );
    check_jsonl(
        "aime25.jsonl",
        "aime_2025_I_1",
        "Find the sum of all integer bases $b>9$ for which $17_b$",
        "70",
    );
    check_jsonl(
        "amc23.jsonl",
        "amc23_0",
        "Cities $A$ and $B$ are $45$ miles apart.",
        "27",
    );
    check_jsonl(
        "hmmt_feb2025.jsonl",
        "hmmt_feb_2025_1",
        "Compute the sum of the positive divisors (including $1$) of $9!$",
        "103",
    );
    // MATH-500's LaTeX answers are kept as written.
    check_jsonl(
        "math500.jsonl",
        "test/precalculus/807.json",
        "Convert the point $(0,3)$ in rectangular coordinates to polar coordinates.",
        "\\left( 3, \\frac{\\pi}{2} \\right)",
    );
    check_jsonl(
        "gsm8k_test.jsonl",
        "gsm8k_0",
        "Janet’s ducks lay 16 eggs per day.",
        "18",
    );
}

#[test]
fn shared_row_counts_match_the_readme() {
    // The README's table, as a second witness for the line counts above.
    for (name, rows) in [
        ("aime24.jsonl", 30),
        ("aime25.jsonl", 30),
        ("amc23.jsonl", 40),
        ("hmmt_feb2025.jsonl", 30),
        ("math500.jsonl", 500),
        ("gsm8k_test.jsonl", 1319),
    ] {
        let prompts = load_prompts(&rstar_testdata::dataset(name)).unwrap();
        assert_eq!(prompts.len(), rows, "{name}");
    }
}

#[test]
fn integer_datasets_give_verifiable_ground_truths() {
    let v = rstar_verifier::Verifier::new();
    for name in [
        "aime24.jsonl",
        "aime25.jsonl",
        "amc23.jsonl",
        "gsm8k_test.jsonl",
    ] {
        for p in load_prompts(&rstar_testdata::dataset(name)).unwrap() {
            v.ground_truth(&p.answer)
                .unwrap_or_else(|e| panic!("{name} {}: {e}", p.id));
        }
    }
}

#[test]
fn dapo_parquet_matches_the_dapo_jsonl() {
    let jsonl = check_jsonl(
        "dapo_math_17k.jsonl",
        "dapo_0",
        "In triangle $ABC$, $\\sin \\angle A = \\frac{4}{5}$",
        "34",
    );
    let parquet = load_prompts(&rstar_testdata::dataset(
        "dapo_math_17k_verl_format.parquet",
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(parquet.len(), VERL_ROWS);
    assert_eq!(parquet[0].id, "dapo_math_17k_verl_format-0");
    assert!(parquet[0].problem.starts_with("In triangle $ABC$"));
    assert_eq!(parquet[0].answer, "34");
    assert_eq!(parquet[VERL_ROWS - 1].id, "dapo_math_17k_verl_format-17916");
    // The JSONL is the parquet deduplicated: `dapo_<n>` is row n (its `extra_info.index`).
    for p in &jsonl {
        let n: usize = p.id.strip_prefix("dapo_").unwrap().parse().unwrap();
        let q = &parquet[n];
        assert_eq!(q.problem, p.problem, "{}", p.id);
        assert_eq!(q.answer, p.answer, "{}", p.id);
    }
}

#[test]
fn parquet_options_limit_and_id_field() {
    let opts = DatasetOptions {
        limit: Some(3),
        id_field: Some("extra_info.index".into()),
        ..DatasetOptions::default()
    };
    let path = rstar_testdata::dataset("dapo_math_17k_verl_format.parquet");
    let prompts = load_prompts_with(&path, &opts).unwrap();
    let ids: Vec<&str> = prompts.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["0", "1", "2"]);
    assert_eq!(prompts[2].answer, "-3");
}

/// A temporary file with the given name and content.
fn temp(dir: &tempfile::TempDir, name: &str, content: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, content).unwrap();
    path
}

/// The error message of loading `content` as `name`.
fn error_of(name: &str, content: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = temp(&dir, name, content);
    match load_prompts(&path) {
        Ok(p) => panic!("{name} loaded: {p:?}"),
        Err(e) => {
            let text = e.to_string();
            assert!(text.contains(name), "the file is not named: {text}");
            text
        }
    }
}

#[test]
fn bad_jsonl_names_the_line_and_field() {
    let ok = r#"{"problem": "1+1?", "answer": "2"}"#;
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "malformed.jsonl",
            &format!("{ok}\n{ok}\n{{\"problem\": \n{ok}\n"),
            &[":3:", "invalid json"],
        ),
        (
            "missing.jsonl",
            &format!("{ok}\n{{\"problem\": \"2+2?\"}}\n"),
            &[":2:", "missing field `answer`"],
        ),
        (
            "wrong_type.jsonl",
            &format!("{ok}\n{ok}\n\n{{\"problem\": 5, \"answer\": \"5\"}}\n"),
            &[":4:", "field `problem` must be a string"],
        ),
        (
            "answer_type.jsonl",
            r#"{"problem": "x", "answer": [1, 2]}"#,
            &[
                ":1:",
                "field `answer` must be a string or a number, not an array",
            ],
        ),
        (
            "empty_answer.jsonl",
            r#"{"problem": "x", "answer": "  "}"#,
            &[":1:", "field `answer` is empty"],
        ),
        (
            "no_fields.jsonl",
            r#"{"text": "x", "answer": "1"}"#,
            &[":1:", "no problem field", "`question`", "problem_field"],
        ),
        (
            "not_object.jsonl",
            "[1, 2]\n",
            &[":1:", "not a json object"],
        ),
        (
            "dupes.jsonl",
            "{\"id\": \"a\", \"problem\": \"x\", \"answer\": 1}\n{\"id\": \"a\", \"problem\": \"y\", \"answer\": 2}\n",
            &[":2:", "duplicate id `a` (first at line 1)"],
        ),
        (
            "bad_id.jsonl",
            r#"{"id": 1.5, "problem": "x", "answer": "1"}"#,
            &[":1:", "field `id` must be a string or an integer"],
        ),
        ("empty.jsonl", "", &["no records"]),
        ("blank.jsonl", "\n  \n", &["no records"]),
        (
            "problems.csv",
            "problem,answer\n",
            &["unknown extension `.csv`"],
        ),
        ("problems", "{}", &["unknown extension (none)"]),
        (
            "broken.parquet",
            "PAR1 not really",
            &["not a readable parquet file"],
        ),
    ];
    for (name, content, wants) in cases {
        let text = error_of(name, content);
        for want in *wants {
            assert!(text.contains(want), "{name}: `{want}` not in: {text}");
        }
    }
}

#[test]
fn other_layouts_and_overrides() {
    let dir = tempfile::tempdir().unwrap();
    // GSM8K as published: `question`, and the reasoning with `#### answer`.
    let gsm = temp(
        &dir,
        "gsm.jsonl",
        concat!(
            r#"{"question": "How many?", "answer": "3 + 4 = <<3+4=7>>7\n#### 1,234"}"#,
            "\n",
            r#"{"question": "And now?", "answer": 12}"#,
            "\n",
        ),
    );
    let p = load_prompts(&gsm).unwrap();
    assert_eq!(
        p,
        [
            Prompt::new("gsm-0", "How many?", "1234"),
            Prompt::new("gsm-1", "And now?", "12"),
        ]
    );
    // MATH as published: `unique_id`, and a `solution` whose last box is the answer.
    let math = temp(
        &dir,
        "math.jsonl",
        r#"{"unique_id": "test/x/1.json", "problem": "Halve 9.", "solution": "It is $\\boxed{\\frac{9}{2}}$."}"#,
    );
    assert_eq!(
        load_prompts(&math).unwrap(),
        [Prompt::new("test/x/1.json", "Halve 9.", "\\frac{9}{2}")]
    );
    // verl's layout written as JSONL, with DAPO's instruction wrapper.
    let record = serde_json::json!({
        "data_source": "DAPO",
        "prompt": [{"role": "user", "content": format!("{DAPO_PREFIX}\n\nWhat is $6 \\cdot 7$?\n\n{DAPO_SUFFIX}")}],
        "reward_model": {"style": "rule", "ground_truth": "42"},
        "extra_info": {"index": 7}
    });
    let verl = temp(&dir, "verl.jsonl", &format!("{record}\n"));
    assert_eq!(
        load_prompts(&verl).unwrap(),
        [Prompt::new("verl-0", "What is $6 \\cdot 7$?", "42")]
    );
    let keep = DatasetOptions {
        strip_instruction: false,
        id_field: Some("extra_info.index".into()),
        ..DatasetOptions::default()
    };
    let kept = load_prompts_with(&verl, &keep).unwrap();
    assert_eq!(kept[0].id, "7");
    assert!(kept[0].problem.starts_with(DAPO_PREFIX));
    assert!(kept[0].problem.ends_with(DAPO_SUFFIX));
    // Named fields win over detection; the limit stops reading (the bad third line is never seen).
    let custom = temp(
        &dir,
        "custom.jsonl",
        concat!(
            r#"{"problem": "ignored", "statement": "S1", "answer": "0", "key": "7", "name": "a"}"#,
            "\n",
            r#"{"statement": "S2", "key": 8, "name": "b"}"#,
            "\nnot json\n",
        ),
    );
    let opts = DatasetOptions {
        problem_field: Some("statement".into()),
        answer_field: Some("key".into()),
        id_field: Some("name".into()),
        limit: Some(2),
        strip_instruction: true,
    };
    assert_eq!(
        load_prompts_with(&custom, &opts).unwrap(),
        [Prompt::new("a", "S1", "7"), Prompt::new("b", "S2", "8")]
    );
    let err = load_prompts_with(
        &custom,
        &DatasetOptions {
            limit: None,
            ..opts
        },
    )
    .unwrap_err();
    assert!(
        matches!(&err, AgentError::Dataset(e) if e.line == 3),
        "{err}"
    );
}

/// A parquet file with optional string columns `problem` and `answer` (`None` is null).
fn write_parquet(path: &Path, rows: &[(&str, Option<&str>)]) {
    use parquet::data_type::{ByteArray, ByteArrayType};
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;

    let schema = Arc::new(
        parquet::schema::parser::parse_message_type(
            "message m { optional binary problem (UTF8); optional binary answer (UTF8); }",
        )
        .unwrap(),
    );
    let file = std::fs::File::create(path).unwrap();
    let mut writer =
        SerializedFileWriter::new(file, schema, Arc::new(WriterProperties::builder().build()))
            .unwrap();
    let mut group = writer.next_row_group().unwrap();
    let columns: [Vec<Option<&str>>; 2] = [
        rows.iter().map(|r| Some(r.0)).collect(),
        rows.iter().map(|r| r.1).collect(),
    ];
    for column in columns {
        let mut col = group.next_column().unwrap().unwrap();
        let values: Vec<ByteArray> = column.iter().flatten().map(|s| (*s).into()).collect();
        let levels: Vec<i16> = column.iter().map(|v| i16::from(v.is_some())).collect();
        col.typed::<ByteArrayType>()
            .write_batch(&values, Some(&levels), None)
            .unwrap();
        col.close().unwrap();
    }
    group.close().unwrap();
    writer.close().unwrap();
}

#[test]
fn parquet_rows_are_named_in_errors() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("flat.parquet");
    write_parquet(&good, &[("1+1?", Some("2")), ("2+2?", Some("4"))]);
    assert_eq!(
        load_prompts(&good).unwrap(),
        [
            Prompt::new("flat-0", "1+1?", "2"),
            Prompt::new("flat-1", "2+2?", "4")
        ]
    );
    let bad = dir.path().join("holes.parquet");
    write_parquet(
        &bad,
        &[("1+1?", Some("2")), ("2+2?", Some("4")), ("3+3?", None)],
    );
    let err = load_prompts(&bad).unwrap_err();
    assert!(
        matches!(&err, AgentError::DatasetRow { row: 2, message, .. } if message == "missing field `answer`"),
        "{err}"
    );
    assert!(err.to_string().contains("holes.parquet: row 2:"), "{err}");
    let empty = dir.path().join("empty.parquet");
    write_parquet(&empty, &[]);
    let err = load_prompts(&empty).unwrap_err();
    assert!(matches!(err, AgentError::DatasetFile { .. }), "{err}");
    assert!(err.to_string().contains("no records"), "{err}");
}
