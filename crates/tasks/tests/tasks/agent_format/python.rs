//! Independent reference: real Python runs every kind's solution program and buggy variants.

use std::collections::HashMap;
use std::io::Write;
use std::process::{Command, Stdio};

use rstar_episode::episode::Limits;
use rstar_episode::template::Template;
use rstar_episode::toolcall::{ToolCall, ToolOutcome};
use rstar_tasks::tasks::sft::{Bug, SftConfig, build_corpus};
use rstar_tasks::tasks::{Split, Task, TaskConfig, TaskKind, TaskSet};

/// Runs every snippet in one Python process (exec with stdout captured) and returns, per
/// snippet, `Ok(stdout)` or `Err(exception type name)`.
fn run_all(snippets: &[String]) -> Vec<Result<String, String>> {
    let script = r#"
import contextlib, io, json, sys
out = []
for code in json.load(sys.stdin):
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            exec(compile(code, "<tool>", "exec"), {})
        out.append({"ok": True, "v": buf.getvalue()})
    except BaseException as e:
        out.append({"ok": False, "v": type(e).__name__})
print(json.dumps(out))
"#;
    let mut child = Command::new(rstar_testdata::python())
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python runs (set RSTAR_PYTHON)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::to_string(snippets).unwrap().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let v: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    v.iter()
        .map(|r| {
            let text = r["v"].as_str().unwrap().to_string();
            if r["ok"].as_bool().unwrap() {
                Ok(text)
            } else {
                Err(text)
            }
        })
        .collect()
}

fn tasks_of_every_kind(per_kind: usize) -> Vec<Task> {
    let mut tasks = Vec::new();
    for kind in TaskKind::ALL {
        let set = TaskSet::new(TaskConfig {
            kinds: vec![kind],
            held_out_kinds: vec![],
            held_out_per_mille: 100,
        })
        .unwrap();
        tasks.extend(set.generate(Split::Train, per_kind, 5).unwrap());
    }
    tasks
}

#[test]
fn python_agrees_with_every_rust_answer_and_every_bug_fails() {
    let tasks = tasks_of_every_kind(3);
    let mut snippets: Vec<String> = tasks.iter().map(Task::solution_code).collect();
    for bug in Bug::ALL {
        snippets.extend(tasks.iter().map(|t| bug.apply(t)));
    }
    let results = run_all(&snippets);
    let n = tasks.len();
    for (t, r) in tasks.iter().zip(&results[..n]) {
        assert_eq!(
            r.as_deref().map(str::trim),
            Ok(t.answer().as_str()),
            "{}",
            t.key()
        );
    }
    for (i, bug) in Bug::ALL.iter().enumerate() {
        let want = match bug {
            Bug::Typo | Bug::WrongFunction => "NameError",
            Bug::SyntaxError => "SyntaxError",
        };
        for (t, r) in tasks.iter().zip(&results[n * (i + 1)..n * (i + 2)]) {
            assert_eq!(
                r.as_ref().err().map(String::as_str),
                Some(want),
                "{bug:?} {}",
                t.key()
            );
        }
    }
}

#[test]
fn wrong_programs_print_their_rust_numbers_which_are_not_the_answers() {
    let tasks = tasks_of_every_kind(12);
    let mut snippets: Vec<String> = tasks.iter().map(Task::wrong_code).collect();
    for bug in Bug::ALL {
        snippets.extend(tasks.iter().map(|t| bug.apply_to(t, &t.wrong_code())));
    }
    let results = run_all(&snippets);
    let n = tasks.len();
    let mut differing = 0;
    for (t, r) in tasks.iter().zip(&results[..n]) {
        let printed = r.as_deref().map(str::trim);
        assert_eq!(printed, Ok(t.wrong_answer().as_str()), "{}", t.key());
        let printed = printed.unwrap();
        assert!(
            !printed.is_empty() && printed.bytes().all(|b| b.is_ascii_digit()),
            "{printed}"
        );
        // Python's own comparison of the two numbers, not the Rust helper's.
        let same = printed
            .parse::<u128>()
            .ok()
            .zip(t.answer().parse::<u128>().ok());
        let differs = match same {
            Some((a, b)) => a != b,
            None => printed.trim_start_matches('0') != t.answer(),
        };
        assert_eq!(differs, t.wrong_program_differs(), "{}", t.key());
        differing += usize::from(differs);
    }
    // Coincidences (a range starting at a multiple, a modulus, a palindrome) are rare.
    assert!(differing >= n * 9 / 10, "{differing} of {n}");
    for (i, bug) in Bug::ALL.iter().enumerate() {
        for (t, r) in tasks.iter().zip(&results[n * (i + 1)..n * (i + 2)]) {
            assert!(r.is_err(), "{bug:?} {}: {r:?}", t.key());
        }
    }
}

/// A minimal real executor: one Python process per call, its result in code-judge's layout.
fn python_executor(call: &ToolCall) -> ToolOutcome {
    let start = std::time::Instant::now();
    let mut child = Command::new(rstar_testdata::python())
        .args(["-c", &call.code])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(call.input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let secs = start.elapsed().as_secs_f64();
    ToolOutcome::code_judge(out.status.success(), "", &stdout, &stderr, secs)
}

#[test]
fn sft_corpus_with_real_tool_outputs() {
    let set = TaskSet::new(TaskConfig::embedded_default()).unwrap();
    let tasks = set.generate(Split::Train, 6, 1).unwrap();
    // Both templates run the same programs: run each once.
    let mut cache: HashMap<String, ToolOutcome> = HashMap::new();
    let mut executor = |call: &ToolCall| {
        cache
            .entry(call.code.clone())
            .or_insert_with(|| python_executor(call))
            .clone()
    };
    for (template, limits) in [
        (Template::compact(), Limits::compact()),
        (Template::chatml(), Limits::rstar2_agent()),
    ] {
        let mut config = SftConfig::new(limits);
        config.wrong_programs = TaskKind::ALL.iter().map(|&k| (k, 0.5)).collect();
        let demos = build_corpus(&tasks, &template, &config, &mut executor).unwrap();
        assert_eq!(demos.iter().filter(|d| d.bug.is_some()).count(), 2);
        let wrong: Vec<_> = demos.iter().filter(|d| d.wrong_program).collect();
        assert!(!wrong.is_empty());
        for (task, d) in tasks.iter().zip(&demos) {
            assert_eq!(
                d.answer == task.answer(),
                !d.wrong_program,
                "{}",
                task.key()
            );
        }
        for d in demos.iter().filter(|d| d.bug.is_some()) {
            // The error the demonstration reads is Python's own headline.
            let tool = &d.segments[1].text;
            assert!(
                tool.contains("NameError") || tool.contains("SyntaxError"),
                "{tool}"
            );
        }
    }
}
