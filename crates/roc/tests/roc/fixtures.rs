//! The reference code's outputs on recorded groups (`tests/data/cases.json`,
//! made by running microsoft/rStar's down-sampling; see `tests/data/README.md`).

use rstar_roc::{
    PenaltyOptions, RocConfig, TraceSummary, p_err, p_format, reject_equal_reward, select,
};
use serde_json::Value;

fn cases() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/cases.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

struct Rows {
    uids: Vec<String>,
    traces: Vec<TraceSummary>,
}

fn rows(cases: &Value) -> Rows {
    let rows = cases["rows"].as_array().unwrap();
    Rows {
        uids: rows
            .iter()
            .map(|r| r["uid"].as_str().unwrap().to_string())
            .collect(),
        traces: rows
            .iter()
            .map(|r| {
                TraceSummary::from_text(
                    r["reward"].as_f64().unwrap(),
                    r["response"].as_str().unwrap(),
                )
            })
            .collect(),
    }
}

fn indices(v: &Value) -> Vec<usize> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect()
}

#[test]
fn penalties_match_the_reference_exactly() {
    let cases = cases();
    let rows = rows(&cases);
    let opts = PenaltyOptions::reference();
    for (i, t) in rows.traces.iter().enumerate() {
        assert_eq!(
            p_err(t, &opts),
            cases["p_err"][i].as_f64().unwrap(),
            "row {i} p_err"
        );
        assert_eq!(
            p_format(t, &opts),
            cases["p_format"][i].as_f64().unwrap(),
            "row {i} p_format"
        );
    }
}

#[test]
fn resample_on_correct_keeps_the_same_rows() {
    let cases = cases();
    let rows = rows(&cases);
    let cfg = &cases["config"];
    let config = RocConfig {
        keep: cfg["down_sample_to_n"].as_u64().unwrap() as usize,
        min_failures: cfg["min_zero_reward_trace_num"].as_u64().unwrap() as usize,
        min_successes: cfg["min_non_zero_reward_trace_num"].as_u64().unwrap() as usize,
        ..RocConfig::reference()
    };
    let sel = select(&rows.uids, &rows.traces, &config).unwrap();
    assert_eq!(sel.kept, indices(&cases["kept_resample_on_correct"]));
    for (name, want) in cases["metrics"].as_object().unwrap() {
        let got = sel.metrics[name.as_str()];
        assert!(
            (got - want.as_f64().unwrap()).abs() < 1e-12,
            "{name}: {got} vs {want}"
        );
    }
}

#[test]
fn equal_reward_rejection_keeps_the_same_rows() {
    let cases = cases();
    let rows = rows(&cases);
    let rewards: Vec<f64> = rows.traces.iter().map(|t| t.reward).collect();
    let (kept, metrics) = reject_equal_reward(&rows.uids, &rewards).unwrap();
    assert_eq!(kept, indices(&cases["kept_reject_equal_reward"]));
    assert_eq!(
        metrics["reject_equal_reward/solve_equal_total"]
            + metrics["reject_equal_reward/solve_non_equal_total"],
        60.0
    );
}

#[test]
fn jsonl_reference_mode_matches_the_fixture() {
    let cases = cases();
    let mut input = String::new();
    for row in cases["rows"].as_array().unwrap() {
        input.push_str(&serde_json::to_string(row).unwrap());
        input.push('\n');
    }
    let (batch, sel) =
        rstar_roc::jsonl::select_jsonl(input.as_bytes(), "cases", &RocConfig::reference()).unwrap();
    let kept_ids: Vec<usize> = sel
        .kept
        .iter()
        .map(|&i| {
            let line: Value =
                serde_json::from_slice(&input.as_bytes()[batch.lines[i].clone()]).unwrap();
            line["id"].as_u64().unwrap() as usize
        })
        .collect();
    assert_eq!(kept_ids, indices(&cases["kept_resample_on_correct"]));
    let expected: String = input
        .lines()
        .enumerate()
        .filter(|(i, _)| sel.kept.contains(i))
        .map(|(_, l)| format!("{l}\n"))
        .collect();
    assert_eq!(
        batch.kept_bytes(input.as_bytes(), &sel),
        expected.into_bytes()
    );
}
