//! End-to-end tests of `rstar show`: one rollout of a generated trajectory file, selection, colour and bad files.

use std::path::Path;

use rstar_agent::episode::{ByteTokenizer, Episode, Limits, Score, Trajectory};
use rstar_agent::template::Template;
use rstar_agent::toolcall::{ToolCall, ToolOutcome};

/// Two rollouts of one problem: sample 0 calls a tool that fails, retries and answers right;
/// sample 1 answers wrong without calling anything.
fn write_file(dir: &Path) -> std::path::PathBuf {
    let tok = ByteTokenizer;
    let template = Template::chatml();
    let mut turns = vec![
        template.render_call_turn("Compute it.", &ToolCall::python("prnt(6*7)")),
        template.render_call_turn("A typo; again.", &ToolCall::python("print(6*7)")),
        template.render_answer_turn("It printed 42.", "42"),
    ]
    .into_iter();
    let ep = Episode::new(&tok, &template, Limits::rstar2_agent(), "What is 6*7?")
        .with_id("mul", 0)
        .with_ground_truth("42")
        .run(
            |_, _| turns.next().unwrap(),
            |call| {
                if call.code.starts_with("prnt") {
                    ToolOutcome::code_judge(
                        false,
                        "",
                        "",
                        "NameError: name 'prnt' is not defined",
                        0.01,
                    )
                } else {
                    ToolOutcome::code_judge(true, "", "42\n", "", 0.01)
                }
            },
        )
        .unwrap();
    let score = |answer: &str, reward| {
        let answer = answer.to_string();
        move |_: &str| Score {
            answer: Some(answer),
            reward,
        }
    };
    let a = ep.finish_scored(score("42", 1.0)).unwrap();
    let ep = Episode::new(&tok, &template, Limits::rstar2_agent(), "What is 6*7?")
        .with_id("mul", 1)
        .with_ground_truth("42")
        .run(
            |_, _| template.render_answer_turn("Guess.", "41"),
            |_| unreachable!("no tool call"),
        )
        .unwrap();
    let b = ep.finish_scored(score("41", 0.0)).unwrap();
    let path = dir.join("trajectories.jsonl");
    Trajectory::write_jsonl(&path, &[a, b]).unwrap();
    path
}

fn show(args: &[&str], envs: &[(&str, &str)]) -> (i32, String, String) {
    let envs: Vec<(&str, &std::ffi::OsStr)> = envs
        .iter()
        .map(|(k, v)| (*k, std::ffi::OsStr::new(v)))
        .collect();
    let r = super::common::run(&[&["show"], args].concat(), None, &envs);
    (r.code, r.out(), r.stderr)
}

#[test]
fn shows_turns_tool_calls_and_the_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path());
    let (code, out, err) = show(&[file.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    // The first rollout by default; piped output has no colour.
    assert!(!out.contains('\x1b'), "{out}");
    for needle in [
        "trajectory 0 of 2 · id mul · sample 0",
        "stop: no_tool_call · truncated: no · reward: 1 · answer: 42 · ground truth: 42",
        "tool calls: 2 (1 error, 1 output) · error rate 50%",
        "turns: 3 assistant",
        "turn 0 · assistant 1 · tokens 0..",
        "call 0: python_code_with_standard_io (1 lines) → error",
        "call 1: python_code_with_standard_io (1 lines) → output",
        "NameError: name 'prnt' is not defined",
        "<tool_response>",
        "The answer is \\boxed{42}.",
        "prompt (last 240 of",
    ] {
        assert!(out.contains(needle), "`{needle}` missing from\n{out}");
    }
    // Turns alternate assistant, tool, assistant, tool, assistant.
    let headers: Vec<&str> = out.lines().filter(|l| l.starts_with("── turn")).collect();
    assert_eq!(headers.len(), 5, "{out}");
    assert!(headers[1].contains("tool response") && headers[3].contains("tool response"));
}

#[test]
fn selects_by_index_or_id_and_lists() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path());
    let f = file.to_str().unwrap();
    let (code, out, _) = show(&[f, "--index", "1"], &[]);
    assert_eq!(code, 0);
    assert!(
        out.contains("sample 1") && out.contains("reward: 0 · answer: 41"),
        "{out}"
    );
    assert!(out.contains("tool calls: none"), "{out}");
    let (_, by_id, _) = show(&[f, "--id", "mul", "--sample", "1"], &[]);
    assert_eq!(
        by_id.replace("trajectory 1 of 2", "X"),
        out.replace("trajectory 1 of 2", "X")
    );
    let (code, list, _) = show(&[f, "--list"], &[]);
    assert_eq!(code, 0);
    assert_eq!(list.lines().count(), 2, "{list}");
    assert!(
        list.lines().nth(1).unwrap().contains("calls 0 (0 errors)"),
        "{list}"
    );
    let (code, _, err) = show(&[f, "--index", "2"], &[]);
    assert_eq!(code, 1);
    assert!(
        err.contains("--index 2 is out of range") && err.contains("has 2 trajectories"),
        "{err}"
    );
    let (code, _, err) = show(&[f, "--id", "nope"], &[]);
    assert_eq!(code, 1);
    assert!(err.contains("no trajectory with id `nope`"), "{err}");
}

#[test]
fn colour_is_forced_by_flag_and_stays_off_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path());
    let f = file.to_str().unwrap();
    let (_, out, _) = show(&[f, "--color"], &[]);
    // Tool calls yellow, failed tool responses red, the answer bold green.
    assert!(out.contains("\x1b[33m<tool_call>"), "{out}");
    assert!(
        out.contains("\x1b[31m<|im_start|>user\n<tool_response>"),
        "{out}"
    );
    assert!(out.contains("\x1b[1;32m<answer>"), "{out}");
    let (_, plain, _) = show(&[f, "--no-color"], &[("NO_COLOR", "1")]);
    assert!(!plain.contains('\x1b'));
    let (code, _, err) = show(&[f, "--color", "--no-color"], &[]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn bad_files_fail_with_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path());
    let text = std::fs::read_to_string(&file).unwrap();
    let cut = dir.path().join("cut.jsonl");
    std::fs::write(&cut, &text[..text.len() - 30]).unwrap();
    let (code, out, err) = show(&[cut.to_str().unwrap()], &[]);
    assert_eq!(code, 1);
    assert!(out.is_empty());
    assert!(err.contains("cut.jsonl:2: truncated line"), "{err}");
    let (code, _, err) = show(&[dir.path().join("missing.jsonl").to_str().unwrap()], &[]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot read"), "{err}");
}

/// Issue #69: a tool response (the output of a program the policy wrote) and every other text
/// of the file reach the terminal with their control characters shown, not obeyed; half a
/// reward is correct (green), as in the run report; an empty id and a missing ground truth get
/// the report's placeholders.
#[test]
fn issue_69_file_text_cannot_drive_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path());
    let mut trajs = Trajectory::read_jsonl(&file).unwrap();
    let hostile = "\x1b[2J\x1b]0;pwned\x07\u{9b}31m";
    trajs[0].turns[1].text.push_str(hostile);
    trajs[0].answer = Some(format!("42{hostile}"));
    trajs[0].reward = Some(0.5);
    trajs[0].id.clear();
    trajs[0].ground_truth = None;
    Trajectory::write_jsonl(&file, &trajs).unwrap();
    let f = file.to_str().unwrap();
    let (code, out, err) = show(&[f, "--color"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("\x1b[2J") && !out.contains('\x07'), "{out}");
    assert!(!out.contains('\u{9b}'), "{out}");
    assert_eq!(out.matches("␛[2J␛]0;pwned␇�31m").count(), 2, "{out}");
    assert!(out.contains("reward: \x1b[32m0.5\x1b[0m"), "{out}");
    assert!(out.contains("id \x1b[1m(no id)\x1b[0m"), "{out}");
    assert!(out.contains("ground truth: unknown"), "{out}");
    let (_, list, _) = show(&[f, "--list", "--color"], &[]);
    assert!(
        list.contains("(no id)") && list.contains("reward \x1b[32m0.5"),
        "{list}"
    );
}
