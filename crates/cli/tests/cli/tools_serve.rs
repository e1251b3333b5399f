//! End-to-end tests of `rstar tools serve`: it serves the code-judge and
//! SandboxFusion routes with a token, and stops cleanly on SIGTERM.

use rstar_testdata::http;

use super::common::Listening;

#[test]
fn serve_answers_both_protocols_and_stops_on_sigterm() {
    let server = Listening::start(
        super::common::command()
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
            .arg(rstar_testdata::python()),
    );
    let url = server.addr.clone();
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
    let (ok, rest) = server.stop("TERM");
    assert!(ok, "{rest}");
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
