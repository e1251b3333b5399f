//! Issue #71: request heads are timed by progress, as bodies are. A connection that sends no
//! byte for `header_timeout` is closed, as is one whose head trickles in below `body_min_rate`;
//! a long head that keeps arriving at the rate is read and answered whatever it takes; a
//! request being handled is never cut off, and the wait for the next head starts at the end of
//! the answer.

use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const IDLE: Duration = Duration::from_millis(600);

/// A router with `/` answered at once and `/slow` after twice [`IDLE`], served with a head
/// timeout of [`IDLE`] and a minimum rate of 1024 bytes a second.
async fn start() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().route("/", get(|| async { "hello" })).route(
        "/slow",
        get(|| async {
            tokio::time::sleep(2 * IDLE).await;
            "slow hello"
        }),
    );
    let limits = rstar_http::ConnectionLimits {
        max_connections: 64,
        header_timeout: IDLE,
        body_timeout: IDLE,
        body_min_rate: 1024,
    };
    tokio::spawn(rstar_http::serve(
        listener,
        app,
        limits,
        std::future::pending(),
    ));
    addr
}

/// Reads until the server closes the connection (or `limit` passes: `None`); what it sent.
async fn until_closed(stream: &mut TcpStream, limit: Duration) -> Option<String> {
    let mut got = Vec::new();
    tokio::time::timeout(limit, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .ok()?;
    Some(String::from_utf8_lossy(&got).into_owned())
}

/// A head of about `bytes` bytes: a GET of `/` with padding headers.
fn long_head(bytes: usize) -> Vec<u8> {
    let mut head = String::from("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
    let mut i = 0;
    while head.len() + 1_010 < bytes {
        head.push_str(&format!("x-pad-{i:03}: {}\r\n", "a".repeat(990)));
        i += 1;
    }
    head.push_str("\r\n");
    head.into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_sends_nothing_is_closed_after_header_timeout() {
    let addr = start().await;
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let started = Instant::now();
    let answer = until_closed(&mut silent, 10 * IDLE)
        .await
        .expect("a silent connection is closed");
    let took = started.elapsed();
    assert!(answer.is_empty(), "{answer}");
    assert!(
        took >= IDLE.mul_f64(0.8) && took < 4 * IDLE,
        "closed after {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_that_trickles_in_is_cut_off_by_the_rate() {
    let addr = start().await;
    let mut slow = TcpStream::connect(addr).await.unwrap();
    let head = long_head(4_000);
    let started = Instant::now();
    // A byte every 50 ms: never `IDLE` without progress, but 20 bytes a second.
    let sender = async {
        for b in &head {
            if slow.write_all(&[*b]).await.is_err() {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        true
    };
    let finished = tokio::time::timeout(Duration::from_secs(20), sender)
        .await
        .expect("the trickle was cut off");
    let took = started.elapsed();
    assert!(!finished, "the whole head was sent");
    // Cut at about IDLE (plus the few bytes' allowance); the write that notices comes later.
    assert!(took < 8 * IDLE, "cut off after {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_head_arriving_steadily_is_answered_after_many_header_timeouts() {
    let addr = start().await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    // 12 KB at about 3 KB a second: four seconds, over six head timeouts, above the rate.
    let head = long_head(12_000);
    let started = Instant::now();
    for chunk in head.chunks(300) {
        stream.write_all(chunk).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sent = started.elapsed();
    let answer = until_closed(&mut stream, Duration::from_secs(10))
        .await
        .expect("an answer");
    assert!(sent > 5 * IDLE, "sent in {sent:?}");
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.ends_with("hello"),
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_answer_is_not_cut_off_and_the_idle_wait_starts_after_it() {
    let addr = start().await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    // The handler takes twice the head timeout; its answer still comes, on a live connection.
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&got).ends_with("slow hello") {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .expect("the slow answer")
            .unwrap();
        assert!(
            n > 0,
            "closed before the answer: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    // Idle after its answer: closed one head timeout later, not at once.
    let answered = Instant::now();
    let rest = until_closed(&mut stream, 10 * IDLE).await.expect("closed");
    let idle = answered.elapsed();
    assert!(rest.is_empty(), "{rest}");
    assert!(
        idle >= IDLE.mul_f64(0.8) && idle < 4 * IDLE,
        "closed {idle:?} after the answer"
    );
}
