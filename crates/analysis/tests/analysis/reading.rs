//! Reading trajectory JSONL: bad, truncated and inconsistent lines are reported with their line and field.

use std::path::Path;

use rstar_analysis::parse_trajectories;

use super::common::{failed, solved};

fn file() -> String {
    format!(
        "{}\n\n{}\n",
        solved().to_json_line(),
        failed().to_json_line()
    )
}

fn err_of(text: &str) -> String {
    parse_trajectories(text, Path::new("runs/t.jsonl"))
        .unwrap_err()
        .to_string()
}

#[test]
fn good_files_round_trip_and_blank_lines_are_skipped() {
    let got = parse_trajectories(&file(), Path::new("t.jsonl")).unwrap();
    assert_eq!(got, vec![solved(), failed()]);
}

#[test]
fn a_truncated_last_line_is_reported_with_its_number() {
    let text = file();
    // Cut the file in the middle of the third line (the second record).
    let cut = &text[..text.len() - 40];
    let err = err_of(cut);
    assert!(err.starts_with("runs/t.jsonl:3: truncated line"), "{err}");
}

#[test]
fn a_missing_or_mistyped_field_is_named() {
    let mut v: serde_json::Value = serde_json::from_str(&failed().to_json_line()).unwrap();
    v.as_object_mut().unwrap().remove("stop");
    let err = err_of(&format!("{}\n{v}\n", solved().to_json_line()));
    assert!(
        err.starts_with("runs/t.jsonl:2: missing field `stop`"),
        "{err}"
    );

    let mut v: serde_json::Value = serde_json::from_str(&failed().to_json_line()).unwrap();
    v["entropies"][3] = serde_json::Value::Null; // what a NaN becomes in JSON
    let err = err_of(&v.to_string());
    assert!(
        err.starts_with("runs/t.jsonl:1: invalid type: null, expected f32"),
        "{err}"
    );
}

#[test]
fn inconsistent_lengths_are_reported_with_line_and_field() {
    let mut v: serde_json::Value = serde_json::from_str(&failed().to_json_line()).unwrap();
    v["entropies"].as_array_mut().unwrap().pop();
    let err = err_of(&format!("{}\n{v}\n", solved().to_json_line()));
    assert_eq!(
        err,
        "runs/t.jsonl:2: invalid trajectory: `entropies` has 19 entries for 20 assistant tokens"
    );
}

#[test]
fn garbage_is_reported_with_its_line() {
    let err = err_of(&format!("{}\nnot json\n", solved().to_json_line()));
    assert!(err.starts_with("runs/t.jsonl:2: expected"), "{err}");
}
