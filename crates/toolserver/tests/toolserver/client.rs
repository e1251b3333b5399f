//! The batching client: batching, retries of `queue_timeout`, endpoint choice.

use std::time::Duration;

use rstar_toolserver::api::{Reason, RunCodeRequest, RunStatus, Submission};
use rstar_toolserver::{Client, ServerConfig};

use super::common::server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_keep_order_and_ids() {
    let server = server(2, ServerConfig::code_judge()).await;
    let client = Client::builder()
        .endpoint(server.url())
        .batch_size(16)
        .build()
        .unwrap();
    let subs: Vec<_> = (0..100)
        .map(|i| Submission::python(format!("print({i} + 1)")).with_sub_id(format!("c{i}")))
        .collect();
    let results = client.run_batch(subs).await;
    assert_eq!(results.len(), 100);
    for (i, r) in results.iter().enumerate() {
        assert_eq!(
            (r.sub_id.clone(), r.stdout.clone(), r.success),
            (format!("c{i}"), Some(format!("{}\n", i + 1)), true)
        );
    }
    assert_eq!(client.loads()[0].sent, 100);
    // Single calls through the batcher, concurrently.
    let handles: Vec<_> = (0..40)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .run(Submission::python("print(input())").with_input(format!("{i}")))
                    .await
            })
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.await.unwrap().stdout, Some(format!("{i}\n")));
    }
    let r = client
        .run_single(Submission::python("print(2)").with_expected_output("2"))
        .await;
    assert!(r.success, "{r:?}");
    let r = client
        .run_code(&RunCodeRequest::python("print(5)"))
        .await
        .unwrap();
    assert_eq!(
        (r.status, r.run_result.unwrap().stdout),
        (RunStatus::Success, Some("5\n".into()))
    );
    // A bad submission is a result too, not a panic or a lost call.
    let mut bad = Submission::python("1").with_sub_id("bad");
    bad.kind = "ruby".into();
    let r = client.run_batch(vec![bad]).await;
    assert_eq!(
        (r[0].sub_id.as_str(), r[0].reason),
        ("bad", Reason::InvalidInput)
    );
    assert!(r[0].stderr.as_deref().unwrap().contains("ruby"));
    server.shutdown().await.unwrap();
}

/// One worker, a 0.3 s queue limit, four 0.2 s calls in one `/run/batch`:
/// the third and fourth must wait at least 0.4 s, so they come back
/// `queue_timeout` the first time and the client re-sends them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_timeouts_are_retried_with_backoff() {
    let config = ServerConfig {
        queue_timeout_s: 0.3,
        ..ServerConfig::code_judge()
    };
    let server = server(1, config).await;
    let subs: Vec<_> = (0..4)
        .map(|i| {
            Submission::python(format!("import time\ntime.sleep(0.2)\nprint({i})"))
                .with_sub_id(format!("r{i}"))
        })
        .collect();
    let no_retry = Client::builder()
        .endpoint(server.url())
        .long_batch(false)
        .max_retries(0)
        .build()
        .unwrap();
    let first = no_retry.run_batch(subs.clone()).await;
    assert!(
        first
            .iter()
            .filter(|r| r.reason == Reason::QueueTimeout)
            .count()
            >= 2,
        "{first:?}"
    );
    let client = Client::builder()
        .endpoint(server.url())
        .long_batch(false)
        .max_retries(12)
        .backoff(Duration::from_millis(20))
        .build()
        .unwrap();
    let results = client.run_batch(subs).await;
    for (i, r) in results.iter().enumerate() {
        assert_eq!(
            (r.sub_id.clone(), r.stdout.clone(), r.reason),
            (format!("r{i}"), Some(format!("{i}\n")), Reason::None)
        );
    }
    assert!(
        client.loads()[0].sent > 4,
        "the timed-out calls were sent again: {:?}",
        client.loads()
    );
    server.shutdown().await.unwrap();
}

/// Two servers, one of them with a long queue: calls go to the other one;
/// a dead endpoint is skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_go_where_the_queue_is_short() {
    let busy = server(1, ServerConfig::code_judge()).await;
    let idle = server(1, ServerConfig::code_judge()).await;
    // Fill the busy server's queue with patient calls that sleep.
    let filler = Client::builder()
        .endpoint(busy.url())
        .batch_size(8)
        .build()
        .unwrap();
    let fill = tokio::spawn(async move {
        filler
            .run_batch(
                (0..8)
                    .map(|_| Submission::python("import time\ntime.sleep(0.3)"))
                    .collect(),
            )
            .await
    });
    for _ in 0..500 {
        if busy.status().queue >= 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(busy.status().queue >= 5, "{:?}", busy.status());
    let client = Client::builder()
        .endpoint(busy.url())
        .endpoint(idle.url())
        .endpoint("http://127.0.0.1:1")
        .batch_size(1)
        .concurrency(1)
        .status_interval(Duration::from_millis(1))
        .backoff(Duration::from_millis(10))
        .build()
        .unwrap();
    for i in 0..2 {
        client.status(i).await.unwrap();
    }
    let results = client
        .run_batch(
            (0..6)
                .map(|i| Submission::python(format!("print({i})")))
                .collect(),
        )
        .await;
    assert!(results.iter().all(|r| r.success), "{results:?}");
    let loads = client.loads();
    assert_eq!(loads[0].sent, 0, "{loads:?}");
    assert_eq!(loads[1].sent, 6, "{loads:?}");
    assert!(fill.await.unwrap().iter().all(|r| r.run_success));
    busy.shutdown().await.unwrap();
    idle.shutdown().await.unwrap();
}
