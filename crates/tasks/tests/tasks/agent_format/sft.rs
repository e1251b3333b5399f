//! The SFT corpus with a fake executor: structure, counts, masks and replay through an episode.

use rstar_episode::episode::{ByteTokenizer, Episode, Limits, Role, StopReason};
use rstar_episode::template::Template;
use rstar_episode::toolcall::ToolOutcome;
use rstar_tasks::tasks::sft::{
    Bug, Demonstration, SftConfig, build_corpus, demonstrate, read_corpus, write_corpus,
};
use rstar_tasks::tasks::{Split, Task, TaskConfig, TaskKind, TaskSet};
use rstar_testdata::{PairTokenizer, last_boxed};

use super::common::fake_executor;

fn tasks(n: usize) -> Vec<Task> {
    TaskSet::new(TaskConfig::embedded_default())
        .unwrap()
        .generate(Split::Train, n, 42)
        .unwrap()
}

#[test]
fn bug_weights_choose_the_failing_calls_bugs() {
    let tasks = tasks(600);
    let failing_of = |weights: &[(Bug, f64)]| {
        let config = SftConfig {
            failing_fraction: 0.6,
            bug_weights: weights.iter().copied().collect(),
            ..SftConfig::default()
        };
        let demos =
            build_corpus(&tasks, &Template::compact(), &config, fake_executor(&tasks)).unwrap();
        let bugs: Vec<Bug> = demos.iter().filter_map(|d| d.bug).collect();
        assert_eq!(bugs.len(), 360, "round(0.6 · 600) fail first");
        let share = |b: Bug| bugs.iter().filter(|&&x| x == b).count() as f64 / 360.0;
        (
            demos,
            [Bug::Typo, Bug::WrongFunction, Bug::SyntaxError].map(share),
        )
    };
    // One habitual bug: every failing call has it.
    let (_, shares) = failing_of(&[(Bug::SyntaxError, 1.0)]);
    assert_eq!(shares, [0.0, 0.0, 1.0]);
    // 3 : 1, and a weight of 0 is never drawn: within 4 standard deviations of 3/4 and 1/4.
    let (_, shares) = failing_of(&[
        (Bug::Typo, 3.0),
        (Bug::SyntaxError, 1.0),
        (Bug::WrongFunction, 0.0),
    ]);
    let sd = (0.75f64 * 0.25 / 360.0).sqrt();
    assert!((shares[0] - 0.75).abs() < 4.0 * sd, "{shares:?}");
    assert_eq!(shares[1], 0.0, "{shares:?}");
    assert!((shares[2] - 0.25).abs() < 4.0 * sd, "{shares:?}");
    // No weights: the three uniformly, as before the field existed.
    let (demos, shares) = failing_of(&[]);
    for s in shares {
        assert!(
            (s - 1.0 / 3.0).abs() < 4.0 * (2.0f64 / 9.0 / 360.0).sqrt(),
            "{shares:?}"
        );
    }
    let old = SftConfig {
        failing_fraction: 0.6,
        ..SftConfig::default()
    };
    let json = serde_json::to_value(&old).unwrap();
    assert!(json.get("bug_weights").is_none(), "{json}");
    let again = build_corpus(&tasks, &Template::compact(), &old, fake_executor(&tasks)).unwrap();
    assert_eq!(demos, again);
}

#[test]
fn a_third_fail_first_and_the_choice_is_seeded() {
    let tasks = tasks(30);
    let config = SftConfig::default();
    let demos = build_corpus(&tasks, &Template::compact(), &config, fake_executor(&tasks)).unwrap();
    assert_eq!(demos.len(), 30);
    assert_eq!(demos.iter().filter(|d| d.bug.is_some()).count(), 10);
    let again = build_corpus(&tasks, &Template::compact(), &config, fake_executor(&tasks)).unwrap();
    assert_eq!(demos, again);
    let other = SftConfig { seed: 1, ..config };
    let moved = build_corpus(&tasks, &Template::compact(), &other, fake_executor(&tasks)).unwrap();
    let bugs = |d: &[Demonstration]| d.iter().map(|d| d.bug).collect::<Vec<_>>();
    assert_ne!(bugs(&demos), bugs(&moved));
    for d in &demos {
        let n = if d.bug.is_some() { 5 } else { 3 };
        assert_eq!(d.segments.len(), n);
        let roles: Vec<bool> = d.segments.iter().map(|s| s.trainable).collect();
        assert!(
            roles.iter().enumerate().all(|(i, &t)| t == (i % 2 == 0)),
            "{roles:?}"
        );
        assert_eq!(
            last_boxed(d.segments.last().unwrap().text.as_str()).as_deref(),
            Some(d.answer.as_str())
        );
    }
}

#[test]
fn wrong_program_shares_follow_the_config_per_kind_and_are_seeded() {
    let tasks = tasks(800);
    let shares = [
        (TaskKind::Product, 0.2),
        (TaskKind::ModPow, 0.35),
        (TaskKind::DivisorCount, 0.6),
        (TaskKind::RangeSum, 0.7),
    ];
    let config = SftConfig {
        wrong_programs: shares.into_iter().collect(),
        ..SftConfig::default()
    };
    let demos = build_corpus(&tasks, &Template::compact(), &config, fake_executor(&tasks)).unwrap();
    for (kind, share) in shares {
        let of_kind: Vec<(&Task, &Demonstration)> = tasks
            .iter()
            .zip(&demos)
            .filter(|(t, _)| t.kind == kind)
            .collect();
        let wrong = of_kind.iter().filter(|(_, d)| d.wrong_program).count();
        // round(share · n), less any coincidences (a range sum starting at a multiple of k).
        let want = (share * of_kind.len() as f64).round() as usize;
        assert!(
            wrong <= want && wrong as f64 >= 0.9 * want as f64,
            "{kind:?}: {wrong} of {}",
            of_kind.len()
        );
        for (t, d) in &of_kind {
            let call = d.assistant_turns()[usize::from(d.bug.is_some())];
            if d.wrong_program {
                assert!(call.contains(&t.wrong_code()), "{call}");
                assert_eq!(d.answer, t.wrong_answer());
                assert_ne!(d.answer, t.answer());
            } else {
                assert!(call.contains(&t.solution_code()), "{call}");
                assert_eq!(d.answer, t.answer());
            }
        }
    }
    // The bugs are drawn as without wrong programs; a wrong program's bug is applied to it.
    let plain = build_corpus(
        &tasks,
        &Template::compact(),
        &SftConfig::default(),
        fake_executor(&tasks),
    )
    .unwrap();
    let bugs = |d: &[Demonstration]| d.iter().map(|d| d.bug).collect::<Vec<_>>();
    assert_eq!(bugs(&demos), bugs(&plain));
    assert!(plain.iter().all(|d| !d.wrong_program));
    // Another seed picks other demonstrations.
    let other = SftConfig {
        seed: 1,
        ..config.clone()
    };
    let moved = build_corpus(&tasks, &Template::compact(), &other, fake_executor(&tasks)).unwrap();
    let wrongs = |d: &[Demonstration]| d.iter().map(|d| d.wrong_program).collect::<Vec<_>>();
    assert_ne!(wrongs(&demos), wrongs(&moved));
    assert_eq!(
        demos,
        build_corpus(&tasks, &Template::compact(), &config, fake_executor(&tasks)).unwrap()
    );
}

#[test]
fn compact_demonstration_reads_as_designed() {
    let task = Task::new("t", TaskKind::Product, vec![12345, 6789]);
    let config = SftConfig::default();
    let mut exec = fake_executor(std::slice::from_ref(&task));
    let plain = demonstrate(&task, None, &Template::compact(), &config, &mut exec).unwrap();
    assert_eq!(
        plain.full_text(),
        "Q:What is 12345*6789?\nA:Multiply.<c>print(12345*6789)</c>\nO:83810205\nA:<answer>\\boxed{83810205}</answer>"
    );
    let typo = demonstrate(
        &task,
        Some(Bug::Typo),
        &Template::compact(),
        &config,
        &mut exec,
    )
    .unwrap();
    assert_eq!(
        typo.response_text(),
        "Multiply.<c>prnt(12345*6789)</c>\nO:NameError at line 1: name 'prnt' is not defined\nA:Fix.<c>print(12345*6789)</c>\nO:83810205\nA:<answer>\\boxed{83810205}</answer>"
    );
    assert_eq!(Bug::WrongFunction.apply(&task), "print(mul(12345,6789))");
    assert_eq!(Bug::SyntaxError.apply(&task), "print(12345*6789");
}

#[test]
fn chatml_demonstration_reads_as_designed() {
    let task = Task::new("t", TaskKind::ModPow, vec![3, 200, 1000]);
    let mut exec = fake_executor(std::slice::from_ref(&task));
    let d = demonstrate(
        &task,
        None,
        &Template::chatml(),
        &SftConfig::new(Limits::rstar2_agent()),
        &mut exec,
    )
    .unwrap();
    assert!(d.prompt.ends_with(
        "This is the problem:\nWhat is 3^200 mod 1000?<|im_end|>\n<|im_start|>assistant\n<reason>"
    ));
    assert_eq!(
        d.response_text(),
        "I need 3^200 modulo 1000; Python's three-argument pow does this exactly. This is error-prone by hand, so I will compute it with Python.</reason>\n<tool_call>\n{\"name\": \"python_code_with_standard_io\", \"arguments\": {\"code\": \"print(pow(3,200,1000))\", \"input\": \"\"}}\n</tool_call><|im_end|><|im_start|>user\n<tool_response>\nTool call success\nstdout: 1\n\nexecution time: 0.05s\n</tool_response><|im_end|>\n<|im_start|>assistant\n<reason>The code printed 1.</reason>\n<answer>\nThe answer is \\boxed{1}.\n</answer><|im_end|>"
    );
}

#[test]
fn demonstrations_replay_through_an_episode_identically() {
    let tasks = tasks(24);
    let tok = PairTokenizer;
    for (template, limits) in [
        (Template::compact(), Limits::compact()),
        (Template::chatml(), Limits::rstar2_agent()),
    ] {
        let config = SftConfig::new(limits.clone());
        let demos = build_corpus(&tasks, &template, &config, fake_executor(&tasks)).unwrap();
        for d in &demos {
            let (ids, mask) = d.encode(&tok);
            let turns = d.assistant_turns();
            let mut next = turns.iter();
            let t = Episode::new(
                &tok,
                &template,
                limits.clone(),
                &tasks.iter().find(|t| t.id == d.id).unwrap().problem_text(),
            )
            .run(
                |_, _| next.next().unwrap().to_string(),
                fake_executor(&tasks),
            )
            .unwrap()
            .finish()
            .unwrap();
            assert_eq!(t.stop, StopReason::NoToolCall, "{}", d.full_text());
            assert_eq!(t.prompt, d.prompt);
            let mut replay_ids = t.prompt_ids.clone();
            replay_ids.extend(&t.response_ids);
            let mut replay_mask = vec![0u8; t.prompt_ids.len()];
            replay_mask.extend(&t.loss_mask);
            assert_eq!(replay_ids, ids);
            assert_eq!(replay_mask, mask);
            assert_eq!(
                t.turns.iter().filter(|t| t.role == Role::Tool).count(),
                d.segments.len() / 2
            );
        }
    }
}

#[test]
fn compact_demonstrations_fit_a_character_model() {
    let tasks = tasks(60);
    let demos = build_corpus(
        &tasks,
        &Template::compact(),
        &SftConfig::default(),
        fake_executor(&tasks),
    )
    .unwrap();
    let tok = ByteTokenizer;
    let longest = demos.iter().map(|d| d.encode(&tok).0.len()).max().unwrap();
    assert!(longest <= 400, "{longest} characters");
}

#[test]
fn a_wrong_executor_is_caught() {
    let task = Task::new("t7", TaskKind::Product, vec![2000, 3000]);
    let config = SftConfig::default();
    let mut liar = |_: &_| ToolOutcome::code_judge(true, "", "5\n", "", 0.0);
    let err = demonstrate(&task, None, &Template::compact(), &config, &mut liar).unwrap_err();
    assert_eq!(
        err.to_string(),
        "demonstration for `t7`: the solution printed Some(\"5\") (Output), expected \"6000000\""
    );
    let err = demonstrate(
        &task,
        Some(Bug::Typo),
        &Template::compact(),
        &config,
        &mut liar,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("the buggy call (Typo) did not fail"),
        "{err}"
    );
}

#[test]
fn corpus_round_trips_through_jsonl() {
    let tasks = tasks(6);
    let demos = build_corpus(
        &tasks,
        &Template::chatml(),
        &SftConfig::new(Limits::rstar2_agent()),
        fake_executor(&tasks),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sft.jsonl");
    write_corpus(&path, &demos).unwrap();
    assert_eq!(read_corpus(&path).unwrap(), demos);
    std::fs::write(&path, "{}\n").unwrap();
    let err = read_corpus(&path).unwrap_err().to_string();
    assert!(err.contains("sft.jsonl:1: missing field"), "{err}");
}
