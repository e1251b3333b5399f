//! A tiny axum router served through `rstar_http::serve` with a connection cap of one and a
//! bearer check: the first client is answered, a second connection held open at the same time
//! gets the `503` naming `max_connections`, and a request without the token gets `401`.
//!
//! ```sh
//! cargo run -p rstar-http --example limits
//! ```

use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn hello(headers: HeaderMap) -> (StatusCode, &'static str) {
    if rstar_http::bearer_matches(&headers, "s3cret") {
        (StatusCode::OK, "hello\n")
    } else {
        (StatusCode::UNAUTHORIZED, "missing or wrong bearer token\n")
    }
}

/// One HTTP/1.1 request on a fresh connection; the status line and body of the answer.
async fn get_once(addr: std::net::SocketAddr, token: Option<&str>) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(addr).await?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!("GET / HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await?;
    let status = answer.lines().next().unwrap_or_default().to_string();
    let body = answer
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .trim()
        .to_string();
    Ok(format!("{status} | {body}"))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let limits = rstar_http::ConnectionLimits {
        max_connections: 1,
        header_timeout: Duration::from_secs(2),
        body_timeout: Duration::from_secs(2),
        body_min_rate: 1024,
    };
    let app = Router::new().route("/", get(hello));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(rstar_http::serve(listener, app, limits, async move {
        let _ = stopped.await;
    }));

    let with_token = get_once(addr, Some("s3cret")).await?;
    println!("with the token:    {with_token}");
    assert!(with_token.contains("200"), "{with_token}");
    let without = get_once(addr, None).await?;
    println!("without the token: {without}");
    assert!(without.contains("401"), "{without}");

    // Hold one connection open (it sends nothing yet), then try a second one.
    let _held = TcpStream::connect(addr).await?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let refused = get_once(addr, Some("s3cret")).await?;
    println!("over the cap:      {refused}");
    assert!(refused.contains("503"), "{refused}");

    let _ = stop.send(());
    server.await.map_err(std::io::Error::other)??;
    Ok(())
}
