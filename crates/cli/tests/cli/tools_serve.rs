//! End-to-end tests of `rstar tools serve`: it serves the code-judge and
//! SandboxFusion routes with a token, and stops cleanly on SIGTERM.

use std::io::{BufRead, BufReader, Read};

use rstar_testdata::http;
use std::process::{Command, Stdio};

#[test]
fn serve_answers_both_protocols_and_stops_on_sigterm() {
    let mut child = super::common::command()
        .args([
            "tools",
            "serve",
            "--port",
            "0",
            "--workers",
            "1",
            "--preload=",
            "--token",
            "t0k",
            "--python",
        ])
        .arg(rstar_testdata::python())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let url = loop {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "the server exited before listening"
        );
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    let run = r#"{"sub_id":"cli","type":"python","solution":"print(6 * 7)"}"#;
    let (status, body) = http(&url, "POST", "/run", run, Some("t0k"));
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (
            v["sub_id"].as_str(),
            v["stdout"].as_str(),
            v["success"].as_bool()
        ),
        (Some("cli"), Some("42\n"), Some(true))
    );
    assert_eq!(http(&url, "POST", "/run", run, None).0, 401);
    assert_eq!(http(&url, "GET", "/ping", "", None).0, 200);
    let (status, body) = http(
        &url,
        "POST",
        "/run_code",
        r#"{"code":"print(1)","language":"python"}"#,
        Some("t0k"),
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""status":"Success""#), "{body}");
    let (status, body) = http(&url, "POST", "/run", "{oops", Some("t0k"));
    assert_eq!(status, 400, "{body}");
    assert!(
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let exit = child.wait().unwrap();
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert!(exit.success(), "{exit:?}: {rest}");
    assert!(rest.contains("stopped"), "{rest}");
}

#[test]
fn serve_rejects_bad_options() {
    let out = super::common::command()
        .args(["tools", "serve", "--queue-timeout", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--queue-timeout must be positive"));
}
