//! Known entropies give known groups and counts (numbers worked out by hand in the comments).

use rstar_analysis::entropy::{
    EntropyConfig, Group, Outcome, analyze, render_compare, render_table, token_views,
};
use rstar_episode::episode::{Role, StopReason, Trajectory, Turn};
use rstar_episode::template::TemplateFormat;

use super::common::{failed, solved};

const TOL: f64 = 1e-12;

fn cfg(top: f64, after_tool: usize) -> EntropyConfig {
    EntropyConfig {
        top,
        after_tool,
        ..EntropyConfig::paper()
    }
}

#[test]
fn groups_and_counts_match_the_hand_computation() {
    // 51 tokens; top 8%: k = ceil(4.08) = 5; the five largest are 3.0, 2.8, 2.5, 2.0, 0.5, so
    // the threshold is 0.5 and exactly those five are high.
    let r = analyze(&[solved(), failed()], &cfg(0.08, 2)).unwrap();
    assert_eq!(r.tokens, 51);
    assert_eq!(r.threshold, 0.5);
    assert_eq!(r.high_entropy_tokens, 5);
    // Group sizes: reasoning `ab` + 18 of turn 2 + 20 of trajectory 2 = 40; after the tool the
    // first 2 tokens (`H`, `m`); code `<c>xy</c>` = 9.
    // High: reasoning `a`, `z`; after tool `H`, `m`; code `x`.
    let expect = [
        (Group::Reasoning, 40, 2),
        (Group::AfterToolResponse, 2, 2),
        (Group::Code, 9, 1),
    ];
    for (g, tokens, high) in expect {
        let x = r.group(g);
        assert_eq!((x.tokens, x.high), (tokens, high), "{g:?}");
        assert!((x.share_of_tokens - high as f64 / 51.0).abs() < TOL);
        assert!((x.share_of_high - high as f64 / 5.0).abs() < TOL);
        assert!((x.high_rate - high as f64 / tokens as f64).abs() < TOL);
    }
    // Mean entropy: 46 tokens at 0.1 plus 3.0 + 2.8 + 2.5 + 2.0 + 0.5 = 10.8, over 51.
    assert!((r.mean_entropy - (46.0 * 0.1 + 10.8) / 51.0).abs() < 1e-6);

    // Success (trajectory 1): 31 tokens, high a, H, m, x.
    let s = r.outcome(Outcome::Success).unwrap();
    assert_eq!((s.trajectories, s.tokens, s.high), (1, 31, 4));
    let highs: Vec<usize> = s.groups.iter().map(|g| g.high).collect();
    assert_eq!(highs, [1, 2, 1]);
    assert!((s.groups[1].share_of_high - 0.5).abs() < TOL);
    // Failure (trajectory 2): 20 tokens, high z.
    let f = r.outcome(Outcome::Failure).unwrap();
    assert_eq!((f.trajectories, f.tokens, f.high), (1, 20, 1));
    let highs: Vec<usize> = f.groups.iter().map(|g| g.high).collect();
    assert_eq!(highs, [1, 0, 0]);
    assert!(r.outcome(Outcome::Unscored).is_none());

    // Frequent tokens, with their contexts.
    let after = &r.group(Group::AfterToolResponse).frequent;
    let tokens: Vec<(&str, usize)> = after.iter().map(|f| (f.token.as_str(), f.count)).collect();
    assert_eq!(tokens, [("H", 1), ("m", 1)]);
    assert_eq!(after[0].examples, ["«H»m<answer>1</answer>"]);
    assert!((after[0].mean_entropy - 2.8).abs() < 1e-6);
    assert_eq!(r.group(Group::Code).frequent[0].examples, ["ab<c>«x»y</c>"]);
}

#[test]
fn the_after_tool_window_moves_tokens_between_groups() {
    // Window 0: `H` and `m` are reasoning.
    let r = analyze(&[solved(), failed()], &cfg(0.08, 0)).unwrap();
    assert_eq!(
        (
            r.group(Group::Reasoning).tokens,
            r.group(Group::Reasoning).high
        ),
        (42, 4)
    );
    assert_eq!(r.group(Group::AfterToolResponse).tokens, 0);
    // Window 30: the whole second turn (20 tokens) follows the tool.
    let r = analyze(&[solved(), failed()], &cfg(0.08, 30)).unwrap();
    assert_eq!(r.group(Group::AfterToolResponse).tokens, 20);
    assert_eq!(r.group(Group::Reasoning).tokens, 22);
}

#[test]
fn ties_at_the_threshold_are_all_kept() {
    // top 10%: k = ceil(5.1) = 6; the sixth largest is 0.1, which all other 46 tokens share.
    let r = analyze(&[solved(), failed()], &cfg(0.1, 2)).unwrap();
    assert_eq!(r.threshold, 0.1);
    assert_eq!(r.high_entropy_tokens, 51);
}

#[test]
fn trajectories_without_entropies_are_left_out_and_none_is_an_error() {
    let mut plain = failed();
    plain.attach_token_stats(Vec::new(), Vec::new()).unwrap();
    plain.token_texts.clear();
    let r = analyze(&[solved(), plain.clone()], &cfg(0.08, 2)).unwrap();
    assert_eq!((r.trajectories, r.without_entropies, r.tokens), (2, 1, 31));
    let err = analyze(&[plain], &cfg(0.2, 2)).unwrap_err().to_string();
    assert!(
        err.contains("no trajectory has per-token `entropies`"),
        "{err}"
    );
    let err = analyze(&[solved()], &cfg(0.0, 2)).unwrap_err().to_string();
    assert!(err.contains("`top` must be in (0, 1]"), "{err}");
}

/// A ChatML turn whose tokens are several characters long, located through `token_texts`.
fn chatml(texts: &[&str], with_texts: bool) -> Trajectory {
    let text: String = texts.concat();
    let n = texts.len();
    let json = serde_json::json!({
        "template": "chat_ml", "prompt": "p", "response_ids": vec![7; n],
        "loss_mask": vec![1; n],
        "turns": [{"role": "assistant", "text": text, "start": 0, "len": n}],
        "tool_calls": [], "stop": "no_tool_call", "truncated": false,
    });
    let mut t: Trajectory = serde_json::from_value(json).unwrap();
    t.attach_token_stats(vec![1.0; n], Vec::new()).unwrap();
    if with_texts {
        t.attach_token_texts(texts.iter().map(|s| s.to_string()).collect())
            .unwrap();
    }
    t
}

#[test]
fn multi_character_tokens_are_placed_with_their_texts() {
    let t = chatml(&["Try ", "<tool_", "call>x</", "tool_call>", " done"], true);
    let groups: Vec<Group> = token_views(&t, 20)
        .unwrap()
        .iter()
        .map(|v| v.group)
        .collect();
    assert_eq!(
        groups,
        [
            Group::Reasoning,
            Group::Code,
            Group::Code,
            Group::Code,
            Group::Reasoning
        ]
    );
    // Without the texts the tokens cannot be placed: 33 characters for 5 tokens.
    let t = chatml(
        &["Try ", "<tool_", "call>x</", "tool_call>", " done"],
        false,
    );
    let err = token_views(&t, 20).unwrap_err().to_string();
    assert!(
        err.contains("`token_texts` is missing") && err.contains("33 characters for 5 tokens"),
        "{err}"
    );
}

#[test]
fn a_tool_turn_after_a_tool_turn_is_not_confused_for_assistant_text() {
    // The turn structure decides; a hand-built trajectory with the tool turn first is rejected
    // by validation only if its spans are wrong, so build one that is valid.
    let mut t = solved();
    t.turns.insert(
        0,
        Turn {
            role: Role::Tool,
            text: String::new(),
            start: 0,
            len: 0,
            weight_version: None,
        },
    );
    t.validate().unwrap();
    let views = token_views(&t, 1).unwrap();
    // The first assistant token now follows a (empty) tool turn.
    assert_eq!(views[0].group, Group::AfterToolResponse);
    assert_eq!(t.stop, StopReason::NoToolCall);
    assert_eq!(t.template, TemplateFormat::Compact);
}

#[test]
fn tables_name_every_group_and_both_files() {
    let r = analyze(&[solved(), failed()], &cfg(0.08, 2)).unwrap();
    let table = render_table(&r);
    for needle in [
        "reasoning",
        "after_tool_response",
        "code",
        "success",
        "failure",
        "`H`",
    ] {
        assert!(table.contains(needle), "{needle} missing from\n{table}");
    }
    let b = analyze(&[failed()], &cfg(0.08, 2)).unwrap();
    let cmp = render_compare("before.jsonl", &b, "after.jsonl", &r);
    assert!(
        cmp.contains("before.jsonl") && cmp.contains("after.jsonl"),
        "{cmp}"
    );
    let line = cmp
        .lines()
        .find(|l| l.starts_with("after_tool_response % of high"))
        .unwrap();
    // Before: no tool turns, 0%; after: 2 of 5 high tokens.
    assert!(line.contains("0.0%") && line.contains("40.0%"), "{line}");
}

proptest::proptest! {
    /// Whatever the entropies (with many ties), the groups partition the tokens and the
    /// high-entropy tokens, at least `ceil(top · n)` tokens are high, and the outcomes add up.
    #[test]
    fn groups_partition_tokens_and_high_tokens(
        levels in proptest::collection::vec(0u8..6, 51),
        top in 0.01f64..=1.0,
        after_tool in 0usize..30,
    ) {
        let e: Vec<f32> = levels.iter().map(|&l| f32::from(l) * 0.5).collect();
        let (mut a, mut b) = (solved(), failed());
        a.attach_token_stats(e[..31].to_vec(), Vec::new()).unwrap();
        b.attach_token_stats(e[31..].to_vec(), Vec::new()).unwrap();
        let r = analyze(&[a, b], &cfg(top, after_tool)).unwrap();
        let k = (top * 51.0 - 1e-9).ceil().max(1.0) as usize;
        let at_or_above = e.iter().filter(|&&x| x >= r.threshold).count();
        proptest::prop_assert_eq!(r.high_entropy_tokens, at_or_above);
        proptest::prop_assert!(r.high_entropy_tokens >= k);
        // The threshold is the k-th largest entropy.
        let mut sorted = e.clone();
        sorted.sort_by(|x, y| y.total_cmp(x));
        proptest::prop_assert_eq!(r.threshold, sorted[k - 1]);
        proptest::prop_assert_eq!(r.groups.iter().map(|g| g.tokens).sum::<usize>(), 51);
        proptest::prop_assert_eq!(r.groups.iter().map(|g| g.high).sum::<usize>(), r.high_entropy_tokens);
        let share: f64 = r.groups.iter().map(|g| g.share_of_high).sum();
        proptest::prop_assert!((share - 1.0).abs() < 1e-9);
        proptest::prop_assert_eq!(r.outcomes.iter().map(|o| o.high).sum::<usize>(), r.high_entropy_tokens);
        proptest::prop_assert_eq!(
            r.group(Group::AfterToolResponse).tokens,
            after_tool.min(20),
            "only turn 2 (20 tokens) follows a tool"
        );
    }
}
