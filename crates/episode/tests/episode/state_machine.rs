//! The episode state machine driven by scripted turns and fake tools through every rule.

use rstar_episode::episode::{
    ByteTokenizer, Episode, Limits, Role, Step, StopReason, TextTokenizer, Trajectory,
};
use rstar_episode::template::Template;
use rstar_episode::toolcall::{OutcomeKind, ToolCall, ToolOutcome};

use rstar_testdata::{PairTokenizer, scorer};

const CALL_6X7: &str = "I multiply.</reason>\n<tool_call>\n{\"name\": \"python_code_with_standard_io\", \"arguments\": {\"code\": \"print(6*7)\", \"input\": \"\"}}\n</tool_call><|im_end|>";
const ANSWER_42: &str =
    "It printed 42.</reason>\n<answer>\nThe answer is \\boxed{42}.\n</answer><|im_end|>";

fn ok(stdout: &str) -> ToolOutcome {
    ToolOutcome::code_judge(true, "", stdout, "", 0.01)
}

/// Builds the expected response ids and mask by hand from (text, trainable) pieces.
fn expected(tok: &impl TextTokenizer, pieces: &[(&str, bool)]) -> (Vec<u32>, Vec<u8>) {
    let mut ids = Vec::new();
    let mut mask = Vec::new();
    for (text, trainable) in pieces {
        let seg = tok.encode(text);
        mask.extend(std::iter::repeat_n(u8::from(*trainable), seg.len()));
        ids.extend(seg);
    }
    (ids, mask)
}

/// Checks the trajectory's invariants: turns tile the response, masks follow roles.
fn check_spans(t: &Trajectory) {
    assert_eq!(t.response_ids.len(), t.loss_mask.len());
    let mut pos = 0;
    for turn in &t.turns {
        assert_eq!(turn.start, pos, "turns must tile the response");
        let want = u8::from(turn.role == Role::Assistant);
        for i in turn.start..turn.start + turn.len {
            assert_eq!(t.loss_mask[i], want, "token {i} of a {:?} turn", turn.role);
        }
        pos += turn.len;
    }
    assert_eq!(pos, t.response_ids.len());
    assert_eq!(t.turns.last().map(|t| t.role), Some(Role::Assistant));
}

#[test]
fn no_tool_call_ends_after_the_answer_masks_token_by_token() {
    let tok = PairTokenizer;
    let template = Template::chatml();
    let mut ep =
        Episode::new(&tok, &template, Limits::rstar2_agent(), "What is 6*7?").with_id("p1", 3);
    assert_eq!(ep.step(), Step::Generate { max_tokens: 8192 });
    assert_eq!(
        ep.prompt_ids(),
        tok.encode(&template.render_prompt("What is 6*7?"))
    );
    let step = ep.push_assistant_text(CALL_6X7).unwrap();
    assert_eq!(step, Step::CallTools(vec![ToolCall::python("print(6*7)")]));
    let step = ep.push_tool_outcomes(vec![ok("42\n")]).unwrap();
    let tool_turn = "<|im_start|>user\n<tool_response>\nTool call success\nstdout: 42\n\nexecution time: 0.01s\n</tool_response><|im_end|>\n<|im_start|>assistant\n<reason>";
    let used = tok.encode(CALL_6X7).len() + tok.encode(tool_turn).len();
    assert_eq!(
        step,
        Step::Generate {
            max_tokens: 8192 - used
        }
    );
    // The context the policy continues from is prompt + response so far.
    let mut ctx = tok.encode(ep.prompt());
    ctx.extend(tok.encode(CALL_6X7));
    ctx.extend(tok.encode(tool_turn));
    assert_eq!(ep.context_ids(), ctx);
    assert_eq!(
        ep.push_assistant_text(ANSWER_42).unwrap(),
        Step::Done(StopReason::NoToolCall)
    );
    let t = ep.finish_scored(scorer("42")).unwrap();

    let (ids, mask) = expected(
        &tok,
        &[(CALL_6X7, true), (tool_turn, false), (ANSWER_42, true)],
    );
    assert_eq!(t.response_ids, ids);
    assert_eq!(t.loss_mask, mask);
    assert_eq!(
        t.response_text(),
        format!("{CALL_6X7}{tool_turn}{ANSWER_42}")
    );
    assert_eq!(t.assistant_text(), format!("{CALL_6X7}{ANSWER_42}"));
    assert_eq!((t.id.as_str(), t.sample), ("p1", 3));
    assert_eq!(t.stop, StopReason::NoToolCall);
    assert!(!t.truncated);
    assert_eq!(t.answer.as_deref(), Some("42"));
    assert_eq!(t.reward, Some(1.0));
    assert_eq!(t.tool_calls.len(), 1);
    assert_eq!(t.tool_calls[0].turn, 0);
    assert_eq!(t.tool_calls[0].outcome.kind, OutcomeKind::Output);
    assert_eq!(t.tool_errors(), 0);
    assert_eq!(t.assistant_turns(), 2);
    check_spans(&t);
}

#[test]
fn the_scorer_sees_assistant_text_only() {
    let tok = ByteTokenizer;
    let template = Template::chatml();
    let mut ep = Episode::new(&tok, &template, Limits::rstar2_agent(), "x");
    ep.push_assistant_text(CALL_6X7).unwrap();
    ep.push_tool_outcomes(vec![ok("\\boxed{42}")]).unwrap();
    ep.push_assistant_text("I am not sure.</reason><|im_end|>")
        .unwrap();
    let t = ep.finish_scored(scorer("42")).unwrap();
    assert_eq!(t.answer, None);
    assert_eq!(t.reward, Some(0.0));
}

#[test]
fn max_turns_stops_with_a_pending_call() {
    let tok = ByteTokenizer;
    let limits = Limits {
        max_assistant_turns: 2,
        ..Limits::rstar2_agent()
    };
    let mut executed = 0;
    let t = Episode::new(&tok, &Template::chatml(), limits, "x")
        .run(
            |_, _| CALL_6X7.to_string(),
            |_| {
                executed += 1;
                ok("42\n")
            },
        )
        .unwrap()
        .finish()
        .unwrap();
    assert_eq!(t.stop, StopReason::MaxTurns);
    assert!(!t.truncated);
    // The second turn's call is not run: the loop ends first, as in the reference.
    assert_eq!(executed, 1);
    assert_eq!(t.tool_calls.len(), 1);
    assert_eq!(t.assistant_turns(), 2);
    check_spans(&t);
}

#[test]
fn token_budget_cuts_the_last_turn() {
    let tok = PairTokenizer;
    let template = Template::chatml();
    let first = tok.encode(CALL_6X7).len();
    let tool_turn = template.render_tool_turn(&[ok("42\n")], Some(256));
    let tool = tok.encode(&tool_turn).len();
    let limits = Limits {
        max_response_tokens: first + tool + 10,
        ..Limits::rstar2_agent()
    };
    let mut ep = Episode::new(&tok, &template, limits, "x");
    ep.push_assistant_text(CALL_6X7).unwrap();
    assert_eq!(
        ep.push_tool_outcomes(vec![ok("42\n")]).unwrap(),
        Step::Generate { max_tokens: 10 }
    );
    // The policy writes more than the 10 tokens left: it is cut to 20 bytes.
    let step = ep.push_assistant_text(ANSWER_42).unwrap();
    assert_eq!(step, Step::Done(StopReason::TokenBudget));
    assert_eq!(ep.remaining_tokens(), 0);
    let t = ep.finish_scored(scorer("42")).unwrap();
    assert!(t.truncated);
    let last = t.turns.last().unwrap();
    assert_eq!(last.text, &ANSWER_42[..20]);
    assert_eq!(last.len, 10);
    assert_eq!(t.response_ids.len(), first + tool + 10);
    let (ids, mask) = expected(
        &tok,
        &[
            (CALL_6X7, true),
            (&tool_turn, false),
            (&ANSWER_42[..20], true),
        ],
    );
    assert_eq!((t.response_ids.clone(), t.loss_mask.clone()), (ids, mask));
    assert_eq!(t.reward, Some(0.0));
    check_spans(&t);
}

#[test]
fn a_turn_that_fills_the_budget_unfinished_is_truncated() {
    let tok = ByteTokenizer;
    let limits = Limits {
        max_response_tokens: 12,
        ..Limits::compact()
    };
    // Exactly 12 bytes, no stop string: the engine stopped at max_tokens.
    let mut ep = Episode::new(&tok, &Template::compact(), limits.clone(), "x");
    assert_eq!(
        ep.push_assistant_text("thinking....").unwrap(),
        Step::Done(StopReason::TokenBudget)
    );
    // Exactly 12 bytes ending on a stop string with no call: a clean finish.
    let mut ep = Episode::new(&tok, &Template::compact(), limits.clone(), "x");
    let answer = "<answer>\\boxed{7}</answer>";
    let limits = Limits {
        max_response_tokens: answer.len(),
        ..limits
    };
    let mut exact = Episode::new(&tok, &Template::compact(), limits, "x");
    assert_eq!(
        exact.push_assistant_text(answer).unwrap(),
        Step::Done(StopReason::NoToolCall)
    );
    assert!(!exact.finish().unwrap().truncated);
    // A finished call that fills the budget leaves no room for its response.
    assert_eq!(
        ep.push_assistant_text("a<c>pr()</c>").unwrap(),
        Step::Done(StopReason::TokenBudget)
    );
}

#[test]
fn tool_response_that_would_not_fit_ends_on_the_assistant_turn() {
    let tok = ByteTokenizer;
    let limits = Limits {
        max_response_tokens: 200,
        max_tool_response_chars: None,
        ..Limits::compact()
    };
    let mut ep = Episode::new(&tok, &Template::compact(), limits, "x");
    let turn = "Go.<c>print(7**300)</c>";
    assert!(matches!(
        ep.push_assistant_text(turn).unwrap(),
        Step::CallTools(_)
    ));
    let big = "9".repeat(254);
    let step = ep.push_tool_outcomes(vec![ok(&big)]).unwrap();
    assert_eq!(step, Step::Done(StopReason::ToolResponseTooLong));
    let t = ep.finish().unwrap();
    assert!(t.truncated);
    assert_eq!(t.response_text(), turn);
    assert_eq!(t.loss_mask, vec![1; turn.len()]);
    // The call ran and is recorded even though its response is not in the sequence.
    assert_eq!(t.tool_calls.len(), 1);
    check_spans(&t);
}

#[test]
fn tool_budget_cuts_responses_in_the_middle() {
    let tok = ByteTokenizer;
    let limits = Limits {
        max_tool_response_chars: Some(6),
        ..Limits::compact()
    };
    let mut ep = Episode::new(&tok, &Template::compact(), limits, "x");
    ep.push_assistant_text("<c>print(7**30)</c>").unwrap();
    ep.push_tool_outcomes(vec![ok("22539340290692258087863249\n")])
        .unwrap();
    ep.push_assistant_text("<answer>\\boxed{1}</answer>")
        .unwrap();
    let t = ep.finish().unwrap();
    assert_eq!(t.turns[1].text, "\nO:225...(truncated)...249\nA:");
    check_spans(&t);
}

#[test]
fn malformed_call_is_answered_not_dropped() {
    let tok = PairTokenizer;
    let template = Template::chatml();
    let bad = "Let me compute.</reason>\n<tool_call>\n{\"name\": \"python_code_with_standard_io\", \"arguments\": {\"code\": \"print(1)\"\n</tool_call><|im_end|>";
    let mut ep = Episode::new(&tok, &template, Limits::rstar2_agent(), "x");
    // Nothing to execute: the episode answers the failure itself and asks for the next turn.
    let step = ep.push_assistant_text(bad).unwrap();
    assert!(matches!(step, Step::Generate { .. }), "{step:?}");
    ep.push_assistant_text(CALL_6X7).unwrap();
    ep.push_tool_outcomes(vec![ok("42\n")]).unwrap();
    ep.push_assistant_text(ANSWER_42).unwrap();
    let t = ep.finish_scored(scorer("42")).unwrap();
    let failure = &t.tool_calls[0];
    assert_eq!(failure.call, None);
    assert_eq!(failure.outcome.kind, OutcomeKind::ParseFailure);
    let msg = &failure.failure.as_ref().unwrap().message;
    assert_eq!(
        failure.outcome.text,
        format!("Failed to decode tool call: {msg}")
    );
    assert!(msg.contains("EOF while parsing"), "{msg}");
    let tool_turn = format!(
        "<|im_start|>user\n<tool_response>\nFailed to decode tool call: {msg}\n</tool_response><|im_end|>\n<|im_start|>assistant\n<reason>"
    );
    assert_eq!(t.turns[1].text, tool_turn);
    assert_eq!(t.tool_errors(), 1);
    assert_eq!(t.tool_calls[1].turn, 1);
    assert_eq!(t.reward, Some(1.0));
    check_spans(&t);
}

#[test]
fn mixed_good_and_bad_calls_keep_their_order() {
    let tok = ByteTokenizer;
    let limits = Limits {
        max_calls_per_turn: 3,
        ..Limits::rstar2_agent()
    };
    let turn = "Two.</reason>\n<tool_call>{\"name\": \"nope\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"jupyter_code\", \"arguments\": {\"code\": \"6*7\"}}</tool_call><|im_end|>";
    let mut ep = Episode::new(&tok, &Template::chatml(), limits, "x");
    let Step::CallTools(calls) = ep.push_assistant_text(turn).unwrap() else {
        panic!()
    };
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].code, "6*7");
    ep.push_tool_outcomes(vec![ok("42")]).unwrap();
    let t = {
        ep.push_assistant_text(ANSWER_42).unwrap();
        ep.finish().unwrap()
    };
    assert_eq!(
        t.tool_calls[0].outcome.text,
        "Failed to decode tool call: unknown tool `nope`"
    );
    assert_eq!(t.tool_calls[1].outcome.kind, OutcomeKind::Output);
    assert_eq!(
        t.turns[1].text,
        "<|im_start|>user\n<tool_response>\nFailed to decode tool call: unknown tool `nope`\n</tool_response>\n<tool_response>\nTool call success\nstdout: 42\nexecution time: 0.01s\n</tool_response><|im_end|>\n<|im_start|>assistant\n<reason>"
    );
}

#[test]
fn only_max_calls_per_turn_run() {
    let tok = ByteTokenizer;
    let turn = format!("{}{}", ToolCallText::A, ToolCallText::B);
    let mut ep = Episode::new(&tok, &Template::chatml(), Limits::rstar2_agent(), "x");
    let Step::CallTools(calls) = ep.push_assistant_text(&turn).unwrap() else {
        panic!()
    };
    assert_eq!(calls, vec![ToolCall::python("a")]);
}

struct ToolCallText;
impl ToolCallText {
    const A: &str = "<tool_call>{\"name\": \"python_code_with_standard_io\", \"arguments\": {\"code\": \"a\"}}</tool_call>";
    const B: &str = "<tool_call>{\"name\": \"python_code_with_standard_io\", \"arguments\": {\"code\": \"b\"}}</tool_call><|im_end|>";
}

#[test]
fn a_timeout_is_a_tool_error_and_the_rollout_goes_on() {
    let tok = ByteTokenizer;
    let script = [
        "Loop.<c>while 1:pass</c>",
        "Fix.<c>print(6*7)</c>",
        "<answer>\\boxed{42}</answer>",
    ];
    let mut turns = script.iter();
    let t = Episode::new(
        &tok,
        &Template::compact(),
        Limits::compact(),
        "What is 6*7?",
    )
    .run(
        |_, _| turns.next().unwrap().to_string(),
        |call| {
            if call.code.contains("while") {
                ToolOutcome::code_judge(false, "worker_timeout", "Suicide from timeout.", "", 4.0)
            } else {
                ok("42\n")
            }
        },
    )
    .unwrap()
    .finish_scored(scorer("42"))
    .unwrap();
    assert_eq!(t.tool_calls[0].outcome.kind, OutcomeKind::Timeout);
    assert_eq!(t.tool_errors(), 1);
    assert_eq!(
        t.response_text(),
        "Loop.<c>while 1:pass</c>\nO:timeout\nA:Fix.<c>print(6*7)</c>\nO:42\nA:<answer>\\boxed{42}</answer>"
    );
    let (ids, mask) = expected(
        &tok,
        &[
            (script[0], true),
            ("\nO:timeout\nA:", false),
            (script[1], true),
            ("\nO:42\nA:", false),
            (script[2], true),
        ],
    );
    assert_eq!(t.response_ids, ids);
    assert_eq!(t.loss_mask, mask);
    assert_eq!(t.reward, Some(1.0));
}

#[test]
fn generator_is_given_the_budget_left() {
    let tok = ByteTokenizer;
    let mut seen = Vec::new();
    let script = ["<c>1</c>", "<answer>\\boxed{1}</answer>"];
    let mut turns = script.iter();
    let _ = Episode::new(&tok, &Template::compact(), Limits::compact(), "q")
        .run(
            |ctx, max| {
                seen.push((ctx.len(), max));
                turns.next().unwrap().to_string()
            },
            |_| ToolOutcome::code_judge(true, "", "", "", 0.0),
        )
        .unwrap();
    let prompt = "Q:q\nA:".len();
    let tool = "\nO:(no output)\nA:".len();
    assert_eq!(
        seen,
        vec![(prompt, 320), (prompt + 8 + tool, 320 - 8 - tool)]
    );
}

#[test]
fn trajectories_round_trip_through_jsonl() {
    let tok = ByteTokenizer;
    let mut ep = Episode::new(&tok, &Template::compact(), Limits::compact(), "q")
        .with_id("a", 1)
        .with_ground_truth("1");
    ep.push_assistant_text("<c>print(1)</c>").unwrap();
    ep.push_tool_outcomes(vec![ok("1\n")]).unwrap();
    ep.push_assistant_text("<answer>\\boxed{1}</answer>")
        .unwrap();
    let t = ep.finish_scored(scorer("1")).unwrap();
    let line = t.to_json_line();
    assert!(!line.contains('\n'));
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    for field in [
        "id",
        "sample",
        "template",
        "prompt",
        "prompt_ids",
        "response_ids",
        "loss_mask",
        "turns",
        "tool_calls",
        "stop",
        "truncated",
        "ground_truth",
        "answer",
        "reward",
    ] {
        assert!(v.get(field).is_some(), "missing {field}");
    }
    assert_eq!(v["stop"], "no_tool_call");
    assert_eq!(v["template"], "compact");
    assert_eq!(v["ground_truth"], "1");
    assert_eq!(v["turns"][1]["role"], "tool");
    assert_eq!(v["tool_calls"][0]["outcome"]["kind"], "output");
    assert_eq!(Trajectory::from_json_line(&line).unwrap(), t);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trajectories.jsonl");
    Trajectory::write_jsonl(&path, &[t.clone(), t.clone()]).unwrap();
    assert_eq!(Trajectory::read_jsonl(&path).unwrap(), vec![t.clone(), t]);
    std::fs::write(&path, format!("{line}\n{{\"id\": 1}}\n")).unwrap();
    let err = Trajectory::read_jsonl(&path).unwrap_err().to_string();
    assert!(err.contains("trajectories.jsonl:2:"), "{err}");
}

fn script_turn(kind: u8, n: usize) -> String {
    match kind {
        0 => format!("Go.<c>print({n})</c>"),
        1 => format!("<answer>\\boxed{{{n}}}</answer>"),
        2 => "la ".repeat(n % 40),
        _ => format!("Oops.<c>print({n}"),
    }
}

proptest::proptest! {
    #[test]
    fn trajectories_are_well_formed(
        turns in proptest::collection::vec((0u8..4, 0usize..10_000), 1..8),
        outputs in proptest::collection::vec((0u8..4, 0usize..120), 8),
        max_turns in 1usize..6,
        max_tokens in 1usize..300,
        tool_chars in proptest::option::of(1usize..80),
        pair in proptest::bool::ANY,
    ) {
        let limits = Limits {
            max_assistant_turns: max_turns,
            max_response_tokens: max_tokens,
            max_tool_response_chars: tool_chars,
            max_calls_per_turn: 1,
        };
        let mut script = turns.iter().map(|&(k, n)| script_turn(k, n)).cycle();
        let mut outs = outputs.iter().cycle();
        let execute = |_: &ToolCall| {
            let &(kind, len) = outs.next().unwrap();
            match kind {
                0 => ok(&"7".repeat(len)),
                1 => ToolOutcome::code_judge(true, "", "", "", 0.0),
                2 => ToolOutcome::code_judge(false, "", "", "ValueError: bad", 0.0),
                _ => ToolOutcome::code_judge(false, "worker_timeout", "", "", 4.0),
            }
        };
        let generate = |_: &[u32], _| script.next().unwrap();
        let tok: &dyn TextTokenizer = if pair { &PairTokenizer } else { &ByteTokenizer };
        let t = Episode::new(tok, &Template::compact(), limits, "q")
        .run(generate, execute)
        .unwrap()
        .finish()
        .unwrap();
        check_spans(&t);
        proptest::prop_assert!(t.response_ids.len() <= max_tokens);
        proptest::prop_assert!(t.assistant_turns() <= max_turns);
        proptest::prop_assert_eq!(t.truncated, t.stop.is_truncation());
        if t.stop == StopReason::MaxTurns {
            proptest::prop_assert_eq!(t.assistant_turns(), max_turns);
        }
        // Every tool turn answers the calls of the assistant turn before it.
        let tool_turns = t.turns.iter().filter(|x| x.role == Role::Tool).count();
        let answered = t.tool_calls.iter().map(|c| c.turn).collect::<std::collections::BTreeSet<_>>();
        proptest::prop_assert!(answered.len() == tool_turns || (answered.len() == tool_turns + 1 && t.stop == StopReason::ToolResponseTooLong));
    }
}

#[test]
fn an_episode_can_own_its_tokenizer_and_move_to_a_thread() {
    let tok: std::sync::Arc<dyn TextTokenizer + Send + Sync> = std::sync::Arc::new(ByteTokenizer);
    let mut ep = Episode::new(tok, &Template::compact(), Limits::compact(), "q");
    let t = std::thread::spawn(move || {
        ep.push_assistant_text("<answer>\\boxed{1}</answer>")
            .unwrap();
        ep.finish().unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(t.stop, StopReason::NoToolCall);
}
