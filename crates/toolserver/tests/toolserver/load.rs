//! 1000 concurrent requests are all answered exactly once, and killing a
//! worker process under load loses none.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use rstar_toolserver::api::Submission;
use rstar_toolserver::{Client, ServerConfig};
use serde_json::json;

use super::common::{post, server, server_and_pool};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_requests_are_answered_once() {
    let server = server(2, ServerConfig::local()).await;
    let url = server.url();
    let handles: Vec<_> = (0..1000)
        .map(|i| {
            let url = url.clone();
            tokio::spawn(async move {
                let body = json!({"sub_id": format!("id-{i}"), "type": "python", "solution": format!("print({i} * 3)")});
                post(&url, "/run", &body).await
            })
        })
        .collect();
    let mut seen = BTreeSet::new();
    for (i, h) in handles.into_iter().enumerate() {
        let (code, r) = h.await.unwrap();
        assert_eq!(code, 200, "{r}");
        assert_eq!(
            (r["sub_id"].as_str(), r["stdout"].as_str()),
            (
                Some(format!("id-{i}").as_str()),
                Some(format!("{}\n", i * 3).as_str())
            )
        );
        assert!(
            seen.insert(r["sub_id"].as_str().unwrap().to_string()),
            "duplicate {r}"
        );
    }
    assert_eq!(seen.len(), 1000);
    let status = server.status();
    assert_eq!((status.queue, status.running), (0, 0), "{status:?}");
    server.shutdown().await.unwrap();
}

/// Worker processes: direct children of this test process whose working
/// directory is in the pool's run directory (the forked per-call children
/// are the workers' children; other tests' pools have other directories).
fn worker_pids(run_dir: &Path) -> Vec<i32> {
    let me = std::process::id().to_string();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // Fields after the parenthesised command: state, ppid, ...
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let ppid = rest.split_whitespace().nth(1).unwrap_or("");
        let in_pool =
            std::fs::read_link(entry.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(run_dir));
        if ppid == me && in_pool {
            pids.push(pid);
        }
    }
    pids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_worker_under_load_loses_no_request() {
    let (server, pool) = server_and_pool(2, ServerConfig::local()).await;
    let client = Client::builder()
        .endpoint(server.url())
        .batch_size(64)
        .concurrency(4)
        .build()
        .unwrap();
    let subs: Vec<_> = (0..400)
        .map(|i| {
            Submission::python(format!("import time\ntime.sleep(0.005)\nprint({i})"))
                .with_sub_id(format!("k{i}"))
        })
        .collect();
    let run = tokio::spawn({
        let client = client.clone();
        async move { client.run_batch(subs).await }
    });
    // Wait until calls are running, then kill one worker mid-load.
    let mut killed = None;
    for _ in 0..1000 {
        if server.status().running > 0
            && let Some(&pid) = worker_pids(&pool.run_dir()).first()
        {
            let status = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status()
                .unwrap();
            assert!(status.success());
            killed = Some(pid);
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        killed.is_some(),
        "no worker process found among this process's children"
    );
    let results = run.await.unwrap();
    assert_eq!(results.len(), 400);
    let mut seen = BTreeSet::new();
    for (i, r) in results.iter().enumerate() {
        assert_eq!(
            (r.sub_id.clone(), r.stdout.clone(), r.success),
            (format!("k{i}"), Some(format!("{i}\n")), true),
            "{r:?}"
        );
        assert!(seen.insert(r.sub_id.clone()));
    }
    let mut restarts = 0;
    for _ in 0..200 {
        restarts = server.status().restarts;
        if restarts >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        restarts >= 1,
        "the killed worker {killed:?} was replaced: {:?}",
        server.status()
    );
    server.shutdown().await.unwrap();
}
