//! Bad input gets a 4xx with a message, auth gets a 401, and none of it
//! stops the server.

use hyper::Method;
use rstar_toolserver::ServerConfig;
use serde_json::json;

use super::common::{get, post, raw, server};

async fn check(url: &str, path: &str, body: &[u8], status: u16, needle: &str) {
    let (code, r) = raw(url, Method::POST, path, Some(body.to_vec()), None).await;
    assert_eq!(
        code,
        status,
        "{path} {}: {r}",
        String::from_utf8_lossy(body)
    );
    let detail = r["detail"]
        .as_str()
        .unwrap_or_else(|| panic!("no detail in {r}"));
    assert!(detail.contains(needle), "{detail:?} lacks {needle:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_with_a_message() {
    let config = ServerConfig {
        max_body_bytes: 4096,
        max_batch: 8,
        ..ServerConfig::code_judge()
    };
    let server = server(1, config).await;
    let url = server.url();
    let cases: &[(&str, &[u8], u16, &str)] = &[
        ("/run", b"{not json", 400, "malformed JSON at line 1"),
        ("/run", b"", 400, "malformed JSON"),
        ("/run", br#"{"type":"python"}"#, 422, "missing field `solution`"),
        ("/run", br#"{"type":"python","solution":7}"#, 422, "invalid type"),
        ("/run", br#"{"type":"ruby","solution":"puts 1"}"#, 422, "unsupported submission type `ruby`"),
        ("/run", br#"{"type":"cpp","solution":"int main(){}"}"#, 422, "this server runs python only"),
        ("/run/batch", br#"{"type":"batch","submissions":[]}"#, 422, "at least one submission"),
        ("/run/batch", br#"{"type":"batch","submissions":[{"type":"python","solution":"1"},{"type":"go","solution":"1"}]}"#, 422, "submissions[1].type"),
        ("/run/long-batch", br#"{"type":"single","submissions":[{"type":"python","solution":"1"}]}"#, 422, "expected `batch`"),
        ("/run_code", br#"{"code":"print(1)","language":"rust"}"#, 422, "unsupported language `rust`"),
        ("/run_code", br#"{"code":"print(1)","language":"python","run_timeout":-1}"#, 422, "run_timeout"),
        ("/run_code", br#"{"code":"print(1)","language":"python","memory_limit_MB":0}"#, 422, "memory_limit_MB"),
        ("/run_code", br#"{"code":"print(1)","language":"python","files":{"a.txt":"eA=="}}"#, 422, "not supported"),
        ("/run_code", br#"{"language":"python"}"#, 422, "missing field `code`"),
        ("/nowhere", b"{}", 404, "no route POST /nowhere"),
    ];
    for (path, body, status, needle) in cases {
        check(&url, path, body, *status, needle).await;
    }
    let big =
        serde_json::to_vec(&json!({"type": "python", "solution": "#".repeat(10_000)})).unwrap();
    check(&url, "/run", &big, 413, "larger than the server's limit").await;
    let nine: Vec<_> = (0..9)
        .map(|_| json!({"type": "python", "solution": "1"}))
        .collect();
    let many = serde_json::to_vec(&json!({"type": "batch", "submissions": nine})).unwrap();
    check(
        &url,
        "/run/batch",
        &many,
        422,
        "9 submissions exceed the limit of 8",
    )
    .await;
    let (code, _) = raw(&url, Method::GET, "/run", None, None).await;
    assert_eq!(code, 405);
    // Still serving.
    assert_eq!(get(&url, "/ping").await.0, 200);
    let (code, r) = post(
        &url,
        "/run",
        &json!({"type": "python", "solution": "print('alive')"}),
    )
    .await;
    assert_eq!((code, r["stdout"].as_str()), (200, Some("alive\n")));
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_required_when_configured() {
    let config = ServerConfig {
        token: Some("s3cret".into()),
        ..ServerConfig::code_judge()
    };
    let server = server(1, config).await;
    let url = server.url();
    let body = serde_json::to_vec(&json!({"type": "python", "solution": "print(1)"})).unwrap();
    for token in [None, Some("wrong"), Some("s3cre"), Some("s3cret2")] {
        for (method, path) in [
            (Method::POST, "/run"),
            (Method::GET, "/status"),
            (Method::POST, "/run_code"),
        ] {
            let b = (method == Method::POST).then(|| body.clone());
            let (code, r) = raw(&url, method.clone(), path, b, token).await;
            assert_eq!(code, 401, "{path} with {token:?}: {r}");
            assert_eq!(r["detail"], "missing or wrong bearer token");
        }
    }
    // `/ping` stays open for health checks.
    assert_eq!(get(&url, "/ping").await.0, 200);
    let (code, r) = raw(&url, Method::POST, "/run", Some(body), Some("s3cret")).await;
    assert_eq!((code, r["stdout"].as_str()), (200, Some("1\n")), "{r}");
    assert_eq!(
        raw(&url, Method::GET, "/status", None, Some("s3cret"))
            .await
            .0,
        200
    );
    server.shutdown().await.unwrap();
}

/// Seeded random mutations of valid bodies, on every POST route: each gets a
/// 200 or a 4xx with a `detail`, never a 5xx or a dropped connection, and
/// the server still answers afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutated_bodies_never_break_the_server() {
    use rand::{Rng, SeedableRng};
    let server = server(2, ServerConfig::code_judge()).await;
    let url = server.url();
    let valid: [(&str, &str); 4] = [
        (
            "/run",
            r#"{"sub_id":"a","type":"python","solution":"print(1)","input":"x","expected_output":"1"}"#,
        ),
        (
            "/run/batch",
            r#"{"type":"batch","submissions":[{"type":"python","solution":"print(2)"}]}"#,
        ),
        (
            "/run/long-batch",
            r#"{"sub_id":"b","type":"batch","submissions":[{"type":"python","solution":"1"}]}"#,
        ),
        (
            "/run_code",
            r#"{"code":"print(3)","language":"python","run_timeout":2,"stdin":""}"#,
        ),
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    for round in 0..60 {
        let (path, body) = valid[round % valid.len()];
        let mut bytes = body.as_bytes().to_vec();
        for _ in 0..rng.random_range(1..4) {
            let at = rng.random_range(0..bytes.len());
            match rng.random_range(0..3) {
                0 => bytes[at] = rng.random(),
                1 => bytes.insert(at, b"{}[]\",:0\\"[rng.random_range(0..9)]),
                _ => {
                    bytes.remove(at);
                }
            }
        }
        let (code, r) = raw(&url, Method::POST, path, Some(bytes.clone()), None).await;
        let shown = String::from_utf8_lossy(&bytes);
        assert!(
            code == 200 || (400..500).contains(&code),
            "{path} {shown}: {code} {r}"
        );
        if code != 200 {
            assert!(
                r["detail"].as_str().is_some_and(|d| !d.is_empty()),
                "{path} {shown}: {r}"
            );
        }
    }
    assert_eq!(get(&url, "/ping").await.0, 200);
    server.shutdown().await.unwrap();
}
