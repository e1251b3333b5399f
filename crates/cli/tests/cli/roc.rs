//! End-to-end tests of `rstar roc`: JSONL rollouts in, kept lines out unchanged, metrics on stderr.

use std::collections::BTreeMap;

use serde_json::Value;

fn rstar_roc(args: &[&str], input: &[u8]) -> (i32, Vec<u8>, String) {
    let r = super::common::run(&[&["roc"], args].concat(), Some(input), &[]);
    (r.code, r.stdout, r.stderr)
}

/// The reference fixture's rows as JSONL, and the row ids the reference keeps.
fn fixture() -> (String, Vec<u64>) {
    let path = rstar_testdata::fixture("roc/cases.json");
    let cases: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut jsonl = String::new();
    for row in cases["rows"].as_array().unwrap() {
        jsonl.push_str(&serde_json::to_string(row).unwrap());
        jsonl.push('\n');
    }
    let kept = cases["kept_resample_on_correct"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    (jsonl, kept)
}

fn ids(out: &[u8]) -> Vec<u64> {
    String::from_utf8(out.to_vec())
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

#[test]
fn reference_mode_matches_the_reference_byte_for_byte() {
    let (input, kept) = fixture();
    let (code, out, err) = rstar_roc(
        &[
            "--mode",
            "reference",
            "--keep",
            "16",
            "--min-failures",
            "2",
            "--min-successes",
            "2",
        ],
        input.as_bytes(),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(ids(&out), kept);
    let expected: String = input
        .lines()
        .enumerate()
        .filter(|(i, _)| kept.contains(&(*i as u64)))
        .map(|(_, l)| format!("{l}\n"))
        .collect();
    assert_eq!(String::from_utf8(out).unwrap(), expected);
    assert!(
        err.contains("roc_error_ratio/global_err_ratio = 0.27009"),
        "{err}"
    );
    assert!(
        err.contains("kept 832 of 1712 traces in 60 groups"),
        "{err}"
    );
}

#[test]
fn paper_mode_keeps_16_of_32_and_prefers_low_penalties() {
    let (input, _) = fixture();
    let (code, out, err) = rstar_roc(&["--mode", "paper", "--seed", "5"], input.as_bytes());
    assert_eq!(code, 0, "{err}");
    let text = String::from_utf8(out).unwrap();
    // (traces, failures) per group, of the input and of the kept lines.
    let count = |text: &str| {
        let mut groups: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for line in text.lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            let failure = v["reward"].as_f64().unwrap() <= 0.0;
            let g = groups
                .entry(v["uid"].as_str().unwrap().to_string())
                .or_default();
            g.0 += 1;
            g.1 += usize::from(failure);
        }
        groups
    };
    let (per_group, sizes) = (count(&text), count(&input));
    let mut full = 0;
    for (uid, &(size, failures)) in &sizes {
        // ⌊n_neg · 16 / n⌋ failures (⌊n_neg / 2⌋ for the groups of 32), the rest successes;
        // groups of at most 16 whole.
        let want = if size <= 16 {
            (size, failures)
        } else {
            (16, failures * 16 / size)
        };
        assert_eq!(per_group[uid], want, "{uid}");
        full += usize::from(size == 32);
    }
    assert!(full > 10, "{full} groups of 32");
    let metric = |name: &str| -> f64 {
        let line = err
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap();
        line.rsplit(" = ").next().unwrap().parse().unwrap()
    };
    assert!(
        metric("roc/kept_success_p_total_mean") + 0.1 < metric("roc/dropped_success_p_total_mean"),
        "{err}"
    );
    // Same seed, same output; another seed, another selection.
    assert_eq!(
        rstar_roc(&["--seed", "5"], input.as_bytes()).1,
        text.as_bytes()
    );
    assert_ne!(
        rstar_roc(&["--seed", "6"], input.as_bytes()).1,
        text.as_bytes()
    );
}

#[test]
fn structured_counts_and_pass_through_fields() {
    let mut input = String::new();
    for i in 0..4 {
        // Two successes (one with a tool error) and two failures, down to 2.
        let reward = u8::from(i < 2);
        input.push_str(&format!(
            "{{\"uid\": \"q\", \"reward\": {reward}, \"tool_calls\": 2, \"failed_calls\": {}, \"answers\": 1, \"assistant_turns\": 3, \"extra\": {{\"i\": {i}}}}}\n",
            i % 2
        ));
    }
    let (code, out, err) = rstar_roc(
        &[
            "--mode",
            "reference",
            "--keep",
            "2",
            "--min-failures",
            "1",
            "--min-successes",
            "1",
        ],
        input.as_bytes(),
    );
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = input.lines().collect();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        format!("{}\n{}\n", lines[0], lines[2])
    );
}

#[test]
fn equal_reward_groups_are_rejected_on_request() {
    let input = "{\"uid\":\"a\",\"reward\":1,\"response\":\"\"}\n{\"uid\":\"a\",\"reward\":1,\"response\":\"\"}\n{\"uid\":\"b\",\"reward\":1,\"response\":\"\"}\n{\"uid\":\"b\",\"reward\":0,\"response\":\"\"}\n";
    let (code, out, err) = rstar_roc(
        &[
            "--keep",
            "2",
            "--min-failures",
            "1",
            "--min-successes",
            "1",
            "--reject-equal-reward",
        ],
        input.as_bytes(),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        String::from_utf8(out).unwrap(),
        input
            .lines()
            .skip(2)
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    );
    assert!(
        err.contains("reject_equal_reward/solve_equal_total = 1"),
        "{err}"
    );
}

#[test]
fn malformed_lines_are_reported_with_their_number() {
    let input = "{\"uid\":\"a\",\"reward\":1,\"response\":\"\"}\nnot json\n{\"uid\":\"a\"}\n";
    let (code, out, err) = rstar_roc(&[], input.as_bytes());
    assert_ne!(code, 0);
    assert!(out.is_empty());
    assert!(err.contains("<stdin>:2: invalid JSON"), "{err}");
    assert!(err.contains("<stdin>:3: missing field `reward`"), "{err}");
    let (code, out, err) = rstar_roc(&["--skip-malformed"], input.as_bytes());
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        String::from_utf8(out).unwrap(),
        format!("{}\n", input.lines().next().unwrap())
    );
}

#[test]
fn invalid_floors_fail() {
    // Floors of 2 + 2 cannot fit in 3 kept traces: the reference mode's default floors, or
    // the paper mode's when given (it has none by default, so `--keep 3` alone is valid).
    for args in [
        &["--mode", "reference", "--keep", "3"][..],
        &["--keep", "3", "--min-failures", "2", "--min-successes", "2"][..],
    ] {
        let (code, _, err) = rstar_roc(args, b"");
        assert_ne!(code, 0, "{args:?}");
        assert!(err.contains("exceed keep"), "{args:?}: {err}");
    }
    let (code, _, err) = rstar_roc(&["--keep", "3"], b"");
    assert_eq!(code, 0, "{err}");
}

/// Issue 70: `rstar roc` reads what `rstar eval` writes: its `trajectories.jsonl` (grouped by
/// problem `id`, summarised as the trainer summarises them), or any field as the group with
/// `--group-key`; and the same error on many lines is reported once, with their count.
#[test]
fn trajectories_from_eval_are_read_and_repeated_errors_counted() {
    use burn::tensor::Device;
    use rstar_policy::{Qwen, QwenConfig, Tokenizer, WeightDtype, save_dir};
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    let random = Qwen::random(QwenConfig::tiny_char(), 0, &Device::flex()).unwrap();
    save_dir(&random, &Tokenizer::char(), &model, WeightDtype::F32).unwrap();
    let data = tmp.path().join("two.jsonl");
    std::fs::write(
        &data,
        "{\"id\": \"a\", \"problem\": \"What is 2+2?\", \"answer\": \"4\"}\n\
         {\"id\": \"b\", \"problem\": \"What is 3*3?\", \"answer\": \"9\"}\n",
    )
    .unwrap();
    let out = tmp.path().join("eval");
    let (m, d, o) = (
        model.to_str().unwrap(),
        data.to_str().unwrap(),
        out.to_str().unwrap(),
    );
    let eval = super::common::run(
        &[
            "eval",
            "--model",
            m,
            "--data",
            d,
            "--out",
            o,
            "--samples",
            "3",
            "--max-response-tokens",
            "8",
        ],
        None,
        &[("RSTAR_PYTHON", rstar_testdata::python().as_os_str())],
    );
    assert_eq!(eval.code, 0, "{}", eval.stderr);
    let trajectories = std::fs::read(out.join("trajectories.jsonl")).unwrap();
    let (code, kept, err) = rstar_roc(&["--keep", "2"], &trajectories);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("of 6 traces in 2 groups"), "{err}");
    assert_eq!(String::from_utf8(kept).unwrap().lines().count(), 4, "{err}");
    // Another field as the group: every sample index is a group of two.
    let (code, _, err) = rstar_roc(&["--keep", "2", "--group-key", "sample"], &trajectories);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("in 3 groups"), "{err}");

    // Five lines without the group field: one report, counted.
    let input = "{\"reward\":1,\"response\":\"\"}\n".repeat(5);
    let (code, _, err) = rstar_roc(&[], input.as_bytes());
    assert_ne!(code, 0);
    assert_eq!(err.matches("missing field `uid`").count(), 1, "{err}");
    assert!(
        err.contains("(and 4 more lines with the same error)"),
        "{err}"
    );
}
