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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_44_the_sandbox_fusion_client_runs_jupyter_cells_with_state() {
    let server = server(2, ServerConfig::code_judge()).await;
    let lines = python(&[
        script("sandbox_fusion_jupyter.py").display().to_string(),
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
    let stdout = |r: &Value| -> Vec<String> {
        r["cells"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["stdout"].as_str().unwrap().to_string())
            .collect()
    };
    // The second cell reads what the first defined; the third's value is printed.
    let state = case("state");
    assert_eq!(
        (&state["status"], &state["message"]),
        (&"Success".into(), &"".into()),
        "{state}"
    );
    assert_eq!(stdout(&state), ["set\n", "124\n", "246\n"], "{state}");
    assert_eq!(state["driver"]["status"], "Finished", "{state}");
    assert_eq!(state["executor_pod_name"], "rstar-toolserver");
    for cell in state["cells"].as_array().unwrap() {
        assert_eq!(
            (&cell["stderr"], &cell["error"], &cell["display"]),
            (&"".into(), &Value::Array(vec![]), &Value::Array(vec![])),
            "{state}"
        );
    }
    // A raising cell carries its exception; the cells around it keep the notebook's state.
    let error = case("error");
    assert_eq!(error["status"], "Success", "{error}");
    assert_eq!(stdout(&error), ["", "", "7\n"], "{error}");
    let raised = &error["cells"][1]["error"][0];
    assert_eq!(
        (&raised["ename"], &raised["evalue"]),
        (&"ValueError".into(), &"bad value".into()),
        "{error}"
    );
    assert!(error["cells"][0]["error"].as_array().unwrap().is_empty());
    // Out of time: SandboxFusion's `Failed` with the driver's `TimeLimitExceeded` and no cells.
    let timeout = case("timeout");
    assert_eq!(
        (
            &timeout["status"],
            &timeout["driver"]["status"],
            &timeout["cells"]
        ),
        (
            &"Failed".into(),
            &"TimeLimitExceeded".into(),
            &Value::Array(vec![])
        ),
        "{timeout}"
    );
    assert_eq!(case("async")["stdout"], serde_json::json!(["", "42\n"]));
    server.shutdown().await.unwrap();
}
