//! End-to-end tests of `rstar analyze entropy`: table, JSON, SVG plot, `--compare`, and bad files.

use std::path::{Path, PathBuf};

use rstar_agent::episode::{ByteTokenizer, Episode, Limits, Score, TokenStats, Trajectory};
use rstar_agent::template::Template;
use rstar_agent::toolcall::ToolOutcome;

fn stats(text: &str, high: &[(usize, f32)]) -> TokenStats {
    let mut entropies = vec![0.1; text.len()];
    for &(i, e) in high {
        entropies[i] = e;
    }
    TokenStats {
        logprobs: vec![-0.5; text.len()],
        entropies,
    }
}

fn ids(text: &str) -> Vec<u32> {
    text.bytes().map(u32::from).collect()
}

/// A rollout of byte tokens: `turns[0]`, then for each later turn a tool response and that
/// turn; `high` lists `(turn, byte, entropy)`; every other entropy is 0.1.
fn rollout(turns: &[&str], high: &[(usize, usize, f32)], reward: f32) -> Trajectory {
    let tok = ByteTokenizer;
    let mut ep = Episode::new(&tok, &Template::compact(), Limits::compact(), "q").with_id("p", 0);
    for (k, text) in turns.iter().enumerate() {
        if k > 0 {
            ep.push_tool_outcomes(vec![ToolOutcome::code_judge(true, "", "1\n", "", 0.0)])
                .unwrap();
        }
        let h: Vec<(usize, f32)> = high
            .iter()
            .filter(|(t, _, _)| *t == k)
            .map(|&(_, i, e)| (i, e))
            .collect();
        ep.push_assistant_sampled(&ids(text), stats(text, &h))
            .unwrap();
    }
    ep.finish_scored(|_| Score {
        answer: None,
        reward,
    })
    .unwrap()
}

/// "After RL": 31 + 20 tokens; high (top 8%, threshold 0.5): reasoning `a`, `z`; after the tool
/// `H`, `m`; code `x` (the same numbers as tests/analysis/entropy.rs, worked out there).
fn after() -> Vec<Trajectory> {
    vec![
        rollout(
            &["ab<c>xy</c>", "Hm<answer>1</answer>"],
            &[(0, 0, 3.0), (0, 5, 2.5), (1, 0, 2.8), (1, 1, 0.5)],
            1.0,
        ),
        rollout(&["zz<answer>2</answer>"], &[(0, 0, 2.0)], 0.0),
    ]
}

/// "Before RL": 31 + 22 tokens, the reaction to the tool is certain; high (top 8% of 53:
/// k = ceil(4.24) = 5; 3.0, 2.5, 2.0, 1.0, 0.9): reasoning `a`, `z`, `q` and `r`; code `x`;
/// none after the tool.
fn before() -> Vec<Trajectory> {
    vec![
        rollout(
            &["ab<c>xy</c>", "Hm<answer>1</answer>"],
            &[(0, 0, 3.0), (0, 5, 2.5)],
            1.0,
        ),
        rollout(
            &["zzqr<answer>2</answer>"],
            &[(0, 0, 2.0), (0, 2, 1.0), (0, 3, 0.9)],
            0.0,
        ),
    ]
}

fn write(dir: &Path, name: &str, trajs: &[Trajectory]) -> PathBuf {
    let path = dir.join(name);
    Trajectory::write_jsonl(&path, trajs).unwrap();
    path
}

use super::common::rstar;

fn row<'a>(out: &'a str, label: &str) -> Vec<&'a str> {
    out.lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no `{label}` row in\n{out}"))[label.len()..]
        .split_whitespace()
        .collect()
}

#[test]
fn the_table_reports_each_group() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "after.jsonl", &after());
    let (code, out, err) = rstar(&[
        "analyze",
        "entropy",
        f.to_str().unwrap(),
        "--top",
        "0.08",
        "--after-tool",
        "2",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("2 trajectories (0 without entropies, left out), 51 assistant tokens"),
        "{out}"
    );
    assert!(
        out.contains("5 high-entropy tokens (entropy >= 0.5000)"),
        "{out}"
    );
    // tokens, high, %all tokens, %high, high rate.
    assert_eq!(
        row(&out, "reasoning "),
        ["40", "2", "3.9%", "40.0%", "5.0%"]
    );
    assert_eq!(
        row(&out, "after_tool_response "),
        ["2", "2", "3.9%", "40.0%", "100.0%"]
    );
    assert_eq!(row(&out, "code "), ["9", "1", "2.0%", "20.0%", "11.1%"]);
    assert_eq!(
        row(&out, "success "),
        [
            "1", "31", "4", "1", "(25.0%)", "2", "(50.0%)", "1", "(25.0%)"
        ]
    );
    assert_eq!(
        row(&out, "failure "),
        [
            "1", "20", "1", "1", "(100.0%)", "0", "(0.0%)", "0", "(0.0%)"
        ]
    );
    assert!(out.contains("«H»m<answer>1</answer>"), "{out}");
}

#[test]
fn json_output_parses_and_carries_the_counts() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "after.jsonl", &after());
    let (code, out, err) = rstar(&[
        "analyze",
        "entropy",
        f.to_str().unwrap(),
        "--top",
        "0.08",
        "--after-tool",
        "2",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["high_entropy_tokens"], 5);
    assert_eq!(v["threshold"], 0.5);
    let groups: Vec<(&str, u64)> = v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["group"].as_str().unwrap(), g["high"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        groups,
        [("reasoning", 2), ("after_tool_response", 2), ("code", 1)]
    );
    assert_eq!(v["outcomes"][0]["outcome"], "success");
    assert_eq!(v["groups"][1]["frequent"][0]["token"], "H");
}

#[test]
fn the_plot_shades_tool_responses_and_marks_high_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "after.jsonl", &after());
    let svg = dir.path().join("t.svg");
    let (code, _, err) = rstar(&[
        "analyze",
        "entropy",
        f.to_str().unwrap(),
        "--top",
        "0.08",
        "--after-tool",
        "2",
        "--plot",
        svg.to_str().unwrap(),
        "--trajectory",
        "0",
    ]);
    assert_eq!(code, 0, "{err}");
    let svg = std::fs::read_to_string(svg).unwrap();
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.trim_end().ends_with("</svg>"));
    // One tool response, one tool call band; four high tokens of trajectory 0 (a, x, H, m).
    assert_eq!(svg.matches("<title>tool response</title>").count(), 1);
    assert_eq!(svg.matches("<title>tool call</title>").count(), 1);
    assert_eq!(
        svg.matches("<circle cx=").count() - 1,
        4,
        "the legend has one circle"
    );
    assert!(
        svg.contains("<title>H (after_tool_response) 2.800</title>"),
        "{svg}"
    );
    // Out of range and a trajectory without entropies fail clearly.
    let (code, _, err) = rstar(&[
        "analyze",
        "entropy",
        f.to_str().unwrap(),
        "--plot",
        "x.svg",
        "--trajectory",
        "5",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("--trajectory 5 is out of range"), "{err}");
}

#[test]
fn compare_puts_both_checkpoints_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "before.jsonl", &before());
    let b = write(dir.path(), "after.jsonl", &after());
    let (code, out, err) = rstar(&[
        "analyze",
        "entropy",
        "--compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--top",
        "0.08",
        "--after-tool",
        "2",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("before.jsonl") && out.contains("after.jsonl"),
        "{out}"
    );
    assert_eq!(row(&out, "after_tool_response high"), ["0", "2"]);
    assert_eq!(
        row(&out, "after_tool_response % of high"),
        ["0.0%", "40.0%"]
    );
    assert_eq!(row(&out, "reasoning high"), ["4", "2"]);
    assert_eq!(row(&out, "code high"), ["1", "1"]);
    let (code, out, _) = rstar(&[
        "analyze",
        "entropy",
        "--compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["a"]["file"].as_str().unwrap().ends_with("before.jsonl"));
    assert!(v["b"]["report"]["groups"].is_array());
}

#[test]
fn bad_files_name_the_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let good = after();
    let text = format!("{}\n{}\n", good[0].to_json_line(), good[1].to_json_line());
    let cut = dir.path().join("cut.jsonl");
    std::fs::write(&cut, &text[..text.len() - 25]).unwrap();
    let (code, _, err) = rstar(&["analyze", "entropy", cut.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("cut.jsonl:2: truncated line"), "{err}");

    let mut v: serde_json::Value = serde_json::from_str(&good[1].to_json_line()).unwrap();
    v["entropies"].as_array_mut().unwrap().push(1.0.into());
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, format!("{}\n\n{v}\n", good[0].to_json_line())).unwrap();
    let (code, _, err) = rstar(&["analyze", "entropy", bad.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        err.contains(
            "bad.jsonl:3: invalid trajectory: `entropies` has 21 entries for 20 assistant tokens"
        ),
        "{err}"
    );

    let mut plain = good[1].clone();
    plain.attach_token_stats(Vec::new(), Vec::new()).unwrap();
    let none = write(dir.path(), "none.jsonl", &[plain]);
    let (code, _, err) = rstar(&["analyze", "entropy", none.to_str().unwrap()]);
    assert_eq!(code, 1);
    // Issue 70: the refusal says which commands record them.
    assert!(
        err.contains("no trajectory has per-token `entropies`")
            && err.contains("rstar train … --record-entropy"),
        "{err}"
    );

    let (code, _, err) = rstar(&["analyze", "entropy"]);
    assert_eq!(code, 2, "{err}");
}
