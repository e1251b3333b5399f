//! `cargo xtask bench toolenv-server`: calls/s and p50/p99 latency at 1, 64
//! and 1024 concurrent callers, against a local server (`/run`, one request
//! per call; and the batching client) and against the same pool in process.
//!
//! Environment: `RSTAR_PYTHON` (interpreter with numpy and sympy),
//! `RSTAR_BENCH_WORKERS` (default: CPU count), `RSTAR_BENCH_SCALE` (calls per
//! level are multiplied by it; default 1).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rstar_toolenv::{Pool, ToolCall};
use rstar_toolserver::api::Submission;
use rstar_toolserver::{Client, ServerBuilder, ServerConfig};

const SNIPPETS: [&str; 4] = [
    "print(1)",
    "print(sum(i * i for i in range(1000)))",
    "import math\nprint(math.comb(30, 12))",
    "1/0",
];

struct Stats {
    calls_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    failed: usize,
}

fn stats(mut latencies: Vec<f64>, wall: Duration, failed: usize) -> Stats {
    latencies.sort_by(f64::total_cmp);
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize] * 1e3;
    Stats {
        calls_per_s: latencies.len() as f64 / wall.as_secs_f64(),
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        failed,
    }
}

/// `concurrency` closed-loop callers share `calls` calls; each call's latency
/// is measured from its submission to its result.
async fn drive<F, Fut>(concurrency: usize, calls: usize, call: F) -> Stats
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let call = Arc::new(call);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (call, next) = (Arc::clone(&call), Arc::clone(&next));
            tokio::spawn(async move {
                let mut out = Vec::new();
                let mut failed = 0;
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    if i >= calls {
                        break;
                    }
                    let t = Instant::now();
                    if !call(i).await {
                        failed += 1;
                    }
                    out.push(t.elapsed().as_secs_f64());
                }
                (out, failed)
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(calls);
    let mut failed = 0;
    for t in tasks {
        let (l, f) = t.await.expect("a caller task");
        latencies.extend(l);
        failed += f;
    }
    stats(latencies, start.elapsed(), failed)
}

fn expected(i: usize) -> Option<&'static str> {
    match i % SNIPPETS.len() {
        0 => Some("1\n"),
        1 => Some("332833500\n"),
        2 => Some("86493225\n"),
        _ => None,
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(bench())
}

async fn bench() -> Result<(), Box<dyn std::error::Error>> {
    let python = rstar_testdata::python();
    let workers = std::env::var("RSTAR_BENCH_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)
        });
    let scale: f64 = std::env::var("RSTAR_BENCH_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0);
    let pool = Pool::builder().python(&python).workers(workers).build()?;
    pool.ready().await?;
    let server = ServerBuilder::new()
        .config(ServerConfig::local())
        .serve(pool.clone())
        .await?;
    println!(
        "toolenv-server: {workers} workers (zygote backend, numpy+sympy preloaded), python {}, snippets cycling print(1) / a sum / math.comb / 1/0",
        python.display()
    );
    println!(
        "latency = submit to result per call, closed loop; ratio = calls/s over the in-process pool's"
    );
    println!(
        "{:>5} {:>6} | {:>28} | {:>28} | {:>28} | {:>7} {:>7}",
        "conc",
        "calls",
        "in-process pool  calls/s p50 p99",
        "HTTP /run  calls/s p50 p99",
        "client batched  calls/s p50 p99",
        "/run",
        "batched"
    );
    for concurrency in [1usize, 64, 1024] {
        let calls = ((match concurrency {
            1 => 200,
            64 => 640,
            _ => 2048,
        }) as f64
            * scale)
            .max(concurrency as f64) as usize;
        let p = pool.clone();
        let local = drive(concurrency, calls, move |i| {
            let p = p.clone();
            async move {
                let r = p
                    .run(ToolCall::python(SNIPPETS[i % SNIPPETS.len()], ""))
                    .await;
                expected(i).is_none_or(|e| r.stdout == e)
            }
        })
        .await;
        let single = Client::builder()
            .endpoint(server.url())
            .concurrency(concurrency)
            .build()?;
        let http = drive(concurrency, calls, move |i| {
            let c = single.clone();
            async move {
                let r = c
                    .run_single(Submission::python(SNIPPETS[i % SNIPPETS.len()]))
                    .await;
                expected(i).is_none_or(|e| r.stdout.as_deref() == Some(e))
            }
        })
        .await;
        let batching = Client::builder()
            .endpoint(server.url())
            .concurrency(16)
            .build()?;
        let batched = drive(concurrency, calls, move |i| {
            let c = batching.clone();
            async move {
                let r = c
                    .run(Submission::python(SNIPPETS[i % SNIPPETS.len()]))
                    .await;
                expected(i).is_none_or(|e| r.stdout.as_deref() == Some(e))
            }
        })
        .await;
        let cell = |s: &Stats| {
            format!(
                "{:>9.1} {:>7.2}ms {:>7.2}ms",
                s.calls_per_s, s.p50_ms, s.p99_ms
            )
        };
        println!(
            "{concurrency:>5} {calls:>6} | {:>28} | {:>28} | {:>28} | {:>6.2}x {:>6.2}x",
            cell(&local),
            cell(&http),
            cell(&batched),
            http.calls_per_s / local.calls_per_s,
            batched.calls_per_s / local.calls_per_s
        );
        let failed = local.failed + http.failed + batched.failed;
        if failed > 0 {
            println!(
                "      {failed} calls gave a wrong answer (pool {}, /run {}, batched {})",
                local.failed, http.failed, batched.failed
            );
        }
    }
    let status = server.status();
    println!(
        "server after the run: queue {}, restarts {}",
        status.queue, status.restarts
    );
    server.shutdown().await?;
    Ok(())
}
