//! `rstar serve --port 0` prints its address, answers, and stops cleanly on SIGINT.

use serde_json::json;

use super::common::{Listening, command};
use super::serve_common::{http, model_dir, post};

#[test]
fn serve_binary_answers_and_stops_on_sigint() {
    let server = Listening::start(
        command()
            .args([
                "serve",
                "--port",
                "0",
                "--template",
                "compact",
                "--served-model-name",
                "char",
            ])
            .arg("--model")
            .arg(model_dir()),
    );
    let (addr, line) = (server.addr.clone(), server.line.clone());
    assert!(
        line.contains("model `char`, context 4096 tokens, 1 engine(s)"),
        "{line}"
    );
    assert!(!addr.ends_with(":0"), "{addr}");
    assert_eq!(http(&addr, "GET", "/health", "").0, 200);
    let (status, models) = post(&addr, "/v1/models", &json!({}));
    assert_eq!(status, 405, "{models}");
    let (status, text) = http(&addr, "GET", "/v1/models", "");
    assert_eq!(status, 200);
    let models: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(models["data"][0]["id"], "char");
    // The compact chat layout: "Q:2+2?\nA:" is 9 tokens.
    let (status, chat) = post(
        &addr,
        "/v1/chat/completions",
        &json!({"model": "char", "messages": [{"role": "user", "content": "2+2?"}], "max_tokens": 3, "temperature": 0}),
    );
    assert_eq!(status, 200, "{chat}");
    assert_eq!(chat["usage"]["prompt_tokens"], 9);
    let (ok, rest) = server.stop("INT");
    assert!(ok, "{rest}");
    assert!(rest.contains("rstar serve: stopped"), "{rest}");
}

/// Issue 70: without `--template`, `rstar serve` picks the layout the checkpoint was trained
/// with, as `rstar eval` does (compact for the character tokenizer), and says so: a chat request
/// is the 9-token compact prompt, not the paper's 1,500-token ChatML system prompt that the
/// embedded default never saw.
#[test]
fn serve_picks_the_checkpoints_template_and_says_which() {
    let server = Listening::start(
        command()
            .args(["serve", "--port", "0"])
            .arg("--model")
            .arg(model_dir()),
    );
    assert!(
        server
            .line
            .contains("chat template compact from the checkpoint's tokenizer"),
        "{}",
        server.line
    );
    let (status, chat) = post(
        &server.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "2+2?"}], "max_tokens": 3, "temperature": 0}),
    );
    assert_eq!(status, 200, "{chat}");
    assert_eq!(chat["usage"]["prompt_tokens"], 9);
    let (ok, rest) = server.stop("INT");
    assert!(ok, "{rest}");
}

/// Issue 70: `--model` given a training run's directory (`runs/tiny`) instead of a checkpoint
/// in it is refused with the checkpoint to give.
#[test]
fn a_run_directory_as_the_model_names_its_checkpoint() {
    let run = tempfile::tempdir().unwrap();
    std::fs::write(run.path().join("config.json"), "{\"seed\": 0}").unwrap();
    let last = run.path().join("checkpoints").join("final");
    std::fs::create_dir_all(&last).unwrap();
    let data = run.path().join("problems.jsonl");
    std::fs::write(&data, "{\"question\": \"1+1?\", \"answer\": \"2\"}\n").unwrap();
    let data = data.to_str().unwrap();
    for args in [
        &["serve", "--port", "0", "--model"][..],
        &["eval", "--python", "python3", "--data", data, "--model"],
    ] {
        let out = command().args(args).arg(run.path()).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            stderr.contains("a training run's directory, not a model")
                && stderr.contains(&last.display().to_string()),
            "{args:?}: {stderr}"
        );
    }
}
