//! Pools, servers and a raw HTTP helper shared by the tests.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rstar_toolenv::Pool;
use rstar_toolserver::{ServerBuilder, ServerConfig, ToolServer};
use serde_json::Value;

/// A pool for tests: small limits, nothing preloaded (fast start), and a 3 s
/// wall clock so timeout cases stay short.
pub async fn pool(workers: usize) -> Pool {
    let pool = Pool::builder()
        .python(rstar_testdata::python())
        .workers(workers)
        .timeout(Duration::from_secs(3))
        .memory(768 << 20)
        .max_output(256 << 10)
        .max_processes(32)
        .preload(Vec::<String>::new())
        .build()
        .expect("the pool starts");
    pool.ready().await.expect("the workers start");
    pool
}

/// A server on a free loopback port with `config` (its port is ignored).
pub async fn server(workers: usize, config: ServerConfig) -> ToolServer {
    server_and_pool(workers, config).await.0
}

/// [`server`], and its pool.
pub async fn server_and_pool(workers: usize, config: ServerConfig) -> (ToolServer, Pool) {
    let config = ServerConfig { port: 0, ..config };
    let pool = pool(workers).await;
    let handle = ServerBuilder::new()
        .config(config)
        .serve(pool.clone())
        .await
        .expect("the server starts");
    (handle, pool)
}

/// One HTTP exchange with nothing in between: the status and the JSON body
/// (`Value::Null` when the body is not JSON).
pub async fn raw(
    url: &str,
    method: Method,
    path: &str,
    body: Option<Vec<u8>>,
    token: Option<&str>,
) -> (u16, Value) {
    let http: HttpClient<HttpConnector, Full<Bytes>> =
        HttpClient::builder(TokioExecutor::new()).build_http();
    let mut req = Request::builder()
        .method(method)
        .uri(format!("{url}{path}"));
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let req = req
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .unwrap();
    let resp = http.request(req).await.expect("the server answers");
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// POSTs a JSON value.
pub async fn post(url: &str, path: &str, body: &Value) -> (u16, Value) {
    raw(
        url,
        Method::POST,
        path,
        Some(serde_json::to_vec(body).unwrap()),
        None,
    )
    .await
}

/// GETs a path.
pub async fn get(url: &str, path: &str) -> (u16, Value) {
    raw(url, Method::GET, path, None, None).await
}

/// The sorted keys of a JSON object.
pub fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().expect("an object").keys().cloned().collect();
    k.sort();
    k
}
