//! Every field of SandboxFusion's `/run_code`.

use rstar_toolserver::ServerConfig;
use serde_json::{Value, json};

use super::common::{keys, post, server};

fn run_result(r: &Value, status: &str, return_code: Value, stdout: &str) -> Value {
    assert_eq!(
        keys(r),
        [
            "compile_result",
            "executor_pod_name",
            "files",
            "message",
            "run_result",
            "status"
        ],
        "{r}"
    );
    assert_eq!(
        (&r["compile_result"], &r["files"]),
        (&Value::Null, &json!({})),
        "{r}"
    );
    assert_eq!(r["executor_pod_name"], "rstar-toolserver");
    let run = r["run_result"].clone();
    assert_eq!(
        keys(&run),
        [
            "execution_time",
            "return_code",
            "status",
            "stderr",
            "stdout"
        ],
        "{r}"
    );
    assert_eq!(
        (&run["status"], &run["return_code"], &run["stdout"]),
        (&json!(status), &return_code, &json!(stdout)),
        "{r}"
    );
    assert!(
        run["execution_time"]
            .as_f64()
            .is_some_and(|t| (0.0..30.0).contains(&t)),
        "{r}"
    );
    run
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_code_fields() {
    let server = server(2, ServerConfig::code_judge()).await;
    let url = server.url();
    let (code, r) = post(
        &url,
        "/run_code",
        &json!({"code": "print(1 + 2)", "language": "python"}),
    )
    .await;
    assert_eq!(code, 200, "{r}");
    assert_eq!(
        (&r["status"], &r["message"]),
        (&json!("Success"), &json!("")),
        "{r}"
    );
    let run = run_result(&r, "Finished", json!(0), "3\n");
    assert_eq!(run["stderr"], "");

    let body = json!({"code": "print(input()[::-1])", "language": "python3", "stdin": "abc\n", "run_timeout": 5,
                      "compile_timeout": 5, "memory_limit_MB": 512, "files": {}, "fetch_files": []});
    let (_, r) = post(&url, "/run_code", &body).await;
    assert_eq!(r["status"], "Success", "{r}");
    run_result(&r, "Finished", json!(0), "cba\n");

    let (_, r) = post(
        &url,
        "/run_code",
        &json!({"code": "import sys\nprint('x')\nsys.exit(3)", "language": "python"}),
    )
    .await;
    assert_eq!(r["status"], "Failed", "{r}");
    run_result(&r, "Finished", json!(3), "x\n");

    let (_, r) = post(
        &url,
        "/run_code",
        &json!({"code": "raise ValueError('boom')", "language": "python"}),
    )
    .await;
    let run = run_result(&r, "Finished", json!(1), "");
    assert!(run["stderr"].as_str().unwrap().contains("boom"), "{r}");

    // `run_timeout` is per request.
    let (_, r) = post(
        &url,
        "/run_code",
        &json!({"code": "while True: pass", "language": "python", "run_timeout": 0.5}),
    )
    .await;
    assert_eq!(r["status"], "Failed", "{r}");
    assert_eq!(r["run_result"]["status"], "TimeLimitExceeded", "{r}");

    // Output beyond code-judge's 1000 characters is kept here.
    let (_, r) = post(
        &url,
        "/run_code",
        &json!({"code": "print('y' * 5000)", "language": "python"}),
    )
    .await;
    assert_eq!(r["run_result"]["stdout"].as_str().unwrap().len(), 5001);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_44_run_jupyter_fields_and_refusals() {
    let server = server(2, ServerConfig::code_judge()).await;
    let url = server.url();
    let (code, r) = post(
        &url,
        "/run_jupyter",
        &json!({"cells": ["import sys\nz = [1, 2]\nsys.stderr.write('warn\\n')", "z.append(3)\nlen(z)"]}),
    )
    .await;
    assert_eq!(code, 200, "{r}");
    assert_eq!(
        keys(&r),
        [
            "cells",
            "driver",
            "executor_pod_name",
            "files",
            "message",
            "status"
        ],
        "{r}"
    );
    assert_eq!((&r["status"], &r["files"]), (&json!("Success"), &json!({})));
    assert_eq!(
        keys(&r["cells"][0]),
        ["display", "error", "stderr", "stdout"],
        "{r}"
    );
    // The replayed first cell's stderr is not reported again with the second.
    assert_eq!(
        (&r["cells"][0]["stderr"], &r["cells"][1]["stderr"]),
        (&json!("warn\n"), &json!("")),
        "{r}"
    );
    assert_eq!(r["cells"][1]["stdout"], "3\n", "{r}");
    let driver = &r["driver"];
    assert_eq!(
        (&driver["status"], &driver["return_code"]),
        (&json!("Finished"), &json!(0))
    );
    assert!(driver["execution_time"].as_f64().is_some_and(|t| t > 0.0));
    // No cells: nothing to run, and a success.
    let (_, r) = post(&url, "/run_jupyter", &json!({"cells": []})).await;
    assert_eq!((&r["status"], &r["cells"]), (&json!("Success"), &json!([])));
    for (body, field) in [
        (json!({"cells": ["1"], "kernel": "ir"}), "kernel"),
        (json!({"cells": ["1"], "total_timeout": 0}), "total_timeout"),
        (json!({"cells": ["1"], "cell_timeout": -1}), "cell_timeout"),
        (json!({"cells": ["1"], "files": {"a.txt": "eA=="}}), "files"),
        (json!({"cell": ["1"]}), "cells"),
    ] {
        let (code, r) = post(&url, "/run_jupyter", &body).await;
        assert_eq!(code, 422, "{body}: {r}");
        assert!(r["detail"].as_str().unwrap().contains(field), "{body}: {r}");
    }
    server.shutdown().await.unwrap();
}
