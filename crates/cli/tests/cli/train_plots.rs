//! `rstar train plot RUN_DIR`: SVGs of a hand-written `metrics.jsonl`, one path per series,
//! stage boundaries at the right x.

use super::train::rstar;

/// Six steps: stages `short` (1–2), `long` (3–4), `hard` (5–6).
fn metrics() -> String {
    let mut s = String::new();
    let decisions = [
        "stay",
        "advance to `long`",
        "stay",
        "advance to `hard` (optimizer reset)",
        "stay",
        "finish",
    ];
    for (i, d) in decisions.iter().enumerate() {
        let step = i + 1;
        let stage = ["short", "long", "hard"][i / 2];
        s.push_str(&format!(
            r#"{{"step":{step},"stage":{},"stage_name":"{stage}","all":{{"accuracy":{},"tool_error_rate":0.5,"tool_error_rate_success":0.25,"response_len":100.0,"truncation_rate":0.0}},"kept":{{"accuracy":0.5,"tool_error_rate_success":0.2,"response_len":90.0}},"clip_frac":0.01,"entropy":1.5,"time_rollout":2.0,"time_tools":0.5,"time_update":1.0,"decision":"{d}"}}"#,
            i / 2,
            [0.0, 0.2, 0.4, 0.6, 0.8, 1.0][i]
        ));
        s.push('\n');
    }
    s
}

#[test]
fn plots_have_a_path_per_series_and_stage_lines_at_the_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("metrics.jsonl"), metrics()).unwrap();
    let (ok, stdout, stderr) = rstar(&["train", "plot", dir.path().to_str().unwrap()]);
    assert!(ok, "{stderr}");
    for name in [
        "reward",
        "tool_errors",
        "response_length",
        "truncation",
        "clip_fraction",
        "entropy",
        "step_time",
    ] {
        assert!(stdout.contains(&format!("{name}.svg")), "{stdout}");
    }
    let svg = std::fs::read_to_string(dir.path().join("plots/reward.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<svg").count(), 1);
    assert_eq!(svg.matches(r#"class="series""#).count(), 2, "{svg}");
    // x runs from 0.5 to 6.5 over pixels 56..984: the boundary after step 2 is at
    // 56 + 928 · 2 / 6 = 365.33, after step 4 at 56 + 928 · 4 / 6 = 674.67.
    assert_eq!(svg.matches(r#"class="vline""#).count(), 2, "{svg}");
    assert!(svg.contains(r#"data-x="2.5" x1="365.33""#), "{svg}");
    assert!(svg.contains(r#"data-x="4.5" x1="674.67""#), "{svg}");
    assert!(svg.contains("end of `short`") && svg.contains("end of `long`"));
    // Rewards 0, 0.2, … 1 on a y axis from 0 to 1 over pixels 296..40 (y = 296 − 256 r): step
    // 1 at (56 + 928 · 0.5 / 6, 296) = (133.33, 296), step 2 at (288, 244.8).
    assert!(svg.contains("M133.33,296.00 L288.00,244.80"), "{svg}");
    let time = std::fs::read_to_string(dir.path().join("plots/step_time.svg")).unwrap();
    assert_eq!(time.matches(r#"class="series""#).count(), 3);

    // A malformed line is named.
    std::fs::write(dir.path().join("metrics.jsonl"), "{}\n{oops\n").unwrap();
    let (ok, _, stderr) = rstar(&["train", "plot", dir.path().to_str().unwrap()]);
    assert!(!ok);
    assert!(stderr.contains("metrics.jsonl:2"), "{stderr}");
}
