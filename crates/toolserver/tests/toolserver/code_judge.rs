//! Every field of the code-judge protocol, and its `queue_timeout` semantics.

use rstar_toolserver::ServerConfig;
use serde_json::{Value, json};

use super::common::{get, keys, post, server};

const RESULT_KEYS: [&str; 7] = [
    "cost",
    "reason",
    "run_success",
    "stderr",
    "stdout",
    "sub_id",
    "success",
];

fn check(r: &Value, sub_id: &str, success: bool, run_success: bool, stdout: &str, reason: &str) {
    assert_eq!(keys(r), RESULT_KEYS, "{r}");
    assert_eq!(r["sub_id"], sub_id, "{r}");
    assert_eq!(r["success"], success, "{r}");
    assert_eq!(r["run_success"], run_success, "{r}");
    assert_eq!(r["stdout"], stdout, "{r}");
    assert_eq!(r["reason"], reason, "{r}");
    let cost = r["cost"].as_f64().expect("cost is a number");
    assert!((0.0..30.0).contains(&cost), "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_status_and_run_fields() {
    let server = server(2, ServerConfig::code_judge()).await;
    let url = server.url();
    assert_eq!(get(&url, "/ping").await, (200, json!("pong")));
    let (code, status) = get(&url, "/status").await;
    assert_eq!(code, 200);
    assert_eq!(
        keys(&status),
        [
            "admitted",
            "completed",
            "draining",
            "max_queue",
            "num_workers",
            "queue",
            "refused",
            "restarts",
            "running",
            "workers"
        ]
    );
    assert_eq!(
        (status["queue"].as_u64(), status["num_workers"].as_u64()),
        (Some(0), Some(2)),
        "{status}"
    );

    let run = |body: Value| {
        let url = url.clone();
        async move {
            let (code, r) = post(&url, "/run", &body).await;
            assert_eq!(code, 200, "{r}");
            r
        }
    };
    let r = run(
        json!({"sub_id": "s1", "type": "python", "solution": "print(input() * 2)", "input": "ab"}),
    )
    .await;
    check(&r, "s1", true, true, "abab\n", "");
    assert_eq!(r["stderr"], "");
    // `expected_output` is compared after stripping both sides.
    let r = run(json!({"sub_id": "s2", "type": "python", "solution": "print(' 42 ')", "expected_output": "42\n"})).await;
    check(&r, "s2", true, true, " 42 \n", "");
    let r = run(
        json!({"sub_id": "s3", "type": "python", "solution": "print(41)", "expected_output": "42"}),
    )
    .await;
    check(&r, "s3", false, true, "41\n", "");
    let r =
        run(json!({"sub_id": "s4", "type": "python", "solution": "print('before')\n1/0"})).await;
    check(&r, "s4", false, false, "before\n", "");
    assert!(
        r["stderr"].as_str().unwrap().contains("ZeroDivisionError"),
        "{r}"
    );
    let r = run(json!({"sub_id": "s5", "type": "python", "solution": "while True: pass"})).await;
    check(&r, "s5", false, false, "", "worker_timeout");
    // code-judge cuts both streams to 1000 characters.
    let r = run(json!({"sub_id": "s6", "type": "python", "solution": "import sys\nprint('é' * 5000)\nsys.stderr.write('x' * 3000)"})).await;
    assert_eq!(r["stdout"].as_str().unwrap().chars().count(), 1000);
    assert_eq!(r["stderr"].as_str().unwrap(), "x".repeat(1000));
    // Options are accepted; a missing sub_id is made up, distinct per call.
    let a = run(json!({"type": "python", "solution": "print(1)", "options": {"k": "v"}})).await;
    let b = run(json!({"type": "python", "solution": "print(1)"})).await;
    let (a, b) = (a["sub_id"].as_str().unwrap(), b["sub_id"].as_str().unwrap());
    assert!(!a.is_empty() && a != b, "{a} {b}");
    // `/judge` is `/run` without the streams.
    let (code, r) = post(
        &url,
        "/judge",
        &json!({"sub_id": "j", "type": "python", "solution": "print(1)"}),
    )
    .await;
    assert_eq!((code, &r["success"]), (200, &json!(true)), "{r}");
    // Issue 44: code-judge's `JudgeResult` has no stream fields, rather than `null` ones.
    assert_eq!(
        keys(&r),
        ["cost", "reason", "run_success", "sub_id", "success"],
        "{r}"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_answer_in_order() {
    let server = server(2, ServerConfig::code_judge()).await;
    let url = server.url();
    let subs: Vec<Value> = (0..5)
        .map(|i| json!({"sub_id": format!("b{i}"), "type": "python", "solution": format!("print({i} * int(input()))"), "input": "3"}))
        .collect();
    for path in ["/run/batch", "/run/long-batch"] {
        let (code, r) = post(
            &url,
            path,
            &json!({"sub_id": "batch-1", "type": "batch", "submissions": subs}),
        )
        .await;
        assert_eq!(code, 200, "{r}");
        assert_eq!(keys(&r), ["results", "sub_id"]);
        assert_eq!(r["sub_id"], "batch-1");
        let results = r["results"].as_array().unwrap();
        assert_eq!(results.len(), 5);
        for (i, res) in results.iter().enumerate() {
            check(
                res,
                &format!("b{i}"),
                true,
                true,
                &format!("{}\n", 3 * i),
                "",
            );
        }
    }
    // The judge twin drops the streams.
    let (code, r) = post(
        &url,
        "/judge/batch",
        &json!({"type": "batch", "submissions": [subs[1]]}),
    )
    .await;
    assert_eq!(code, 200, "{r}");
    assert_eq!(
        keys(&r["results"][0]),
        ["cost", "reason", "run_success", "sub_id", "success"],
        "{r}"
    );
    assert!(!r["sub_id"].as_str().unwrap().is_empty());
    server.shutdown().await.unwrap();
}

/// With the only worker busy for 2 s and a 0.3 s queue limit, calls behind
/// it are answered `queue_timeout` and never run: once the busy call is done
/// nothing is queued or running. `/run/long-batch` waits instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_timeout_drops_work_that_waited_too_long() {
    let config = ServerConfig {
        queue_timeout_s: 0.3,
        ..ServerConfig::code_judge()
    };
    let server = server(1, config).await;
    let url = server.url();
    let slow = json!({"sub_id": "slow", "type": "python", "solution": "import time\ntime.sleep(2)\nprint('done')"});
    let busy = tokio::spawn({
        let url = url.clone();
        async move { post(&url, "/run", &slow).await }
    });
    wait_running(&url).await;
    let queued: Vec<Value> = (0..3)
        .map(|i| json!({"sub_id": format!("q{i}"), "type": "python", "solution": "import time\ntime.sleep(2)\nprint('ran')"}))
        .collect();
    let (code, r) = post(
        &url,
        "/run/batch",
        &json!({"type": "batch", "submissions": queued}),
    )
    .await;
    assert_eq!(code, 200, "{r}");
    let results = r["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    for (i, res) in results.iter().enumerate() {
        check(res, &format!("q{i}"), false, false, "", "queue_timeout");
        assert_eq!(res["cost"], 0.0);
    }
    // A single /run behind the busy worker times out the same way.
    let (_, r) = post(
        &url,
        "/run",
        &json!({"sub_id": "late", "type": "python", "solution": "print(1)"}),
    )
    .await;
    check(&r, "late", false, false, "", "queue_timeout");
    let (code, r) = busy.await.unwrap();
    assert_eq!(code, 200);
    check(&r, "slow", true, true, "done\n", "");
    let (_, status) = get(&url, "/status").await;
    assert_eq!(
        (status["running"].as_u64(), status["queue"].as_u64()),
        (Some(0), Some(0)),
        "{status}"
    );

    // /run/long-batch has no queue limit: everything runs, one after another.
    let fast: Vec<Value> = (0..3)
        .map(|i| json!({"sub_id": format!("l{i}"), "type": "python", "solution": "import time\ntime.sleep(0.4)\nprint('ran')"}))
        .collect();
    let (_, r) = post(
        &url,
        "/run/long-batch",
        &json!({"type": "batch", "submissions": fast}),
    )
    .await;
    for (i, res) in r["results"].as_array().unwrap().iter().enumerate() {
        check(res, &format!("l{i}"), true, true, "ran\n", "");
    }
    server.shutdown().await.unwrap();
}

/// Polls `/status` until a call is running.
pub async fn wait_running(url: &str) {
    for _ in 0..500 {
        let (_, s) = get(url, "/status").await;
        if s["running"].as_u64() > Some(0) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("no call started running");
}
