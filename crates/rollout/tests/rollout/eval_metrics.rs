//! `EvalReport::from_trajectories` on hand-built trajectories, against numbers worked out by
//! hand in the comments.

use rstar_episode::episode::{ByteTokenizer, Episode, Limits, Score, Step, Trajectory};
use rstar_episode::template::Template;
use rstar_episode::toolcall::ToolOutcome;
use rstar_rollout::eval::{EvalReport, PassAtK, pass_at_k};

use super::common::outcome;

const RIGHT: &str = "<answer>\\boxed{7}</answer>"; // 26 bytes
const WRONG: &str = "<answer>\\boxed{8}</answer>"; // 26 bytes

/// A trajectory of problem `id` whose assistant turns are `turns` (tool calls answered by the
/// scripted tools), scored `reward`, under a response budget of `budget` tokens.
fn traj(id: &str, sample: u32, turns: &[&str], reward: f32, budget: usize) -> Trajectory {
    let tok = ByteTokenizer;
    let limits = Limits {
        max_response_tokens: budget,
        ..Limits::compact()
    };
    let mut ep = Episode::new(&tok, &Template::compact(), limits, "?")
        .with_id(id, sample)
        .with_ground_truth("7");
    for turn in turns {
        if let Step::CallTools(calls) = ep.push_assistant_text(turn).unwrap() {
            let outs: Vec<ToolOutcome> = calls.iter().map(|c| outcome(&c.code)).collect();
            ep.push_tool_outcomes(outs).unwrap();
        }
    }
    ep.finish_scored(|_| Score {
        answer: Some(if reward > 0.0 { "7" } else { "8" }.into()),
        reward,
    })
    .unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn metrics_match_hand_computation() {
    let ok = |id, s| traj(id, s, &[RIGHT], 1.0, 320);
    let no = |id, s| traj(id, s, &[WRONG], 0.0, 320);
    let ts = vec![
        // A: 1 of 4 right. A0 calls the tool (15 + 7 + 26 = 48 tokens), A1 times out
        // (23 + 13 + 26 = 62).
        traj("A", 0, &["<c>print(7)</c>", RIGHT], 1.0, 320),
        traj("A", 1, &["<c>while True: pass</c>", WRONG], 0.0, 320),
        no("A", 2),
        no("A", 3),
        // B: 3 of 4 right. B0 fails once then succeeds (12 + 41 + 15 + 7 + 26 = 101).
        traj(
            "B",
            0,
            &["<c>raise</c>", "<c>print(7)</c>", RIGHT],
            1.0,
            320,
        ),
        ok("B", 1),
        ok("B", 2),
        no("B", 3),
        // C: none right; C3 is cut at a 10-token budget.
        no("C", 0),
        no("C", 1),
        no("C", 2),
        traj("C", 3, &[WRONG], 0.0, 10),
    ];
    assert_eq!(ts[0].response_ids.len(), 48);
    assert_eq!(ts[1].response_ids.len(), 62);
    assert_eq!(ts[4].response_ids.len(), 101);
    assert!(ts[11].truncated);
    let r = EvalReport::from_trajectories(&ts).unwrap();
    let s = &r.summary;
    assert_eq!((s.problems, s.trajectories, s.samples), (3, 12, 4));
    // avg@4 = (1/4 + 3/4 + 0) / 3.
    assert!(close(s.avg_at_k, 1.0 / 3.0), "{}", s.avg_at_k);
    // pass@2: A 1 − C(3,2)/C(4,2) = 1/2, B 1 − C(1,2)/C(4,2) = 1, C 0 → 1/2.
    // pass@4: A 1, B 1, C 0 → 2/3.
    let ks: Vec<usize> = s.pass_at_k.iter().map(|p| p.k).collect();
    assert_eq!(ks, [1, 2, 4]);
    assert!(close(s.pass_at_k[0].value, 1.0 / 3.0));
    assert!(close(s.pass_at_k[1].value, 0.5));
    assert!(close(s.pass_at_k[2].value, 2.0 / 3.0));
    // Lengths: A 48+62+26+26 = 162, B 101+26·3 = 179, C 26·3+10 = 88; 429 in all.
    assert!(close(s.mean_response_tokens, 429.0 / 12.0));
    // Tool tokens: 7 (A0) + 13 (A1) + 41 + 7 (B0) = 68.
    assert!(close(s.mean_assistant_tokens, (429.0 - 68.0) / 12.0));
    // Calls: A0 1, A1 1, B0 2 = 4; errors: the timeout and the exception.
    assert!(close(s.tool_calls_per_problem, 4.0 / 3.0));
    assert!(close(s.tool_calls_per_sample, 4.0 / 12.0));
    assert!(close(s.tool_error_rate, 0.5));
    assert!(close(s.truncation_rate, 1.0 / 12.0));
    assert_eq!(s.stop_reasons["no_tool_call"], 11);
    assert_eq!(s.stop_reasons["token_budget"], 1);

    let ids: Vec<&str> = r.problems.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["A", "B", "C"]);
    let a = &r.problems[0];
    assert_eq!(
        (
            a.samples,
            a.correct,
            a.tool_calls,
            a.tool_errors,
            a.truncated
        ),
        (4, 1, 2, 1, 0)
    );
    assert!(close(a.avg, 0.25) && close(a.mean_response_tokens, 40.5));
    assert_eq!(a.answer.as_deref(), Some("7"));
    assert_eq!(
        a.extracted,
        [
            Some("7".into()),
            Some("8".into()),
            Some("8".into()),
            Some("8".into())
        ]
    );
    let b = &r.problems[1];
    assert_eq!((b.correct, b.tool_calls, b.tool_errors), (3, 2, 1));
    assert!(close(b.mean_response_tokens, 44.75));
    let c = &r.problems[2];
    assert_eq!((c.correct, c.truncated), (0, 1));
    assert!(close(c.mean_response_tokens, 22.0));

    // The table shows the headline numbers.
    let table = r.table();
    assert!(
        table.contains("avg@4") && table.contains("0.3333"),
        "{table}"
    );
    assert!(
        table.contains("pass@2") && table.contains("0.5000"),
        "{table}"
    );
    // avg@4 = 1/3 over 3 problems: Wilson's 95% interval (statsmodels' `proportion_confint`
    // gives the same).
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("avg@4 95% interval") && l.ends_with(" [0.0615, 0.7923]")),
        "{table}"
    );
}

#[test]
fn pass_at_k_for_five_samples_two_right() {
    // n=5, c=2: pass@1 = 2/5; pass@2 = 1 − C(3,2)/C(5,2) = 1 − 3/10; pass@4 and pass@5 = 1
    // (only 3 wrong samples).
    let ts: Vec<Trajectory> = (0..5)
        .map(|s| {
            traj(
                "P",
                s,
                &[if s < 2 { RIGHT } else { WRONG }],
                if s < 2 { 1.0 } else { 0.0 },
                320,
            )
        })
        .collect();
    let r = EvalReport::from_trajectories(&ts).unwrap();
    let want = [(1, 0.4), (2, 0.7), (4, 1.0), (5, 1.0)];
    assert_eq!(r.summary.pass_at_k.len(), want.len());
    for (PassAtK { k, value }, (wk, wv)) in r.summary.pass_at_k.iter().zip(want) {
        assert_eq!(*k, wk);
        assert!(close(*value, wv), "pass@{k} = {value}, want {wv}");
    }
    // n=6, c=1, k=3: 1 − C(5,3)/C(6,3) = 1 − 10/20.
    assert!(close(pass_at_k(6, 1, 3), 0.5));
    // n=8, c=2, k=4: 1 − C(6,4)/C(8,4) = 1 − 15/70.
    assert!(close(pass_at_k(8, 2, 4), 55.0 / 70.0));
}

#[test]
fn samples_are_grouped_by_id_in_first_seen_order() {
    let ts = vec![
        traj("Z", 1, &[WRONG], 0.0, 320),
        traj("Y", 0, &[RIGHT], 1.0, 320),
        traj("Z", 0, &[RIGHT], 1.0, 320),
    ];
    let r = EvalReport::from_trajectories(&ts).unwrap();
    assert_eq!(r.problems[0].id, "Z");
    assert_eq!(
        r.problems[0].extracted,
        [Some("7".into()), Some("8".into())],
        "sorted by sample"
    );
    assert_eq!(r.summary.samples, 1, "the smallest group");
    let mut bad = ts[0].clone();
    bad.id.clear();
    let err = EvalReport::from_trajectories(&[bad]).unwrap_err();
    assert!(err.to_string().contains("`id`"), "{err}");
}
