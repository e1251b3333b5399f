//! `rstar sft` end to end: bad rows listed by file and line, a mixed run that trains without
//! them, and an output directory that `rstar eval` and `rstar serve` load as they are.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::common::{Listening, command, run};
use super::serve_common::{http, post};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../train/tests/data")
        .join(name)
}

#[test]
fn rstar_sft_reports_bad_rows_trains_and_writes_a_model_eval_and_serve_load() {
    let dir = tempfile::tempdir().unwrap();
    let model = rstar_testdata::tiny_qwen3_dir(dir.path(), 2048);
    let good = data("function_calling.jsonl");
    let bad = data("function_calling_bad.jsonl");
    let out = dir.path().join("sft");
    let args = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "sft",
            "--model",
            model.to_str().unwrap(),
            "--sft-data",
            &format!("{}:1", good.display()),
            &format!("{}:0.5", bad.display()),
            "--out",
            out.to_str().unwrap(),
            "--epochs",
            "1",
            "--global-batch",
            "20",
            "--micro-batch-tokens",
            "8000",
            "--max-len",
            "2048",
            "--val-fraction",
            "0",
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        a.extend(extra.iter().map(ToString::to_string));
        a
    };

    // By default a bad row stops the run, each one named with its file and line.
    let r = run(&args(&[]), None, &[]);
    assert_ne!(r.code, 0);
    for (line, what) in [
        (4, "messages[1].role: unknown role \"function\""),
        (
            5,
            "messages[1].tool_calls[0].function.arguments: not valid JSON",
        ),
        (6, "3075 tokens, longer than the context (max_len 2048)"),
    ] {
        assert!(
            r.stderr
                .contains(&format!("{}:{line}: {what}", bad.display())),
            "{}",
            r.stderr
        );
    }
    assert!(r.stderr.contains("--bad-rows drop"), "{}", r.stderr);

    // Dropped: 36 + 3 rows mixed 1 : 0.5 (26 and 13 examples), two steps of up to 20.
    let out_dir = out.to_str().unwrap().to_string();
    std::fs::remove_dir_all(&out).unwrap();
    let r = run(&args(&["--bad-rows", "drop"]), None, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("39 training and 0 validation conversations from 2 files"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("3 bad rows (0 truncated"), "{}", r.stderr);
    assert!(r.stderr.contains("sft step 2/2 (epoch 1)"), "{}", r.stderr);
    let model_dir = format!("{out_dir}/model");
    assert_eq!(r.out().trim(), model_dir);
    for file in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        assert!(Path::new(&model_dir).join(file).is_file(), "{file}");
    }

    // `rstar eval` takes the directory as it is.
    let problems = dir.path().join("problems.jsonl");
    std::fs::write(
        &problems,
        "{\"id\": \"a\", \"problem\": \"What is 2+2?\", \"answer\": \"4\"}\n",
    )
    .unwrap();
    let eval_out = dir.path().join("eval");
    let r = run(
        &[
            "eval",
            "--model",
            &model_dir,
            "--data",
            problems.to_str().unwrap(),
            "--samples",
            "1",
            "--temperature",
            "0",
            "--max-response-tokens",
            "8",
            "--out",
            eval_out.to_str().unwrap(),
        ],
        None,
        &[("RSTAR_PYTHON", rstar_testdata::python().as_os_str())],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(eval_out.join("summary.json").is_file());

    // So does `rstar serve`: it answers a chat request in the model's ChatML.
    let server = Listening::start(command().args(["serve", "--port", "0", "--model", &model_dir]));
    let (addr, line) = (server.addr.clone(), server.line.clone());
    assert!(line.contains("context 2048 tokens"), "{line}");
    assert_eq!(http(&addr, "GET", "/health", "").0, 200);
    let (status, chat) = post(
        &addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "2+2?"}], "max_tokens": 2, "temperature": 0}),
    );
    assert_eq!(status, 200, "{chat}");
    assert_eq!(chat["usage"]["completion_tokens"], 2, "{chat}");
    let (ok, rest) = server.stop("INT");
    assert!(ok, "{rest}");
}
