//! The scheduled loop through every termination rule, with masks checked token by token
//! against lengths counted by hand from the scripted text.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rstar_episode::episode::{ByteTokenizer, Role, StopReason, Trajectory};
use rstar_episode::template::TemplateFormat;
use rstar_episode::toolcall::OutcomeKind;
use rstar_rollout::Prompt;
use rstar_rollout::scheduled::{ScheduleConfig, run_scheduled_blocking};

use rstar_engine::TurnGenerator;

use super::common::{Script, ScriptGen, generators, tools};

/// Runs one rollout of `problem` whose turn `t` is `turns[t]`; returns the trajectory and how
/// many times the generator and the tools were called.
fn one(turns: &[&str], config: &ScheduleConfig) -> (Trajectory, usize, usize) {
    let owned: Vec<String> = turns.iter().map(|s| s.to_string()).collect();
    let script: Script = Arc::new(move |_, turn| owned.get(turn as usize).cloned());
    let (gens, gen_calls) = generators(&script, 1);
    let tool_calls = Arc::new(AtomicUsize::new(0));
    let prompts = [Prompt::new("p", "What is 6*7?", "42")];
    let out = run_scheduled_blocking(
        gens,
        ByteTokenizer,
        tools(Arc::clone(&tool_calls)),
        &prompts,
        1,
        config,
    )
    .unwrap();
    let t = out.rollout.trajectories.into_iter().next().unwrap();
    t.validate().unwrap();
    (
        t,
        gen_calls.load(Ordering::SeqCst),
        tool_calls.load(Ordering::SeqCst),
    )
}

/// The expected mask: `spans` of (length, assistant?) in order.
fn mask(spans: &[(usize, bool)]) -> Vec<u8> {
    spans
        .iter()
        .flat_map(|&(n, a)| std::iter::repeat_n(u8::from(a), n))
        .collect()
}

#[test]
fn no_tool_call_ends_after_one_turn() {
    let turn = "Easy.<answer>\\boxed{42}</answer>";
    let (t, gens, calls) = one(&[turn], &ScheduleConfig::compact(0));
    assert_eq!(t.stop, StopReason::NoToolCall);
    assert!(!t.truncated);
    assert_eq!((gens, calls), (1, 0));
    assert_eq!(
        t.response_ids,
        turn.bytes().map(u32::from).collect::<Vec<_>>()
    );
    assert_eq!(t.loss_mask, vec![1u8; 32]);
    assert_eq!(t.reward, Some(1.0));
    assert_eq!(t.answer.as_deref(), Some("42"));
    assert_eq!(t.prompt, "Q:What is 6*7?\nA:");
}

#[test]
fn tool_turn_is_masked_out_token_by_token() {
    // "Multiply.<c>print(42)</c>" is 25 bytes, the tool turn "\nO:42\nA:" 8,
    // "<answer>\boxed{42}</answer>" 27.
    let turns = ["Multiply.<c>print(42)</c>", "<answer>\\boxed{42}</answer>"];
    let (t, gens, calls) = one(&turns, &ScheduleConfig::compact(0));
    assert_eq!(t.stop, StopReason::NoToolCall);
    assert_eq!((gens, calls), (2, 1));
    assert_eq!(
        t.response_text(),
        "Multiply.<c>print(42)</c>\nO:42\nA:<answer>\\boxed{42}</answer>"
    );
    assert_eq!(t.loss_mask, mask(&[(25, true), (8, false), (27, true)]));
    let roles: Vec<(Role, usize, usize)> =
        t.turns.iter().map(|u| (u.role, u.start, u.len)).collect();
    assert_eq!(
        roles,
        [
            (Role::Assistant, 0, 25),
            (Role::Tool, 25, 8),
            (Role::Assistant, 33, 27)
        ]
    );
    assert_eq!(t.tool_calls.len(), 1);
    assert_eq!(t.tool_calls[0].outcome.kind, OutcomeKind::Output);
    assert_eq!(t.reward, Some(1.0));
}

#[test]
fn max_turns_stops_on_the_last_allowed_turn() {
    let mut config = ScheduleConfig::compact(0);
    config.limits.max_assistant_turns = 2;
    // Every turn calls the tool: "<c>print(1)</c>" is 15 bytes, "\nO:1\nA:" 7.
    let turns = ["<c>print(1)</c>", "<c>print(1)</c>", "<c>print(1)</c>"];
    let (t, gens, calls) = one(&turns, &config);
    assert_eq!(t.stop, StopReason::MaxTurns);
    assert!(!t.truncated);
    assert_eq!((gens, calls), (2, 1), "the second call never runs");
    assert_eq!(t.loss_mask, mask(&[(15, true), (7, false), (15, true)]));
    assert_eq!(t.tool_calls.len(), 1);
    assert_eq!(t.reward, Some(0.0));
}

#[test]
fn token_budget_cuts_a_first_turn() {
    let mut config = ScheduleConfig::compact(0);
    config.limits.max_response_tokens = 20;
    let turn = "Let me think about this for a long while.";
    let (t, gens, _) = one(&[turn], &config);
    assert_eq!(t.stop, StopReason::TokenBudget);
    assert!(t.truncated);
    assert_eq!(gens, 1);
    assert_eq!(t.response_text(), &turn[..20]);
    assert_eq!(t.loss_mask, vec![1u8; 20]);
}

#[test]
fn truncated_last_turn_after_a_tool_call() {
    let mut config = ScheduleConfig::compact(0);
    config.limits.max_response_tokens = 40;
    // 15 + 7 = 22 tokens, then 18 of the 44-byte last turn fit.
    let last = "Now the answer is <answer>\\boxed{1}</answer>";
    let turns = ["<c>print(1)</c>", last];
    let (t, gens, calls) = one(&turns, &config);
    assert_eq!(t.stop, StopReason::TokenBudget);
    assert!(t.truncated);
    assert_eq!((gens, calls), (2, 1));
    assert_eq!(t.loss_mask, mask(&[(15, true), (7, false), (18, true)]));
    assert_eq!(t.turns[2].text, &last[..18]);
    assert_eq!(t.reward, Some(0.0));
}

#[test]
fn tool_response_that_would_not_fit_ends_the_rollout() {
    let mut config = ScheduleConfig::compact(0);
    config.limits.max_response_tokens = 100;
    // The call is 74 tokens; the tool prints 60 characters: "\nO:" + 60 + "\nA:" = 66 more
    // would pass 100.
    let code = format!("<c>print({})</c>", "7".repeat(60));
    let turns = [code.as_str(), "<answer>\\boxed{42}</answer>"];
    let (t, gens, calls) = one(&turns, &config);
    assert_eq!(t.stop, StopReason::ToolResponseTooLong);
    assert!(t.truncated);
    // The generator wrote one turn; the done episode answered the dispatcher's next turn itself.
    assert_eq!((gens, calls), (1, 1));
    assert_eq!(t.response_text(), code);
    assert_eq!(t.loss_mask, vec![1u8; code.len()]);
    assert_eq!(t.tool_calls.len(), 1, "the call ran and is recorded");
}

#[test]
fn malformed_chatml_call_is_answered_without_running() {
    let mut config = ScheduleConfig::compact(0);
    config.template = TemplateFormat::ChatMl;
    config.limits.max_response_tokens = 4096;
    let first = "Let me compute.</reason>\n<tool_call>\n{\"name\": \"python_code_with_standard_io\", \"arguments\": {\"code\": \"print(42)\"\n</tool_call><|im_end|>";
    let second = "Fine.</reason>\n<answer>\nThe answer is \\boxed{42}.\n</answer><|im_end|>";
    let (t, gens, calls) = one(&[first, second], &config);
    assert_eq!(t.stop, StopReason::NoToolCall);
    assert_eq!(calls, 0, "a malformed call never reaches the tools");
    assert_eq!(gens, 2);
    assert_eq!(t.tool_calls.len(), 1);
    let record = &t.tool_calls[0];
    assert!(record.call.is_none() && record.failure.is_some());
    assert_eq!(record.outcome.kind, OutcomeKind::ParseFailure);
    assert!(
        record
            .outcome
            .text
            .starts_with("Failed to decode tool call: "),
        "{}",
        record.outcome.text
    );
    assert_eq!(t.turns[1].role, Role::Tool);
    let tool = &t.turns[1].text;
    assert!(
        tool.starts_with("<|im_start|>user\n<tool_response>\nFailed to decode tool call: "),
        "{tool}"
    );
    assert!(tool.ends_with("</tool_response><|im_end|>\n<|im_start|>assistant\n<reason>"));
    let (a, b) = (first.len(), tool.len());
    assert_eq!(
        t.loss_mask,
        mask(&[(a, true), (b, false), (second.len(), true)])
    );
    assert_eq!(t.reward, Some(1.0));
    assert_eq!(t.tool_errors(), 1);
}

#[test]
fn malformed_compact_call_is_answered_too() {
    // An unterminated <c>: "\nO:Failed to decode tool call: unterminated <c> tag\nA:" follows.
    let turns = ["<c>print(1)</answer>", "<answer>\\boxed{42}</answer>"];
    let (t, gens, calls) = one(&turns, &ScheduleConfig::compact(0));
    assert_eq!((gens, calls), (2, 0));
    assert_eq!(
        t.turns[1].text,
        "\nO:Failed to decode tool call: unterminated <c> tag\nA:"
    );
    assert_eq!(t.loss_mask, mask(&[(20, true), (54, false), (27, true)]));
}

#[test]
fn tool_timeout_and_error_are_tool_errors() {
    let turns = [
        "<c>while True: pass</c>",
        "<c>raise</c>",
        "<answer>\\boxed{42}</answer>",
    ];
    let (t, gens, calls) = one(&turns, &ScheduleConfig::compact(0));
    assert_eq!((gens, calls), (3, 2));
    assert_eq!(t.stop, StopReason::NoToolCall);
    assert_eq!(t.turns[1].text, "\nO:timeout\nA:");
    assert_eq!(
        t.turns[3].text,
        "\nO:ZeroDivisionError: division by zero\nA:"
    );
    let kinds: Vec<OutcomeKind> = t.tool_calls.iter().map(|c| c.outcome.kind).collect();
    assert_eq!(kinds, [OutcomeKind::Timeout, OutcomeKind::Error]);
    assert_eq!(t.tool_errors(), 2);
    // 23 + 13 + 12 + 41 + 27
    assert_eq!(
        t.loss_mask,
        mask(&[(23, true), (13, false), (12, true), (41, false), (27, true)])
    );
}

#[test]
fn entropies_are_kept_only_when_asked() {
    let turns = ["<c>print(42)</c>", "<answer>\\boxed{42}</answer>"];
    let (t, _, _) = one(&turns, &ScheduleConfig::compact(0));
    assert!(t.entropies.is_empty() && t.token_logprobs.is_empty() && t.token_texts.is_empty());
    let mut config = ScheduleConfig::compact(0);
    config.record_entropy = true;
    let (t, _, _) = one(&turns, &config);
    // One entry per assistant token: 16 + 27.
    assert_eq!(t.entropies, vec![0.5; 43]);
    assert_eq!(t.token_logprobs, vec![-0.25; 43]);
    assert_eq!(
        t.token_texts.concat(),
        "<c>print(42)</c><answer>\\boxed{42}</answer>"
    );
    // An empty last turn (the context is full: truncated) keeps the statistics of the earlier
    // ones (15 assistant tokens).
    let (t, gens, _) = one(&["<c>print(1)</c>"], &config);
    assert_eq!((t.stop, gens), (StopReason::TokenBudget, 2));
    assert_eq!(t.entropies, vec![0.5; 15]);
}

#[test]
fn the_generator_sees_context_budget_and_seed() {
    let script: Script = Arc::new(|_, turn| match turn {
        0 => Some("<c>print(1)</c>".into()),
        _ => Some("<answer>\\boxed{1}</answer>".into()),
    });
    let mut g = super::common::ScriptGen::new(script);
    g.kv = 1 << 20;
    let seen = Arc::clone(&g.seen);
    let prompts = [Prompt::new("p", "1?", "1")];
    let mut config = ScheduleConfig::compact(5);
    config.limits.max_response_tokens = 100;
    run_scheduled_blocking(
        vec![Arc::new(g)],
        ByteTokenizer,
        tools(Arc::new(AtomicUsize::new(0))),
        &prompts,
        1,
        &config,
    )
    .unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].context, b"Q:1?\nA:".map(u32::from).to_vec());
    assert_eq!(seen[0].max_new_tokens, 100);
    let second = b"Q:1?\nA:<c>print(1)</c>\nO:1\nA:".map(u32::from).to_vec();
    assert_eq!(seen[1].context, second);
    assert_eq!(seen[1].max_new_tokens, 100 - 22);
    assert_eq!((seen[0].turn, seen[1].turn), (0, 1));
    assert_ne!(seen[0].seed, seen[1].seed);
}

#[test]
fn an_empty_turn_means_the_context_is_full_and_truncates() {
    // A generator writes nothing only when the context fills the model (LocalEngine and
    // RemoteEngine both answer so): the rollout ends truncated, not as "no tool call".
    let first = "<c>print(6*7)</c>";
    let (t, gens, calls) = one(&[first], &ScheduleConfig::compact(0));
    assert_eq!(t.stop, StopReason::TokenBudget);
    assert!(t.truncated);
    assert_eq!((gens, calls), (2, 1));
    assert_eq!(t.reward, Some(0.0));
    // The first turn and its tool response are kept; nothing was added after them.
    assert_eq!(t.loss_mask.iter().filter(|&&m| m == 1).count(), first.len());
}

#[test]
fn engine_logprobs_and_versions_cover_the_kept_assistant_tokens() {
    // A last turn cut by the budget, and a malformed call the episode answers itself: the
    // generator's log-probs (the script reports -0.25 a token) line up with exactly the
    // assistant tokens the trajectory kept, and every turn's version is recorded.
    let mut cut = ScheduleConfig::compact(0);
    cut.limits.max_response_tokens = 40;
    let cases = [
        (
            vec![
                "<c>print(1)</c>",
                "Now the answer is <answer>\\boxed{1}</answer>",
            ],
            cut,
            15 + 18,
        ),
        (
            vec!["<c>print(1)</answer>", "<answer>\\boxed{42}</answer>"],
            ScheduleConfig::compact(0),
            20 + 27,
        ),
    ];
    for (turns, config, assistant) in cases {
        let owned: Vec<String> = turns.iter().map(|s| s.to_string()).collect();
        let script: Script = Arc::new(move |_, turn| owned.get(turn as usize).cloned());
        let (gens, _) = generators(&script, 1);
        let prompts = [Prompt::new("p", "What is 6*7?", "42")];
        let out = run_scheduled_blocking(
            gens,
            ByteTokenizer,
            tools(Arc::new(AtomicUsize::new(0))),
            &prompts,
            1,
            &config,
        )
        .unwrap();
        let t = &out.rollout.trajectories[0];
        assert_eq!(t.assistant_token_count(), assistant, "{turns:?}");
        let lps = out.engine_logprobs[0]
            .as_ref()
            .expect("every turn had log-probs");
        assert_eq!(lps.len(), assistant, "{turns:?}");
        assert!(lps.iter().all(|&l| l == -0.25));
        assert_eq!(out.weight_versions, [Some("v1".to_string())]);
        // Not kept in the trajectory itself without `record_entropy`.
        assert!(t.token_logprobs.is_empty());
    }
}

#[test]
fn issue_62_each_engine_log_prob_and_version_lands_on_its_own_token_and_turn() {
    // The generator reports the log-prob −p/1024 for the token at absolute position p (exact in
    // f32) and the version `w{turn}`; with `keep_logprobs` the trajectory keeps them, aligned
    // with its assistant tokens, through a tool turn, a malformed call the episode answers itself
    // and a last turn cut by the budget.
    let mut cut = ScheduleConfig::compact(0);
    cut.limits.max_response_tokens = 40;
    cut.keep_logprobs = true;
    let mut whole = ScheduleConfig::compact(0);
    whole.keep_logprobs = true;
    let cases = [
        (
            vec![
                "<c>print(1)</c>",
                "Now the answer is <answer>\\boxed{1}</answer>",
            ],
            cut,
        ),
        (
            vec!["<c>print(1)</answer>", "<answer>\\boxed{42}</answer>"],
            whole,
        ),
    ];
    for (turns, config) in cases {
        let owned: Vec<String> = turns.iter().map(|s| s.to_string()).collect();
        let script: Script = Arc::new(move |_, turn| owned.get(turn as usize).cloned());
        let mut generator = ScriptGen::new(script);
        generator.logprob = Some(Arc::new(|p| -(p as f32) / 1024.0));
        generator.version = Some(Arc::new(|turn| format!("w{turn}")));
        let prompts = [Prompt::new("p", "What is 6*7?", "42")];
        let out = run_scheduled_blocking(
            vec![Arc::new(generator) as Arc<dyn TurnGenerator>],
            ByteTokenizer,
            tools(Arc::new(AtomicUsize::new(0))),
            &prompts,
            1,
            &config,
        )
        .unwrap();
        let t = &out.rollout.trajectories[0];
        t.validate().unwrap();
        let want: Vec<f32> = t
            .loss_mask
            .iter()
            .enumerate()
            .filter(|(_, m)| **m == 1)
            .map(|(j, _)| -((t.prompt_ids.len() + j) as f32) / 1024.0)
            .collect();
        assert_eq!(t.token_logprobs, want, "{turns:?}");
        assert!(t.entropies.is_empty(), "only the log-probs are kept");
        let versions: Vec<(Role, Option<&str>)> = t
            .turns
            .iter()
            .map(|turn| (turn.role, turn.weight_version.as_deref()))
            .collect();
        let mut n = 0;
        for (role, version) in &versions {
            match role {
                Role::Assistant => {
                    assert_eq!(*version, Some(format!("w{n}").as_str()), "{versions:?}");
                    n += 1;
                }
                Role::Tool => assert_eq!(*version, None, "{versions:?}"),
            }
        }
        assert_eq!(n, 2, "{versions:?}");
        assert_eq!(out.weight_versions, [Some("w0,w1".to_string())]);
    }
}
