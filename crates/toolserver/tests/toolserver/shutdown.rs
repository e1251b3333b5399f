//! Graceful shutdown: in-flight calls finish, new ones get a 503 that says why.

use rstar_toolserver::{Client, DRAINING_MESSAGE, Error, ServerConfig};
use serde_json::json;

use super::code_judge::wait_running;
use super::common::{get, post, server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_calls_finish_and_new_ones_are_refused() {
    let server = server(1, ServerConfig::code_judge()).await;
    let url = server.url();
    let in_flight = tokio::spawn({
        let url = url.clone();
        async move {
            post(&url, "/run", &json!({"sub_id": "f", "type": "python", "solution": "import time\ntime.sleep(1)\nprint('finished')"}))
                .await
        }
    });
    wait_running(&url).await;
    server.begin_shutdown();
    for path in ["/run", "/run/batch", "/run_code"] {
        let (code, r) = post(
            &url,
            path,
            &json!({"type": "python", "solution": "print(1)"}),
        )
        .await;
        assert_eq!(
            (code, r["detail"].as_str()),
            (503, Some(DRAINING_MESSAGE)),
            "{path}"
        );
    }
    let (code, status) = get(&url, "/status").await;
    assert_eq!((code, status["draining"].as_bool()), (200, Some(true)));
    server.shutdown().await.unwrap();
    let (code, r) = in_flight.await.unwrap();
    assert_eq!(
        (code, r["sub_id"].as_str(), r["stdout"].as_str()),
        (200, Some("f"), Some("finished\n")),
        "{r}"
    );
    // The listener is closed now.
    let client = Client::builder().endpoint(url).build().unwrap();
    assert!(matches!(client.ping(0).await, Err(Error::Transport { .. })));
}
