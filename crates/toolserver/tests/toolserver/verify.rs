//! `POST /verify` and [`Client::verify`]: answers scored on the service with `rstar-verifier`,
//! exactly as in process, in order, bounded, behind the token (issue 46).

use std::time::Duration;

use hyper::Method;
use rstar_toolserver::api::{VerifyItem, VerifyVerdict};
use rstar_toolserver::{Client, Error, ServerConfig};
use rstar_verifier::{Mode, Verifier};
use serde_json::{Value, json};

use super::common::{post, raw, server};

/// Mixed modes, right and wrong, no box, a truth the mode cannot score.
fn items() -> Vec<VerifyItem> {
    vec![
        VerifyItem::new("so \\boxed{42}", "42", Mode::Integer),
        VerifyItem::new("so \\boxed{41}", "42", Mode::Integer),
        VerifyItem::new("no box at all", "7", Mode::Integer),
        VerifyItem::new("\\boxed{\\frac{2}{4}}", "\\frac{1}{2}", Mode::Math),
        VerifyItem::new("\\boxed{0.6}", "\\frac{1}{2}", Mode::Math),
        VerifyItem::new("the answer is \\boxed{(B)}", "B", Mode::Choice),
        VerifyItem::new("\\boxed{C}", "B", Mode::Choice),
        VerifyItem::new("\\boxed{1}", "not a number", Mode::Integer),
        VerifyItem::new("\\boxed{2^{10}}", "1024", Mode::Integer),
    ]
}

/// What the trainer's in-process verifier says about each item.
fn local(items: &[VerifyItem]) -> Vec<VerifyVerdict> {
    let v = Verifier::new();
    items
        .iter()
        .map(|i| VerifyVerdict::of(v.verify_mode(i.mode, &i.response, &i.ground_truth)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_modes_are_scored_as_in_process_and_in_order() {
    let server = server(1, ServerConfig::local()).await;
    let url = server.url();
    let items = items();
    let (code, r) = post(&url, "/verify", &json!({ "items": items })).await;
    assert_eq!(code, 200, "{r}");
    let got: Vec<VerifyVerdict> = serde_json::from_value(r["results"].clone()).unwrap();
    assert_eq!(got, local(&items));
    let rewards: Vec<u8> = got.iter().map(|v| v.reward).collect();
    assert_eq!(rewards, [1, 0, 0, 1, 0, 1, 0, 0, 1]);
    assert_eq!(r["results"][0]["reason"], "right");
    assert_eq!(r["results"][0]["extracted"], "42");
    assert_eq!(r["results"][2]["reason"], "no_box");
    assert!(r["results"][2]["extracted"].is_null(), "{r}");
    let error = r["results"][7]["error"].as_str().unwrap();
    assert!(error.contains("not a number"), "{error}");
    assert!(r["results"][7].get("reason").is_none(), "{r}");

    // The mode defaults to integer; an empty list gets an empty list.
    let (code, r) = post(
        &url,
        "/verify",
        &json!({"items": [{"response": "\\boxed{6}", "ground_truth": "6"}]}),
    )
    .await;
    assert_eq!((code, r["results"][0]["reward"].as_u64()), (200, Some(1)));
    let (code, r) = post(&url, "/verify", &json!({"items": []})).await;
    assert_eq!((code, r), (200, json!({"results": []})));

    // Many answers, each with its own truth, come back in order (rayon spreads them).
    let many: Vec<VerifyItem> = (0..600)
        .map(|i| {
            VerifyItem::new(
                format!("\\boxed{{{}}}", i * 7 % 11),
                i.to_string(),
                Mode::Integer,
            )
        })
        .collect();
    let (code, r) = post(&url, "/verify", &json!({ "items": many })).await;
    assert_eq!(code, 200);
    let got: Vec<VerifyVerdict> = serde_json::from_value(r["results"].clone()).unwrap();
    assert_eq!(got, local(&many));
    for (i, v) in got.iter().enumerate() {
        assert_eq!(v.extracted, Some((i * 7 % 11).to_string()), "item {i}");
    }
    server.shutdown().await.unwrap();
}

async fn refused(url: &str, body: &[u8], status: u16, needle: &str) {
    let (code, r) = raw(url, Method::POST, "/verify", Some(body.to_vec()), None).await;
    assert_eq!(code, status, "{}: {r}", String::from_utf8_lossy(body));
    let detail = r["detail"].as_str().unwrap_or_else(|| panic!("{r}"));
    assert!(detail.contains(needle), "{detail:?} lacks {needle:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_are_refused_naming_the_field_and_the_limit() {
    let config = ServerConfig {
        max_batch: 4,
        max_body_bytes: 4096,
        ..ServerConfig::local()
    };
    let server = server(1, config).await;
    let url = server.url();
    let item = |mode: &str| json!({"response": "\\boxed{1}", "ground_truth": "1", "mode": mode});
    let bad_mode = serde_json::to_vec(&json!({"items": [item("integer"), item("exact")]})).unwrap();
    refused(&url, &bad_mode, 400, "`mode`: `exact` is not a mode").await;
    refused(&url, &bad_mode, 400, "expected integer, math or choice").await;
    refused(
        &url,
        br#"{"items": [{"response": "x"}]}"#,
        400,
        "missing field `ground_truth`",
    )
    .await;
    refused(&url, br#"{"answers": []}"#, 400, "unknown field `answers`").await;
    refused(&url, b"{not json", 400, "invalid /verify request").await;
    let five = serde_json::to_vec(&json!({"items": vec![item("integer"); 5]})).unwrap();
    refused(&url, &five, 400, "items: 5 items exceed the limit of 4").await;
    let big = serde_json::to_vec(
        &json!({"items": [{"response": "#".repeat(10_000), "ground_truth": "1"}]}),
    )
    .unwrap();
    refused(&url, &big, 413, "larger than the server's limit").await;
    let four = serde_json::to_vec(&json!({"items": vec![item("choice"); 4]})).unwrap();
    let (code, r) = raw(&url, Method::POST, "/verify", Some(four), None).await;
    assert_eq!(code, 200, "{r}");
    assert_eq!(r["results"].as_array().unwrap().len(), 4);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bearer_token_guards_verify_and_the_client_sends_it() {
    let config = ServerConfig {
        token: Some("s3cret".into()),
        ..ServerConfig::local()
    };
    let server = server(1, config).await;
    let url = server.url();
    let body =
        serde_json::to_vec(&json!({"items": [{"response": "\\boxed{1}", "ground_truth": "1"}]}))
            .unwrap();
    for token in [None, Some("wrong")] {
        let (code, r) = raw(&url, Method::POST, "/verify", Some(body.clone()), token).await;
        assert_eq!(code, 401, "{token:?}: {r}");
    }
    let (code, r) = raw(&url, Method::POST, "/verify", Some(body), Some("s3cret")).await;
    assert_eq!((code, r["results"][0]["reward"].as_u64()), (200, Some(1)));

    let without = Client::builder()
        .endpoint(url.clone())
        .max_retries(0)
        .build()
        .unwrap();
    let err = without.verify(items()).await.unwrap_err();
    assert!(matches!(err, Error::Status { status: 401, .. }), "{err}");
    let with = Client::builder()
        .endpoint(url)
        .token(Some("s3cret".into()))
        .build()
        .unwrap();
    assert_eq!(with.verify(items()).await.unwrap(), local(&items()));
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_batches_answers_over_the_endpoints_in_order() {
    let servers = [
        server(1, ServerConfig::local()).await,
        server(1, ServerConfig::local()).await,
    ];
    let client = servers
        .iter()
        .fold(Client::builder().verify_batch_size(3), |b, s| {
            b.endpoint(s.url())
        })
        .build()
        .unwrap();
    let many: Vec<VerifyItem> = (0..40)
        .flat_map(|_| items())
        .enumerate()
        .map(|(i, mut item)| {
            item.response = format!("{} (#{i})", item.response);
            item
        })
        .collect();
    let got = client.verify(many.clone()).await.unwrap();
    assert_eq!(got, local(&many));
    // 360 answers in requests of 3.
    let loads = client.loads();
    assert_eq!(
        loads.iter().map(|l| l.sent).sum::<usize>(),
        120,
        "{loads:?}"
    );
    assert!(loads.iter().all(|l| l.in_flight == 0), "{loads:?}");
    assert!(client.verify(Vec::new()).await.unwrap().is_empty());
    for s in servers {
        s.shutdown().await.unwrap();
    }
}

#[tokio::test]
async fn transport_errors_are_retried_then_returned() {
    // Nothing listens on port 1.
    let client = Client::builder()
        .endpoint("http://127.0.0.1:1")
        .max_retries(2)
        .backoff(Duration::from_millis(1))
        .build()
        .unwrap();
    let err = client.verify(items()).await.unwrap_err();
    assert!(matches!(err, Error::Transport { .. }), "{err}");
    assert_eq!(client.loads()[0].sent, 3, "one try and two retries");
    assert!(matches!(
        Client::builder()
            .endpoint("http://127.0.0.1:1")
            .verify_batch_size(0)
            .build(),
        Err(Error::Config(_))
    ));
}

#[test]
fn verdicts_round_trip_and_leave_empty_fields_out() {
    let v = local(&items());
    let text = serde_json::to_string(&v).unwrap();
    assert_eq!(
        serde_json::from_str::<Vec<VerifyVerdict>>(&text).unwrap(),
        v
    );
    let first: Value = serde_json::to_value(&v[0]).unwrap();
    let mut keys: Vec<&String> = first.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["extracted", "normalized", "reason", "reward"]);
}
