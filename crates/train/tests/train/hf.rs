//! `rstar train --model <HF dir> --data FILE` end to end through [`rstar_train::run`]: a real HF
//! Qwen3 checkpoint (the `qwen3_tiny` fixture's weights and config) with a byte-level HF
//! `tokenizer.json`, trained on the problems of a JSONL dataset file. The HF tokenizer switches
//! the SFT demonstrations, the RL rollouts and the evaluations to the ChatML template.

use std::path::{Path, PathBuf};

use burn::tensor::Device;
use rstar_episode::episode::{Limits, StopReason, Trajectory};
use rstar_episode::template::{Template, TemplateFormat};
use rstar_episode::toolcall::{ToolCall, ToolOutcome};
use rstar_policy::{Sampling, Tokenizer};
use rstar_rollout::{FnExecutor, Prompt, RolloutConfig, rollout};
use rstar_train::sft::SftStep;
use rstar_train::{EvalRow, TrainConfig};
use serde_json::{Value, json};

use super::common::jsonl;

/// The tokens of the longest ChatML prompt of `problems`.
fn longest_prompt(tokenizer: &Tokenizer, problems: &[(&str, &str)]) -> usize {
    problems
        .iter()
        .map(|(p, _)| {
            let prompt = Template::chatml().render_prompt(p);
            tokenizer.encode(&prompt).unwrap().len()
        })
        .max()
        .unwrap()
}

/// Integer-answer problems (the shared datasets' JSONL layout: `id`, `problem`, `answer`,
/// `source`).
const PROBLEMS: [(&str, &str); 8] = [
    ("What is 17 + 25?", "42"),
    ("What is 9 * 8?", "72"),
    ("What is 100 - 37?", "63"),
    ("What is 144 / 12?", "12"),
    ("What is 2 to the power 10?", "1024"),
    ("What is 7 * 13?", "91"),
    ("What is 250 + 250?", "500"),
    ("What is 81 - 19?", "62"),
];

/// Writes `dir/model` ([`rstar_testdata::tiny_qwen3_dir`]).
pub(super) fn hf_model_dir(dir: &Path, max_pos: usize) -> PathBuf {
    rstar_testdata::tiny_qwen3_dir(dir, max_pos)
}

/// Writes the byte-level tokenizer to `path` and loads it.
pub(super) fn write_tokenizer(path: &Path) -> Tokenizer {
    std::fs::write(path, rstar_testdata::byte_level_tokenizer_json()).unwrap();
    Tokenizer::from_hf_file(path).unwrap()
}

#[test]
fn the_byte_level_tokenizer_is_an_hf_tokenizer_of_single_byte_tokens_and_chatml_tags() {
    let dir = tempfile::tempdir().unwrap();
    let tok = write_tokenizer(&dir.path().join("tokenizer.json"));
    assert!(matches!(tok, Tokenizer::Hf(_)));
    assert_eq!(tok.vocab_size(), 265);
    // "a" is byte 97, " " byte 32, "é" the bytes 0xc3 0xa9; the tags are whole tokens.
    assert_eq!(
        tok.encode("<|im_start|>a é<|im_end|>").unwrap(),
        [257, 97, 32, 0xc3, 0xa9, 258]
    );
    assert_eq!(tok.encode("<tool_call>\n").unwrap(), [259, 10]);
    let text = "<|im_start|>user\n<tool_response>\n  x = 1\n</tool_response><|im_end|>";
    assert_eq!(tok.decode(&tok.encode(text).unwrap()).unwrap(), text);
    assert_eq!(rstar_train::template_for(&tok), TemplateFormat::ChatMl);
}

#[test]
fn a_rollout_that_reaches_the_models_context_ends_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let probe = write_tokenizer(&dir.path().join("probe.json"));
    let short = [PROBLEMS[1]];
    let prompt_len = longest_prompt(&probe, &short);
    // 24 tokens of context left after the short prompt; the long problem's prompt alone is
    // longer than the context.
    let max_pos = prompt_len + 24;
    let (model, tok) =
        rstar_policy::load_dir(&hf_model_dir(dir.path(), max_pos), &Device::flex()).unwrap();
    let long_problem = format!("What is {}1?", "1 + ".repeat(20));
    let prompts = [
        Prompt::new("short", short[0].0, short[0].1),
        Prompt::new("long", long_problem, "21"),
    ];
    let config = RolloutConfig {
        template: TemplateFormat::ChatMl,
        limits: Limits::rstar2_agent(),
        sampling: Sampling::Greedy,
        seed: 1,
        max_batch: 0,
        eos: Vec::new(),
        per_rollout_seeds: false,
        weight_version: None,
    };
    let tools = FnExecutor::new(|_: &ToolCall| ToolOutcome::code_judge(true, "", "6\n", "", 0.0));
    let out = rollout(&model, &tok, &prompts, 2, &config, &tools).unwrap();
    let [a, b, c, d] = &out.trajectories[..] else {
        panic!("4 trajectories")
    };
    // The untrained model writes no `<|im_end|>` in 24 tokens: its turn stops at the context,
    // far below the 8192-token response budget, and the response counts as truncated.
    for t in [a, b] {
        assert_eq!(t.prompt_ids.len(), prompt_len);
        assert_eq!(t.response_ids.len(), 24);
        assert_eq!((t.stop, t.truncated), (StopReason::TokenBudget, true));
        assert_eq!(t.reward, Some(0.0));
    }
    // A prompt longer than the context gets no turn at all, instead of failing the rollout.
    for t in [c, d] {
        assert!(t.prompt_ids.len() > max_pos);
        assert!(t.response_ids.is_empty() && t.turns.is_empty());
        assert_eq!((t.stop, t.truncated), (StopReason::TokenBudget, true));
    }
}

#[test]
fn an_hf_checkpoint_trains_on_a_dataset_file_with_the_chatml_template() {
    let dir = tempfile::tempdir().unwrap();
    let probe = write_tokenizer(&dir.path().join("probe.json"));
    let prompt_len = longest_prompt(&probe, &PROBLEMS);
    // Room for the smoke stages' 128 response tokens; evaluation (whose ChatML budget is
    // 8192 tokens) stops at the model's context.
    let max_pos = prompt_len + 160;
    let model_dir = hf_model_dir(dir.path(), max_pos);
    let data = dir.path().join("problems.jsonl");
    let lines: Vec<String> = PROBLEMS
        .iter()
        .enumerate()
        .map(|(i, (problem, answer))| {
            json!({"id": format!("p{i}"), "problem": problem, "answer": answer, "source": "test"})
                .to_string()
        })
        .collect();
    std::fs::write(&data, lines.join("\n") + "\n").unwrap();

    let mut config = TrainConfig::smoke();
    config.init = Some(model_dir.clone());
    config.data = Some(data.clone());
    // Each step is seconds (ChatML prompts of byte-level tokens): three show the loss falling.
    config.sft.steps = 3;
    config.sft.batch_size = 2;
    config.sft.corpus_size = 3;
    config.sft.warmup_steps = 0;
    config.sft.lr = 1e-2;
    config.sft.log_every = 0;
    config.eval.problems = 2;
    // One RL step per stage: the stages, their evaluations and the hard stage's check all run.
    for stage in &mut config.curriculum.stages {
        stage.steps = Some(1);
    }
    config.tools.python = rstar_testdata::python();
    config.tools.workers = 2;
    let out = dir.path().join("run");
    let mut log = Vec::new();
    let report = rstar_train::run(&config, &out, &Device::flex(), |l| log.push(l.to_string()))
        .unwrap_or_else(|e| panic!("the run fails: {e}\n{}", log.join("\n")));
    assert!(report.finished);
    assert!(
        log.iter().any(|l| l.contains("starting from the model in")),
        "{log:?}"
    );

    // The resolved config records the model and the data.
    let saved: TrainConfig =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(saved.init.as_deref(), Some(model_dir.as_path()));
    assert_eq!(saved.data.as_deref(), Some(data.as_path()));

    // SFT on ChatML demonstrations: the corpus is in the ChatML layout and the loss goes down.
    let corpus = std::fs::read_to_string(out.join("sft_corpus.jsonl")).unwrap();
    assert_eq!(corpus.lines().count(), 3);
    assert!(
        corpus.contains("<|im_start|>assistant\\n<reason>"),
        "{corpus}"
    );
    assert!(corpus.contains("<tool_call>"), "{corpus}");
    let sft: Vec<SftStep> = jsonl(&out.join("sft_metrics.jsonl"));
    assert_eq!(sft.len(), 3);
    let first = sft[0].loss;
    let last = sft[2].loss;
    assert!(
        first.is_finite() && last < 0.8 * first,
        "SFT loss {first} -> {last}: {sft:?}"
    );

    // Three stages of one RL step each.
    let metrics: Vec<Value> = jsonl(&out.join("metrics.jsonl"));
    let stages: Vec<&str> = metrics
        .iter()
        .map(|m| m["stage_name"].as_str().unwrap())
        .collect();
    assert_eq!(stages, ["short", "long", "hard"]);
    assert_eq!(metrics.last().unwrap()["decision"].as_str(), Some("finish"));

    // Evaluations after SFT and after each stage, on the two held-out problems.
    let evals: Vec<EvalRow> = jsonl(&out.join("eval.jsonl"));
    assert_eq!(
        evals.iter().map(|e| e.phase.as_str()).collect::<Vec<_>>(),
        ["sft", "stage short", "stage long", "stage hard"]
    );
    assert!(evals.iter().all(|e| e.greedy.count == 2));
    assert_eq!(report.evals, evals);

    // The final policy's held-out trajectories are ChatML, on problems of the data file.
    let samples: Vec<Trajectory> = jsonl(&out.join("samples.jsonl"));
    assert_eq!(samples.len(), 2);
    for t in &samples {
        assert_eq!(t.template, TemplateFormat::ChatMl);
        assert!(t.prompt.starts_with("<|im_start|>system\n"), "{}", t.prompt);
        assert!(t.prompt.ends_with("<|im_start|>assistant\n<reason>"));
        let (problem, answer) = PROBLEMS
            .iter()
            .find(|(p, _)| t.prompt.contains(p))
            .expect("a problem of the data file");
        assert_eq!(t.ground_truth.as_deref(), Some(*answer), "{problem}");
        assert!(t.prompt_ids.len() <= prompt_len && t.prompt_ids.contains(&257));
        // Evaluation's ChatML budget (8192 tokens) is beyond the context: a trajectory that
        // fills the context is truncated.
        let len = t.prompt_ids.len() + t.response_ids.len();
        assert!(len <= max_pos);
        if len == max_pos {
            assert_eq!((t.stop, t.truncated), (StopReason::TokenBudget, true));
        }
    }

    // The saved checkpoints reload as HF Qwen3 with the HF tokenizer.
    for phase in ["sft", "stage-hard"] {
        let (model, tok) =
            rstar_policy::load_dir(&out.join("checkpoints").join(phase), &Device::flex()).unwrap();
        assert!(matches!(tok, Tokenizer::Hf(_)), "{phase}");
        assert_eq!(tok.vocab_size(), 265);
        assert_eq!(tok.token_to_id("<|im_end|>"), Some(258));
        assert_eq!(model.config.vocab_size, 512);
        assert_eq!(model.config.max_position_embeddings, max_pos);
        assert!(!model.config.tie_word_embeddings && model.config.qk_norm);
    }
}
