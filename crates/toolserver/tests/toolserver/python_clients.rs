//! Python clients against the server: the real `sandbox-fusion` PyPI client,
//! and a code-judge client written from its protocol.

use std::path::PathBuf;

use rstar_toolserver::ServerConfig;
use serde_json::Value;

use super::common::server;

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// Runs a script with the test interpreter (async, so the in-process server keeps serving).
async fn python(args: &[String]) -> Vec<Value> {
    let python = rstar_testdata::python();
    let out = tokio::process::Command::new(&python)
        .args(args)
        .output()
        .await
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{} {args:?} failed (is the xtask virtualenv in RSTAR_PYTHON? run `cargo xtask venv`):\n{stdout}\n{}",
        python.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_fusion_client_works_unchanged() {
    let server = server(2, ServerConfig::code_judge()).await;
    let lines = python(&[
        script("sandbox_fusion_client.py").display().to_string(),
        server.url(),
    ])
    .await;
    let case = |name: &str| {
        lines
            .iter()
            .find(|l| l["case"] == name)
            .unwrap_or_else(|| panic!("no {name} in {lines:?}"))
            .clone()
    };
    let sum = case("sum");
    assert_eq!(
        (&sum["status"], &sum["message"], &sum["summary"]),
        (&"Success".into(), &"".into(), &"Success".into()),
        "{sum}"
    );
    let run = &sum["run_result"];
    assert_eq!(
        (
            &run["status"],
            &run["return_code"],
            &run["stdout"],
            &run["stderr"]
        ),
        (&"Finished".into(), &0.into(), &"3\n".into(), &"".into()),
        "{sum}"
    );
    assert!(run["execution_time"].as_f64().is_some_and(|t| t >= 0.0));
    assert_eq!(case("stdin")["run_result"]["stdout"], "cba\n");
    let exit3 = case("exit3");
    assert_eq!(
        (
            &exit3["status"],
            &exit3["summary"],
            &exit3["run_result"]["return_code"]
        ),
        (&"Failed".into(), &"RunFailed".into(), &3.into())
    );
    let timeout = case("timeout");
    assert_eq!(
        (&timeout["summary"], &timeout["run_result"]["status"]),
        (&"RunTimeout".into(), &"TimeLimitExceeded".into()),
        "{timeout}"
    );
    assert_eq!(case("async")["stdout"], "7\n");
    let cpp = case("cpp")["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        cpp.contains("422") && cpp.contains("unsupported language `cpp`"),
        "{cpp}"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_judge_client_gets_a_thousand_answers() {
    let server = server(2, ServerConfig::local()).await;
    let lines = python(&[
        script("code_judge_client.py").display().to_string(),
        server.url(),
        "1000".into(),
    ])
    .await;
    assert_eq!(
        lines.last(),
        Some(&serde_json::json!({"answered": 1000, "distinct": 1000}))
    );
    server.shutdown().await.unwrap();
}
