//! Cross-check with `rstar-verifier`: every generated answer is a valid ground truth, and every demonstration's assistant text earns reward 1.

use rstar_episode::episode::{Episode, Limits, Score};
use rstar_episode::template::Template;
use rstar_tasks::tasks::sft::{SftConfig, build_corpus};
use rstar_tasks::tasks::{Split, TaskConfig, TaskSet};
use rstar_testdata::PairTokenizer;

use super::common::fake_executor;

#[test]
fn demonstrations_verify_with_the_real_verifier() {
    let set = TaskSet::new(TaskConfig::embedded_default()).unwrap();
    let mut tasks = set.generate(Split::Train, 12, 9).unwrap();
    tasks.extend(set.generate(Split::HeldOutKinds, 12, 9).unwrap());
    for (template, limits) in [
        (Template::compact(), Limits::compact()),
        (Template::chatml(), Limits::rstar2_agent()),
    ] {
        let demos = build_corpus(
            &tasks,
            &template,
            &SftConfig::new(limits.clone()),
            fake_executor(&tasks),
        )
        .unwrap();
        for (task, demo) in tasks.iter().zip(&demos) {
            let mut turns = demo.assistant_turns().into_iter();
            let t = Episode::new(
                &PairTokenizer,
                &template,
                limits.clone(),
                &task.problem_text(),
            )
            .with_ground_truth(task.answer())
            .run(
                |_, _| turns.next().unwrap().to_string(),
                fake_executor(&tasks),
            )
            .unwrap()
            .finish_scored(|text| {
                let v = rstar_verifier::verify(text, &task.answer()).unwrap();
                Score {
                    answer: v.extracted.clone(),
                    reward: f32::from(v.reward),
                }
            })
            .unwrap();
            assert_eq!(
                t.reward,
                Some(1.0),
                "{}: {}",
                task.key(),
                t.assistant_text()
            );
            assert_eq!(t.answer.as_deref(), Some(task.answer().as_str()));
            // A wrong ground truth gets reward 0.
            let wrong = format!("{}1", task.answer());
            assert_eq!(
                rstar_verifier::verify(&t.assistant_text(), &wrong)
                    .unwrap()
                    .reward,
                0
            );
        }
    }
}
