//! The optional per-token fields of `Trajectory`: attaching, validating, recording through the episode, and old files.

use rstar_episode::Error as EpisodeError;
use rstar_episode::episode::{
    ByteTokenizer, Episode, Limits, Step, StopReason, TokenStats, Trajectory,
};
use rstar_episode::template::Template;

use super::common::{failed, solved, stats};

#[test]
fn recorded_stats_follow_the_assistant_tokens_only() {
    let t = solved();
    // 11 + 20 assistant tokens; the tool turn in between carries no entropy.
    assert_eq!(t.assistant_token_count(), 31);
    assert_eq!(t.entropies.len(), 31);
    assert_eq!(t.token_logprobs.len(), 31);
    assert_eq!(t.token_texts.concat(), t.assistant_text());
    assert_eq!(t.entropies[0], 3.0);
    assert_eq!(t.entropies[11], 2.8); // the first token of turn 2
    assert_eq!(t.token_logprobs[11], -1.4);
    t.validate().unwrap();
}

#[test]
fn attaching_checks_lengths_and_changes_nothing_on_error() {
    let mut t = failed();
    let before = t.clone();
    let err = t.attach_token_stats(vec![0.5; 3], Vec::new()).unwrap_err();
    assert!(matches!(err, EpisodeError::Trajectory(_)));
    assert_eq!(
        err.to_string(),
        "invalid trajectory: `entropies` has 3 entries for 20 assistant tokens"
    );
    let err = t
        .attach_token_stats(vec![0.5; 20], vec![0.0; 21])
        .unwrap_err();
    assert!(
        err.to_string().contains("`token_logprobs` has 21 entries"),
        "{err}"
    );
    assert!(t.attach_token_texts(vec!["x".into()]).is_err());
    assert_eq!(t, before);
    t.attach_token_stats(vec![0.5; 20], Vec::new()).unwrap();
    assert_eq!(t.entropies, vec![0.5; 20]);
    assert!(t.token_logprobs.is_empty());
}

#[test]
fn validation_names_the_field() {
    let check = |t: Trajectory, needle: &str| {
        let err = t.validate().unwrap_err().to_string();
        assert!(err.contains(needle), "{err} should mention {needle}");
    };
    let mut t = solved();
    t.loss_mask.pop();
    // 11 + 7 (the tool turn `\nO:1\nA:`) + 20 = 38 response tokens.
    check(t, "`loss_mask` has 37 entries for 38 response tokens");
    let mut t = solved();
    t.turns[1].start += 1;
    check(t, "`turns[1]`");
    let mut t = solved();
    t.loss_mask[12] = 1; // inside the tool turn
    check(t, "`loss_mask` disagrees with the role of `turns[1]`");
    let mut t = solved();
    t.entropies[4] = -1.0;
    check(t, "`entropies[4]` is -1");
    let mut t = solved();
    t.token_texts.pop();
    check(t, "`token_texts` has 30 entries for 31");
}

#[test]
fn files_without_the_fields_load_and_stay_small() {
    let mut t = failed();
    t.attach_token_stats(Vec::new(), Vec::new()).unwrap();
    t.attach_token_texts(Vec::new()).unwrap();
    let line = t.to_json_line();
    for field in ["entropies", "token_logprobs", "token_texts"] {
        assert!(!line.contains(field), "{field} written while empty");
    }
    assert_eq!(Trajectory::from_json_line(&line).unwrap(), t);
    let full = solved();
    assert_eq!(
        Trajectory::from_json_line(&full.to_json_line()).unwrap(),
        full
    );
}

#[test]
fn sampled_stats_are_cut_with_the_ids_at_the_budget() {
    let tok = ByteTokenizer;
    let limits = Limits {
        max_response_tokens: 6,
        ..Limits::compact()
    };
    let mut ep = Episode::new(&tok, &Template::compact(), limits, "q");
    let text = "abcdefghij";
    let ids: Vec<u32> = text.bytes().map(u32::from).collect();
    let step = ep
        .push_assistant_sampled(&ids, stats(text, &[(5, 1.5), (6, 9.0)]))
        .unwrap();
    assert_eq!(step, Step::Done(StopReason::TokenBudget));
    let t = ep.finish().unwrap();
    assert_eq!(t.entropies, [0.1, 0.1, 0.1, 0.1, 0.1, 1.5]);
    assert_eq!(t.token_texts.concat(), "abcdef");
    t.validate().unwrap();
}

#[test]
fn mixing_turns_with_and_without_stats_is_refused() {
    let tok = ByteTokenizer;
    let ids = |s: &str| s.bytes().map(u32::from).collect::<Vec<u32>>();
    let mut ep = Episode::new(&tok, &Template::compact(), Limits::compact(), "q");
    ep.push_assistant_ids(&ids("<c>1</c>")).unwrap();
    ep.push_tool_outcomes(vec![rstar_episode::toolcall::ToolOutcome::code_judge(
        true, "", "1\n", "", 0.0,
    )])
    .unwrap();
    let err = ep
        .push_assistant_sampled(&ids("ok"), stats("ok", &[]))
        .unwrap_err();
    assert!(matches!(err, EpisodeError::EpisodeState(_)), "{err}");

    let mut ep = Episode::new(&tok, &Template::compact(), Limits::compact(), "q");
    let wrong = TokenStats {
        entropies: vec![0.0; 1],
        logprobs: vec![0.0; 2],
    };
    let err = ep.push_assistant_sampled(&ids("ok"), wrong).unwrap_err();
    assert!(
        err.to_string()
            .contains("`entropies` has 1 entries for 2 sampled ids"),
        "{err}"
    );
    ep.push_assistant_sampled(&ids("<c>1</c>"), stats("<c>1</c>", &[]))
        .unwrap();
    ep.push_tool_outcomes(vec![rstar_episode::toolcall::ToolOutcome::code_judge(
        true, "", "1\n", "", 0.0,
    )])
    .unwrap();
    assert!(matches!(
        ep.push_assistant_ids(&ids("ok")),
        Err(EpisodeError::EpisodeState(_))
    ));
}
