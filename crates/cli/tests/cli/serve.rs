//! `rstar serve --port 0` prints its address, answers, and stops cleanly on SIGINT.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use serde_json::json;

use super::serve_common::{http, model_dir, post};

#[test]
fn serve_binary_answers_and_stops_on_sigint() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rstar"))
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
        .arg(model_dir())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let addr = loop {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "the server exited before listening"
        );
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
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
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    let code = child.wait().unwrap();
    assert!(code.success(), "{code:?}: {rest}");
    assert!(rest.contains("rstar serve: stopped"), "{rest}");
}
