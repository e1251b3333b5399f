//! Issue 42: what one client can hold against `rstar tools serve`. Slow clients are cut off
//! by the head and body timeouts, connections over the cap get a clear 503, and the bearer
//! scheme is read case-insensitively.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use hyper::Method;
use rstar_testdata::read_until_closed;
use rstar_toolserver::ServerConfig;

use super::common::{raw, server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_42_slow_clients_are_cut_off_and_connections_over_the_cap_refused() {
    let config = ServerConfig {
        max_connections: 4,
        header_timeout_s: 0.8,
        body_timeout_s: 0.8,
        ..ServerConfig::code_judge()
    };
    let server = server(1, config).await;
    let addr = server.addr().to_string();
    let answers = tokio::task::spawn_blocking(move || {
        let mut slow: Vec<TcpStream> = Vec::new();
        // Two slow bodies, one half head, one silent connection: the cap of four.
        for _ in 0..2 {
            let mut s = TcpStream::connect(&addr).unwrap();
            write!(
                s,
                "POST /run HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{{"
            )
            .unwrap();
            slow.push(s);
        }
        let mut s = TcpStream::connect(&addr).unwrap();
        write!(s, "GET /ping HTTP/1.1\r\nHo").unwrap();
        slow.push(s);
        slow.push(TcpStream::connect(&addr).unwrap());
        std::thread::sleep(Duration::from_millis(100));
        let mut extra = TcpStream::connect(&addr).unwrap();
        let refused = read_until_closed(&mut extra, Duration::from_secs(5)).expect("an answer");
        let cut: Vec<Option<String>> = slow
            .iter_mut()
            .map(|s| read_until_closed(s, Duration::from_secs(10)))
            .collect();
        (refused, cut)
    })
    .await
    .unwrap();
    let (refused, cut) = answers;
    assert!(
        refused.starts_with("HTTP/1.1 503") && refused.contains("max_connections"),
        "{refused}"
    );
    for (i, answer) in cut.iter().enumerate() {
        let answer = answer
            .as_ref()
            .unwrap_or_else(|| panic!("slow client {i} was never cut off"));
        if i < 2 {
            assert!(
                answer.starts_with("HTTP/1.1 408") && answer.contains("body_timeout"),
                "client {i}: {answer}"
            );
        }
    }
    // The slots are free again.
    let (status, _) = raw(&server.url(), Method::GET, "/ping", None, None).await;
    assert_eq!(status, 200);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_42_the_bearer_scheme_is_case_insensitive() {
    let config = ServerConfig {
        token: Some("s3cret".into()),
        ..ServerConfig::code_judge()
    };
    let server = server(1, config).await;
    let addr = server.addr().to_string();
    let statuses = tokio::task::spawn_blocking(move || {
        ["Bearer", "bearer", "BEARER", "Basic", "Bearers"]
            .iter()
            .map(|scheme| {
                let mut s = TcpStream::connect(&addr).unwrap();
                write!(
                    s,
                    "GET /status HTTP/1.1\r\nHost: x\r\nAuthorization: {scheme} s3cret\r\nConnection: close\r\n\r\n"
                )
                .unwrap();
                let answer = read_until_closed(&mut s, Duration::from_secs(5)).unwrap();
                answer.split_whitespace().nth(1).unwrap().to_string()
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    assert_eq!(statuses, ["200", "200", "200", "401", "401"]);
    server.shutdown().await.unwrap();
}
