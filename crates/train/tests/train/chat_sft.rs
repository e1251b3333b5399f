//! `rstar sft`'s library ([`rstar_agent::chat_sft`]): conversations rendered as Qwen3's own
//! chat template renders them (checked against Jinja running the real template), tokenized with
//! the real Qwen3 tokenizer with the loss on the assistant tokens only, then trained on the tiny
//! Qwen3 fixture: the loss falls, a killed run resumes to the same numbers, bad rows are
//! reported by file and line, and the result starts the `rstar2-agent` RL preset as it is.
//!
//! Training uses the fixture with the byte-level tokenizer of [`rstar_testdata::tiny_qwen3_dir`]
//! (the real tokenizer's 151 669 ids do not fit the fixture's 512-token vocabulary) and the
//! real Qwen3 `tokenizer_config.json`, so the template is detected as a user's would be.

use std::path::{Path, PathBuf};

use burn::tensor::Device;
use rstar_episode::chat::{ChatFormat, Conversation, Json};
use rstar_policy::Tokenizer;
use rstar_train::chat_sft::{
    self, BadRow, BadRows, ChatSftConfig, ChatSftStep, DataSpec, tokenize_chat,
};
use rstar_train::{RunOptions, TrainConfig};

use super::common::jsonl;
use super::hf::hf_model_dir;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn conversations(name: &str) -> Vec<Conversation> {
    std::fs::read_to_string(data(name))
        .unwrap()
        .lines()
        .map(|l| Conversation::from_json(&Json::parse(l).unwrap()).unwrap())
        .collect()
}

#[test]
fn every_row_renders_as_jinja_renders_qwen3s_own_template() {
    let config = rstar_testdata::fixture("qwen/tokenizer_qwen3/tokenizer_config.json");
    let rows = std::fs::read_to_string(data("function_calling.jsonl")).unwrap();
    let want = rstar_testdata::render_chat(&config, &rows, false);
    let convs = conversations("function_calling.jsonl");
    assert_eq!(want.len(), 36);
    assert_eq!(convs.len(), want.len());
    // The template must be the one we detect.
    let template: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    assert_eq!(
        ChatFormat::detect(template["chat_template"].as_str().unwrap()),
        Some(ChatFormat::Qwen3)
    );
    for (i, (conv, want)) in convs.iter().zip(&want).enumerate() {
        assert_eq!(ChatFormat::Qwen3.render(conv).text, *want, "row {}", i + 1);
    }
}

#[test]
fn a_row_with_two_tool_calls_tokenizes_with_the_loss_on_the_assistant_turns_only() {
    let tok = Tokenizer::from_hf_file(&rstar_testdata::fixture(
        "qwen/tokenizer_qwen3/tokenizer.json",
    ))
    .unwrap();
    let conv = &conversations("function_calling.jsonl")[0];
    let rendered = ChatFormat::Qwen3.render(conv);
    // Written out by hand from Qwen3's template: the tool schema in the system turn, both
    // calls in one assistant turn, both results in one user turn, the empty think block on
    // the final answer (it ends the conversation after the last user query).
    let system = "<|im_start|>system\nYou are a helpful assistant that uses tools when they help.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Current weather for a city.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City name\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"celsius\", \"fahrenheit\"]}}, \"required\": [\"city\"]}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";
    let user = "<|im_start|>user\nIs it warmer in Paris or in Lima right now?<|im_end|>\n<|im_start|>assistant\n";
    let calls = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lima\"}}\n</tool_call><|im_end|>";
    let results = "\n<|im_start|>user\n<tool_response>\n{\"city\": \"Paris\", \"temperature\": 18}\n</tool_response>\n<tool_response>\n{\"city\": \"Lima\", \"temperature\": 22}\n</tool_response><|im_end|>\n<|im_start|>assistant\n";
    let answer = "<think>\n\n</think>\n\nIt is warmer in Lima (22 °C against 18 °C).<|im_end|>";
    assert_eq!(
        rendered.text,
        format!("{system}{user}{calls}{results}{answer}\n")
    );

    let (ids, weights) = tokenize_chat(&rendered, &tok).unwrap();
    assert_eq!(ids, tok.encode(&rendered.text).unwrap());
    assert_eq!(ids.len(), weights.len());
    // The runs of trained tokens are exactly the two assistant turns, tokenized as they are
    // alone (each starts on an added token: `<tool_call>` 151657, `<think>` 151667) and each
    // ends on `<|im_end|>` 151645.
    let mut runs: Vec<Vec<u32>> = Vec::new();
    for (i, (&id, &w)) in ids.iter().zip(&weights).enumerate() {
        if w > 0.0 {
            if i == 0 || weights[i - 1] == 0.0 {
                runs.push(Vec::new());
            }
            runs.last_mut().unwrap().push(id);
        }
    }
    assert_eq!(
        runs,
        [tok.encode(calls).unwrap(), tok.encode(answer).unwrap()]
    );
    assert_eq!((runs[0][0], *runs[0].last().unwrap()), (151_657, 151_645));
    assert_eq!((runs[1][0], *runs[1].last().unwrap()), (151_667, 151_645));
    assert_eq!(runs[0].iter().filter(|&&t| t == 151_657).count(), 2);
    // Nothing else is trained: not the headers, the system or user turns, the tool results.
    let untrained: Vec<u32> = ids
        .iter()
        .zip(&weights)
        .filter(|(_, w)| **w == 0.0)
        .map(|(&t, _)| t)
        .collect();
    let rest = format!("{system}{user}{results}\n");
    assert_eq!(
        tok.decode(&untrained).unwrap(),
        rest,
        "the untrained tokens are the rest of the text"
    );
    assert!(untrained.contains(&151_665) && untrained.contains(&151_644));
}

#[test]
fn parquet_rows_read_as_their_jsonl_twins() {
    // Written by pyarrow: `messages` a list of structs (fields absent from a message are null),
    // `tools` a JSON string; `line` is the row's line in the JSONL file.
    let path = data("function_calling.parquet");
    let rows = rstar_tasks::conversations::read_conversations(&path).unwrap();
    let jsonl = conversations("function_calling.jsonl");
    let lines = [1, 3, 5, 7, 9, 11, 13, 14, 15, 16, 17, 18];
    assert_eq!(rows.len(), lines.len());
    for (i, (row, line)) in rows.iter().zip(lines).enumerate() {
        assert_eq!(row.at.to_string(), format!("{}: row {i}", path.display()));
        let conv = row.conversation.as_ref().unwrap();
        assert_eq!(
            ChatFormat::Qwen3.render(conv),
            ChatFormat::Qwen3.render(&jsonl[line - 1]),
            "row {i}"
        );
    }
}

/// The settings of these runs: 32 training and 4 validation rows, 4 steps of 8 an epoch, two
/// epochs.
fn small(model: PathBuf, data: Vec<DataSpec>) -> ChatSftConfig {
    let mut c = ChatSftConfig::rstar2_agent_sft(model, data);
    c.epochs = 2;
    c.lr = 3e-3;
    c.global_batch = 8;
    c.micro_batch_tokens = 6000;
    c.max_len = 2048;
    c.val_fraction = 0.1;
    c.eval_every = 0;
    c.checkpoint_every = 1;
    c
}

/// [`small`] on the 36 function-calling conversations.
fn on_function_calls(model: PathBuf) -> ChatSftConfig {
    let spec = data("function_calling.jsonl")
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    small(model, vec![spec])
}

/// What a resumed run must repeat: each step's batch exactly, its loss, learning rate and
/// gradient norm to JSON's round trip of an f64 (serde_json's parser may be one unit in the
/// last place off; any real divergence is many orders larger).
fn same_steps(a: &[ChatSftStep], b: &[ChatSftStep]) {
    assert_eq!(a.len(), b.len());
    let close = |x: f64, y: f64| (x - y).abs() <= 1e-12 * x.abs().max(y.abs());
    for (x, y) in a.iter().zip(b) {
        assert_eq!(
            (x.step, x.tokens, x.examples),
            (y.step, y.tokens, y.examples)
        );
        assert!(
            close(x.loss, y.loss) && close(x.lr, y.lr) && close(x.grad_norm, y.grad_norm),
            "{x:?}\n{y:?}"
        );
    }
}

#[test]
fn the_loss_falls_a_killed_run_resumes_exactly_and_the_result_starts_rl_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let model = hf_model_dir(dir.path(), 2048);
    let config = on_function_calls(model);
    let device = Device::flex();
    let mut log = Vec::new();
    let out = dir.path().join("sft");
    let report = chat_sft::run(&config, &out, &device, None, &mut |l| {
        log.push(l.to_string());
    })
    .unwrap_or_else(|e| panic!("rstar sft fails: {e}\n{}", log.join("\n")));
    assert!(
        log[0]
            .starts_with("qwen3 template; 32 training and 4 validation conversations from 1 files"),
        "{log:?}"
    );
    assert_eq!(report.steps.len(), 8);
    assert!(report.bad.is_empty());
    // The loss falls: on the training batches and on the held-out rows.
    let mean = |s: &[ChatSftStep]| s.iter().map(|x| x.loss).sum::<f64>() / s.len() as f64;
    let (first, last) = (mean(&report.steps[..3]), mean(&report.steps[5..]));
    assert!(last < 0.8 * first, "loss {first} -> {last}");
    let before = report.val_loss_before.unwrap();
    let after = report.steps.last().unwrap().val_loss.unwrap();
    assert!(after < 0.8 * before, "validation loss {before} -> {after}");
    // Each step sees a global batch of 8 in micro-batches of at most 6000 padded tokens, and
    // is written to sft_metrics.jsonl.
    assert!(
        report
            .steps
            .iter()
            .all(|s| s.examples == 8 && s.micro_batches >= 2)
    );
    let saved: Vec<ChatSftStep> = jsonl(&out.join("sft_metrics.jsonl"));
    same_steps(&saved, &report.steps);

    // Killed after 3 steps and resumed: the same steps.
    let out2 = dir.path().join("sft-resumed");
    let stopped = chat_sft::run(&config, &out2, &device, Some(3), &mut |_| {}).unwrap();
    assert_eq!(stopped.steps.len(), 3);
    assert!(!out2.join("model").exists());
    let again = chat_sft::run(&config, &out2, &device, None, &mut |_| {}).unwrap_err();
    assert!(again.to_string().contains("rstar sft --resume"), "{again}");
    let resumed = chat_sft::resume(&out2, &device, None, &mut |_| {}).unwrap();
    same_steps(&resumed.steps, &report.steps);

    // The output is an HF directory with the input's chat template, and the `rstar2-agent`
    // preset (its batch and budgets shrunk to fit a test) starts RL from it as it is.
    let model_dir = report.model_dir;
    assert_eq!(
        std::fs::read(model_dir.join("tokenizer_config.json")).unwrap(),
        std::fs::read(config.model.join("tokenizer_config.json")).unwrap()
    );
    let (m, tok) = rstar_policy::load_dir(&model_dir, &device).unwrap();
    assert_eq!((m.config.vocab_size, tok.vocab_size()), (512, 265));
    let problems = dir.path().join("problems.jsonl");
    std::fs::write(
        &problems,
        (0..4)
            .map(|i| format!("{{\"id\": \"p{i}\", \"problem\": \"What is {i} + {i}?\", \"answer\": \"{}\"}}\n", 2 * i))
            .collect::<String>(),
    )
    .unwrap();
    let mut rl = TrainConfig::rstar2_agent();
    rl.init = Some(model_dir);
    rl.data = Some(problems);
    rl.rl.prompts_per_step = 2;
    rl.rl.group_size = 2;
    rl.rl.max_batch = 8;
    rl.eval.problems = 1;
    // Short turns, so that one step takes seconds on a CPU: the stages' budgets cut to 48
    // tokens (the model's context would stop them near 1 000).
    for stage in &mut rl.curriculum.stages {
        stage.max_response_tokens = 48;
    }
    rl.eval.max_response_tokens = Some(48);
    rl.tools.python = rstar_testdata::python();
    rl.tools.workers = 2;
    let rl_out = dir.path().join("rl");
    let mut rl_log = Vec::new();
    let options = RunOptions {
        stop_after_rl_steps: Some(1),
        ..RunOptions::default()
    };
    let rl_report = rstar_train::run_with(
        &rl,
        &rl_out,
        &device,
        &options,
        &mut rstar_train::LogLines(|l: &str| rl_log.push(l.to_string())),
    )
    .unwrap_or_else(|e| panic!("rstar2-agent RL fails: {e}\n{}", rl_log.join("\n")));
    assert_eq!(rl_report.rl_steps, 1, "{rl_log:?}");
}

#[test]
fn bad_rows_are_reported_by_file_and_line_and_dropped_or_truncated_as_asked() {
    let dir = tempfile::tempdir().unwrap();
    let model = hf_model_dir(dir.path(), 2048);
    let bad_file = data("function_calling_bad.jsonl");
    let mut config = small(model, vec![bad_file.to_str().unwrap().parse().unwrap()]);
    let device = Device::flex();
    let at = |line: usize| format!("{}:{line}", bad_file.display());

    // `fail` (the default) lists every bad row and trains on nothing.
    let err = chat_sft::run(
        &config,
        &dir.path().join("fail"),
        &device,
        None,
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("3 bad rows"), "{err}");
    assert!(
        err.contains(&format!(
            "{}: messages[1].role: unknown role \"function\"",
            at(4)
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{}: messages[1].tool_calls[0].function.arguments: not valid JSON",
            at(5)
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{}: 3075 tokens, longer than the context (max_len 2048)",
            at(6)
        )),
        "{err}"
    );
    assert!(
        !dir.path().join("fail/sft_metrics.jsonl").exists() || {
            std::fs::read_to_string(dir.path().join("fail/sft_metrics.jsonl"))
                .unwrap()
                .is_empty()
        }
    );

    // `drop` trains on the three good rows; `truncate` keeps the long one, cut to the context
    // (its first assistant turn fits).
    for (policy, kept, truncated) in [(BadRows::Drop, 3, false), (BadRows::Truncate, 4, true)] {
        config.bad_rows = policy;
        config.val_fraction = 0.0;
        config.global_batch = 2;
        config.epochs = 1;
        let out = dir.path().join(format!("{policy:?}"));
        let mut log = Vec::new();
        let report = chat_sft::run(&config, &out, &device, Some(1), &mut |l| {
            log.push(l.to_string());
        })
        .unwrap();
        assert!(
            log[0].contains(&format!("{kept} training and 0 validation conversations")),
            "{log:?}"
        );
        let bad: Vec<BadRow> = jsonl(&out.join("bad_rows.jsonl"));
        assert_eq!(bad, report.bad);
        assert_eq!(
            bad.iter().map(|b| b.at.clone()).collect::<Vec<_>>(),
            [at(4), at(5), at(6)]
        );
        assert_eq!(bad[2].truncated, truncated);
        assert!(!bad[0].truncated && !bad[1].truncated);
    }
}

#[test]
fn a_tokenizer_that_does_not_fit_the_model_and_rows_beyond_its_context_are_refused() {
    let device = Device::flex();
    let spec: DataSpec = data("function_calling.jsonl")
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    // The real Qwen3 tokenizer over the fixture's 512-token vocabulary.
    let dir = tempfile::tempdir().unwrap();
    let model = hf_model_dir(dir.path(), 2048);
    std::fs::copy(
        rstar_testdata::fixture("qwen/tokenizer_qwen3/tokenizer.json"),
        model.join("tokenizer.json"),
    )
    .unwrap();
    let err = chat_sft::run(
        &small(model, vec![spec.clone()]),
        &dir.path().join("a"),
        &device,
        None,
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("is beyond the model's vocabulary (512)"),
        "{err}"
    );
    assert!(err.contains("function_calling.jsonl:"), "{err}");

    // A 256-position model: `max_len` 2048 is capped to its context, and the longer rows are
    // bad rows.
    let dir = tempfile::tempdir().unwrap();
    let model = hf_model_dir(dir.path(), 256);
    let mut log = Vec::new();
    let err = chat_sft::run(
        &small(model, vec![spec]),
        &dir.path().join("b"),
        &device,
        None,
        &mut |l| {
            log.push(l.to_string());
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        log[0].contains("using 256 (max_position_embeddings)"),
        "{log:?}"
    );
    assert!(
        err.contains("longer than the context (max_len 256)"),
        "{err}"
    );
}

#[test]
fn lora_sft_trains_adapters_resumes_exactly_and_writes_the_adapter_and_the_merged_model() {
    let dir = tempfile::tempdir().unwrap();
    let model = hf_model_dir(dir.path(), 2048);
    let mut config = on_function_calls(model.clone());
    config.epochs = 1;
    config.lora = Some(rstar_policy::LoraConfig::new(4, 8.0));
    let device = Device::flex();
    let out = dir.path().join("sft");
    let mut log = Vec::new();
    let report = chat_sft::run(&config, &out, &device, None, &mut |l| {
        log.push(l.to_string());
    })
    .unwrap_or_else(|e| panic!("rstar sft --lora fails: {e}\n{}", log.join("\n")));
    assert!(
        log.iter()
            .any(|l| l.starts_with("LoRA rank 4 (alpha 8) on q_proj")),
        "{log:?}"
    );
    assert_eq!(report.steps.len(), 4);
    let (first, last) = (report.steps[0].loss, report.steps[3].loss);
    assert!(last < first, "loss {first} -> {last}");
    // The checkpoint holds the adapters and the base's digest, not the model.
    let last_dir = out.join("checkpoints/last");
    assert!(!last_dir.join("model.safetensors").exists());
    let state = rstar_train::checkpoint::read_state(&last_dir).unwrap();
    let base_model = rstar_policy::load_model(&model, &device).unwrap();
    let base = state.lora_base.expect("a LoRA checkpoint names its base");
    assert_eq!(base.digest, base_model.base_digest().unwrap());
    assert_eq!(base.path, std::path::absolute(&model).unwrap());
    // The adapter (PEFT's layout) over the base is the merged model, bit for bit.
    let adapted =
        rstar_policy::lora::load_adapter(base_model.clone(), &out.join("adapter")).unwrap();
    let merged = rstar_policy::load_model(&report.model_dir, &device).unwrap();
    assert_eq!(adapted.hf_tensors().unwrap(), merged.hf_tensors().unwrap());
    assert_ne!(
        merged.hf_tensors().unwrap(),
        base_model.hf_tensors().unwrap()
    );

    // Stopped after 2 steps and resumed: the same steps and the same adapter.
    let out2 = dir.path().join("sft-resumed");
    chat_sft::run(&config, &out2, &device, Some(2), &mut |_| {}).unwrap();
    let resumed = chat_sft::resume(&out2, &device, None, &mut |_| {}).unwrap();
    same_steps(&resumed.steps, &report.steps);
    assert_eq!(
        std::fs::read(out.join("adapter/adapter_model.safetensors")).unwrap(),
        std::fs::read(out2.join("adapter/adapter_model.safetensors")).unwrap()
    );
    // A bad rank is named by its field.
    config.lora = Some(rstar_policy::LoraConfig::new(0, 8.0));
    let err =
        chat_sft::run(&config, &dir.path().join("bad"), &device, None, &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("lora.rank"), "{err}");
}
