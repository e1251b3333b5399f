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
    // Issue #71: the default preset is the paper's, its queue life consistent with the queue.
    assert!(
        server
            .line
            .contains("preset paper: queue life 600 s, at most 32768 calls held"),
        "{}",
        server.line
    );
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
    let out = super::common::command()
        .args(["tools", "serve", "--preset", "fast"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--preset") && err.contains("expected paper or code-judge"),
        "{err}"
    );
}

#[test]
fn eval_with_tools_on_two_servers_scores_as_the_in_process_sandbox() {
    use rstar_agent::eval::EvalSummaryFile;
    use rstar_policy::{Tokenizer, WeightDtype, save_dir};

    use super::common::{run, tool_server};
    use super::train_common::{overfit, prompts, tasks};

    let dir = tempfile::tempdir().unwrap();
    // A policy that writes the format, so that its rollouts call the tools.
    let ts = tasks(6, 21);
    let model_dir = dir.path().join("model");
    save_dir(
        &overfit(&ts, 100),
        &Tokenizer::char(),
        &model_dir,
        WeightDtype::F32,
    )
    .unwrap();
    let data = dir.path().join("problems.jsonl");
    let lines: Vec<String> = prompts(&ts)
        .iter()
        .map(|p| serde_json::to_string(p).unwrap())
        .collect();
    std::fs::write(&data, lines.join("\n") + "\n").unwrap();
    let servers = [tool_server(), tool_server()];
    let urls: Vec<String> = servers
        .iter()
        .map(|s| format!("http://{}", s.addr))
        .collect();
    let python = rstar_testdata::python();
    let eval = |name: &str, extra: &[&str]| -> EvalSummaryFile {
        let out = dir.path().join(name);
        let mut args = vec![
            "eval",
            "--model",
            model_dir.to_str().unwrap(),
            "--data",
            data.to_str().unwrap(),
            "--samples",
            "2",
            "--temperature",
            "0.6",
            "--max-response-tokens",
            "160",
            "--seed",
            "5",
            "--workers",
            "1",
            "--json",
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let r = run(&args, None, &[("RSTAR_PYTHON", python.as_os_str())]);
        assert_eq!(r.code, 0, "{name}: {}", r.stderr);
        serde_json::from_str(&r.out()).unwrap()
    };
    let local = eval("local", &[]);
    let remote = eval("remote", &["--tools", &urls.join(",")]);
    let (l, r) = (&local.summary, &remote.summary);
    assert!(l.tool_calls_per_sample > 0.5, "{l:?}");
    assert_eq!(
        (l.avg_at_k, l.tool_calls_per_sample, l.tool_error_rate),
        (r.avg_at_k, r.tool_calls_per_sample, r.tool_error_rate),
        "{l:?}\n{r:?}"
    );
}
