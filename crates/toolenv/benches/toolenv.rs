//! `cargo xtask bench toolenv`: calls/s and p50/p99 latency of the preloaded
//! zygote pool against spawn-per-call (same sandbox, a new interpreter per
//! call), measured side by side in one run, for `print(1)` and for a snippet
//! that imports sympy.
//!
//! Environment: `RSTAR_PYTHON` (the interpreter, with sympy), `RSTAR_BENCH_WORKERS`
//! (default 2), `RSTAR_BENCH_SCALE` (multiplies the call counts, default 1).

use std::time::{Duration, Instant};

use rstar_toolenv::{Backend, Outcome, Pool, ToolCall};

const SYMPY: &str = "import sympy\nx = sympy.symbols('x')\nprint(sympy.factor(x**2 - 1))";

struct Stats {
    calls_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    let idx = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[idx]
}

async fn measure(pool: &Pool, code: &str, expected: &str, n: usize) -> Stats {
    // One warm-up call per worker so start-up is not measured.
    let warm: Vec<_> = (0..pool.config().workers)
        .map(|_| ToolCall::python("pass", ""))
        .collect();
    pool.run_batch(warm).await;
    let start = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let pool = pool.clone();
            let call = ToolCall::python(code, "");
            tokio::spawn(async move {
                let t = Instant::now();
                let r = pool.run(call).await;
                (t.elapsed(), r)
            })
        })
        .collect();
    let mut lat = Vec::with_capacity(n);
    for t in tasks {
        let (elapsed, r) = t.await.expect("bench task");
        assert_eq!(
            (r.outcome, r.stdout.as_str()),
            (Outcome::Output, expected),
            "{r:?}"
        );
        lat.push(elapsed.as_secs_f64() * 1e3);
    }
    let wall = start.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    // Latency here includes queueing behind the other calls of the burst; the
    // per-call service time is the pure latency divided by the queue depth.
    Stats {
        calls_per_s: n as f64 / wall,
        p50_ms: percentile(&lat, 0.5),
        p99_ms: percentile(&lat, 0.99),
    }
}

async fn service_latency(pool: &Pool, code: &str, n: usize) -> (f64, f64) {
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let r = pool.run(ToolCall::python(code, "")).await;
        assert!(r.success(), "{r:?}");
        lat.push(t.elapsed().as_secs_f64() * 1e3);
    }
    lat.sort_by(f64::total_cmp);
    (percentile(&lat, 0.5), percentile(&lat, 0.99))
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let python = std::env::var("RSTAR_PYTHON").unwrap_or_else(|_| "python3".into());
    let workers = env_usize("RSTAR_BENCH_WORKERS", 2);
    let scale = env_usize("RSTAR_BENCH_SCALE", 1);
    let builder = || {
        Pool::builder()
            .python(&python)
            .workers(workers)
            .timeout(Duration::from_secs(30))
    };
    let pooled = builder().build().expect("zygote pool");
    let report = pooled.ready().await.expect("zygote pool ready");
    assert!(
        report.preloaded.iter().any(|m| m == "sympy"),
        "the bench needs sympy in {python}: {report}"
    );
    let spawn = builder()
        .backend(Backend::Spawn)
        .build()
        .expect("spawn pool");
    spawn.ready().await.expect("spawn pool ready");
    println!("toolenv bench: {python}, {workers} workers, both backends under the same sandbox");
    println!(
        "burst: all calls submitted at once (latency includes queueing); 1-call: one call at a time (ms)"
    );
    println!("{report}");
    println!(
        "{:<10} {:<8} {:>6} {:>10} {:>10} {:>10} {:>12} {:>12}",
        "snippet",
        "backend",
        "calls",
        "calls/s",
        "burst p50",
        "burst p99",
        "1-call p50",
        "1-call p99"
    );
    let cases = [
        ("print(1)", "print(1)", "1\n", 200 * scale, 40 * scale),
        ("sympy", SYMPY, "(x - 1)*(x + 1)\n", 100 * scale, 12 * scale),
    ];
    for (label, code, expected, n_pool, n_spawn) in cases {
        let p = measure(&pooled, code, expected, n_pool).await;
        let s = measure(&spawn, code, expected, n_spawn).await;
        let (p1, p1_99) = service_latency(&pooled, code, (n_pool / 4).max(10)).await;
        let (s1, s1_99) = service_latency(&spawn, code, (n_spawn / 4).max(5)).await;
        for (backend, st, n, a, b) in [
            ("pool", &p, n_pool, p1, p1_99),
            ("spawn", &s, n_spawn, s1, s1_99),
        ] {
            println!(
                "{label:<10} {backend:<8} {n:>6} {:>10.1} {:>10.1} {:>10.1} {a:>12.1} {b:>12.1}",
                st.calls_per_s, st.p50_ms, st.p99_ms
            );
        }
        println!(
            "{label:<10} RATIO pool/spawn: throughput {:.1}x, single-call p50 {:.1}x faster",
            p.calls_per_s / s.calls_per_s,
            s1 / p1
        );
    }
    assert!(pooled.stray_processes().is_empty() && spawn.stray_processes().is_empty());
}
