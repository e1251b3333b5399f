//! `cargo xtask bench toolserver` (#46): the tool service at the paper's scale.
//!
//! 1. The fork floor (`xtask/bench/fork_floor.py`): a bare fork of a numpy+sympy process that
//!    prints `1`, and the zygote's own per-call path with its sandbox layers, in one process.
//! 2. One call at a time, `print(1)`: the in-process pool, HTTP `/run`, the batching client;
//!    each p50 as a ratio to the floor.
//! 3. p50/p99 at 1, 64 and 1000 calls in flight through the batching client.
//! 4. The load test: 704 batch requests of 64 calls (45,056 in flight) from one batching
//!    client against two `rstar tools serve` processes, with the default queue limit and with
//!    one the load overflows (refusals, then room): every answer checked against its own
//!    input, each call run once (the servers' `completed`), throughput, p50/p99/max latency,
//!    peak RSS, and file descriptors and processes before and after.
//! 5. The same calls from a plain code-judge client (#71), as microsoft/rStar's reference code
//!    sends them: all 704 requests at once with no backpressure, each resent after its
//!    `Retry-After` on a `429`, and its calls answered `queue_timeout` resent; throughput as a
//!    ratio to the batching client's in section 4, and how many calls were refused or resent more
//!    than once.
//!
//! Set `RSTAR_BENCH_ONLY=plain` to run sections 4 (default queue) and 5 alone.
//!
//! Environment: `RSTAR_PYTHON` (numpy and sympy), `RSTAR_BIN` (the `rstar` binary),
//! `RSTAR_FLOOR` (fork_floor.py), `RSTAR_BENCH_CALLS` (load-test calls, default 45,056),
//! `RSTAR_BENCH_QUEUE` (the overflowed run's `--max-queue`, default 8,192).

use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rstar_toolenv::{Pool, ToolCall};
use rstar_toolserver::api::{Reason, Submission};
use rstar_toolserver::{Client, ServerBuilder, ServerConfig};

type Error = Box<dyn std::error::Error>;

fn env_path(name: &str) -> Result<PathBuf, Error> {
    std::env::var_os(name)
        .map(PathBuf::from)
        .ok_or_else(|| format!("set {name} (cargo xtask bench toolserver does)").into())
}

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Nearest-rank quantile of milliseconds.
fn q(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

fn main() -> Result<(), Error> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(bench())
}

async fn bench() -> Result<(), Error> {
    let python = env_path("RSTAR_PYTHON")?;
    let floor_py = env_path("RSTAR_FLOOR")?;
    let rstar = env_path("RSTAR_BIN")?;
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    println!("toolserver bench: {cpus} CPUs, python {}", python.display());
    if std::env::var("RSTAR_BENCH_ONLY").as_deref() == Ok("plain") {
        return load_tests(&rstar, &python, cpus, true).await;
    }

    // 1. The floor.
    let zygote = Path::new(env!("CARGO_MANIFEST_DIR")).join("../toolenv/src/zygote.py");
    let out = Command::new(&python)
        .arg(&floor_py)
        .arg(&zygote)
        .arg("300")
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "fork_floor.py failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let floor: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let ms = |k: &str| -> Vec<f64> {
        sorted(
            floor[k]
                .as_array()
                .map(|a| a.iter().filter_map(|v| v.as_f64()).collect())
                .unwrap_or_default(),
        )
    };
    let (bare, layered) = (ms("bare_ms"), ms("layers_ms"));
    let floor_p50 = q(&layered, 0.5);
    println!("\n## 1. The fork floor (300 calls each, in one Python process)");
    println!("| what | p50 | p99 |\n|---|---|---|");
    println!(
        "| bare fork of a numpy+sympy process, print(1), wait | {:.2} ms | {:.2} ms |",
        q(&bare, 0.5),
        q(&bare, 0.99)
    );
    println!(
        "| the zygote's call path with its sandbox layers (the floor) | {:.2} ms | {:.2} ms |",
        floor_p50,
        q(&layered, 0.99)
    );

    // 2. and 3.: an in-process server.
    let workers = cpus.max(1);
    let pool = Pool::builder().python(&python).workers(workers).build()?;
    pool.ready().await?;
    let server = ServerBuilder::new()
        .config(ServerConfig::local())
        .serve(pool.clone())
        .await?;
    let client = Client::builder()
        .endpoint(server.url())
        .concurrency(64)
        .build()?;
    let n = 300;
    let mut pool_ms = Vec::new();
    let mut run_ms = Vec::new();
    let mut batched_ms = Vec::new();
    for i in 0..n {
        let t = Instant::now();
        let r = pool.run(ToolCall::python("print(1)", "")).await;
        pool_ms.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(r.stdout, "1\n", "call {i}: {r:?}");
        let t = Instant::now();
        let r = client.run_single(Submission::python("print(1)")).await;
        run_ms.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(r.stdout.as_deref(), Some("1\n"), "{r:?}");
        let t = Instant::now();
        let r = client.run(Submission::python("print(1)")).await;
        batched_ms.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(r.stdout.as_deref(), Some("1\n"), "{r:?}");
    }
    println!("\n## 2. One print(1) at a time ({n} calls each, interleaved; {workers} workers)");
    println!("| path | p50 | p99 | p50 / floor | p50 / bare fork |\n|---|---|---|---|---|");
    for (name, v) in [
        ("in-process pool (`Pool::run`)", pool_ms),
        ("HTTP `/run` (`Client::run_single`)", run_ms),
        ("batching client (`Client::run`)", batched_ms),
    ] {
        let v = sorted(v);
        println!(
            "| {name} | {:.2} ms | {:.2} ms | {:.2}x | {:.2}x |",
            q(&v, 0.5),
            q(&v, 0.99),
            q(&v, 0.5) / floor_p50,
            q(&v, 0.5) / q(&bare, 0.5)
        );
    }

    println!("\n## 3. Calls in flight through the batching client (print(i), closed loop)");
    println!("| in flight | calls | calls/s | p50 | p99 |\n|---|---|---|---|---|");
    for (inflight, calls) in [(1usize, 300usize), (64, 1920), (1000, 6000)] {
        let (wall, lat) = closed_loop(&client, inflight, calls).await;
        let lat = sorted(lat);
        println!(
            "| {inflight} | {calls} | {:.0} | {:.1} ms | {:.1} ms |",
            calls as f64 / wall,
            q(&lat, 0.5),
            q(&lat, 0.99)
        );
    }
    server.shutdown().await?;
    drop(pool);

    load_tests(&rstar, &python, cpus, false).await
}

/// Sections 4 and 5: the batching client (at the default queue, and one it overflows unless
/// `plain_only`), then the plain client.
async fn load_tests(
    rstar: &Path,
    python: &Path,
    cpus: usize,
    plain_only: bool,
) -> Result<(), Error> {
    // 4. The load test.
    let calls = env_num("RSTAR_BENCH_CALLS", 45_056);
    let small_queue = env_num("RSTAR_BENCH_QUEUE", 8_192);
    println!(
        "\n## 4. {calls} calls in flight: 704 batch requests of 64 from one client, two `rstar tools serve` of {} workers each",
        (cpus / 2).max(1)
    );
    println!(
        "| queue limit per server | wall | calls/s | p50 | p99 | max | refused requests | ran | wrong or lost | peak RSS per server | fds before → after | processes before → after |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let batching = load(
        rstar,
        python,
        (cpus / 2).max(1),
        rstar_toolserver::DEFAULT_MAX_QUEUE,
        calls,
    )
    .await?;
    if !plain_only {
        load(rstar, python, (cpus / 2).max(1), small_queue, calls).await?;
    }

    // 5. A plain client.
    println!(
        "\n## 5. The same {calls} calls from a plain code-judge client: 704 `/run/batch` requests of 64 at once, resent after `Retry-After` and on `queue_timeout`, two `rstar tools serve` at each preset (`paper`, the default; `code-judge`)"
    );
    println!(
        "| preset | wall | calls/s | vs the batching client | right | 429s | calls resent after queue_timeout | calls refused or resent more than once | peak RSS per server |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for preset in ["paper", "code-judge"] {
        let plain = plain_load(rstar, python, (cpus / 2).max(1), calls, preset).await?;
        println!(
            "| {preset} | {:.1} s | {:.0} | {:.2}x | {} of {calls} | {} | {} | {} ({:.1}%) | {} |",
            plain.wall,
            calls as f64 / plain.wall,
            (calls as f64 / plain.wall) / batching,
            plain.right,
            plain.refusals,
            plain.resent,
            plain.more_than_once,
            100.0 * plain.more_than_once as f64 / calls as f64,
            plain.rss,
        );
    }
    Ok(())
}

/// What the plain client's run came to.
struct Plain {
    wall: f64,
    right: usize,
    /// `429` answers.
    refusals: usize,
    /// Calls sent again after a `queue_timeout` answer.
    resent: usize,
    /// Calls whose request was refused, or that were resent, more than once in all.
    more_than_once: usize,
    rss: String,
}

/// `calls` calls of `print(i * 7919 % 100003)` from 704 concurrent tasks of 64 calls, each a
/// plain HTTP client with no backpressure: it sends its request, sleeps for `Retry-After` on a
/// `429` and sends it again, and sends again the calls answered `queue_timeout`.
async fn plain_load(
    rstar: &Path,
    python: &Path,
    workers: usize,
    calls: usize,
    preset: &str,
) -> Result<Plain, Error> {
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    let servers = [
        Served::start(
            rstar,
            python,
            workers,
            rstar_toolserver::DEFAULT_MAX_QUEUE,
            preset,
        )?,
        Served::start(
            rstar,
            python,
            workers,
            rstar_toolserver::DEFAULT_MAX_QUEUE,
            preset,
        )?,
    ];
    let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let ids: Vec<usize> = (0..calls).collect();
    let started = Instant::now();
    let tasks: Vec<_> = ids
        .chunks(64)
        .enumerate()
        .map(|(r, chunk)| {
            let url = format!("{}/run/batch", servers[r % 2].url);
            let http = http.clone();
            let mut pending = chunk.to_vec();
            tokio::spawn(async move {
                // Per call: its refusals and resends; and the calls answered right.
                let mut times: HashMap<usize, u32> = HashMap::new();
                let (mut right, mut refusals, mut resent) = (0usize, 0usize, 0usize);
                while !pending.is_empty() {
                    let subs: Vec<serde_json::Value> = pending
                        .iter()
                        .map(|i| serde_json::json!({"type": "python", "solution": format!("print({i} * 7919 % 100003)")}))
                        .collect();
                    let body = serde_json::json!({"type": "batch", "submissions": subs}).to_string();
                    let request = hyper::Request::post(&url)
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from(body)))?;
                    let response = http.request(request).await?;
                    let status = response.status().as_u16();
                    let retry = response
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
                    let bytes = response.into_body().collect().await?.to_bytes();
                    if status == 429 {
                        refusals += 1;
                        for i in &pending {
                            *times.entry(*i).or_default() += 1;
                        }
                        tokio::time::sleep(Duration::from_secs(retry.unwrap_or(1))).await;
                        continue;
                    }
                    if status != 200 {
                        return Err(format!("HTTP {status}: {}", String::from_utf8_lossy(&bytes)).into());
                    }
                    let answer: serde_json::Value = serde_json::from_slice(&bytes)?;
                    let results = answer["results"].as_array().cloned().unwrap_or_default();
                    let mut again = Vec::new();
                    for (i, r) in pending.iter().zip(&results) {
                        if r["reason"] == "queue_timeout" {
                            again.push(*i);
                            *times.entry(*i).or_default() += 1;
                        } else if r["stdout"].as_str() == Some(format!("{}\n", *i as u64 * 7919 % 100_003).as_str()) {
                            right += 1;
                        }
                    }
                    resent += again.len();
                    pending = again;
                }
                let more_than_once = times.values().filter(|&&n| n > 1).count();
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>((right, refusals, resent, more_than_once))
            })
        })
        .collect();
    let mut plain = Plain {
        wall: 0.0,
        right: 0,
        refusals: 0,
        resent: 0,
        more_than_once: 0,
        rss: String::new(),
    };
    for task in tasks {
        let (right, refusals, resent, more) = task.await?.map_err(|e| e.to_string())?;
        plain.right += right;
        plain.refusals += refusals;
        plain.resent += resent;
        plain.more_than_once += more;
    }
    plain.wall = started.elapsed().as_secs_f64();
    plain.rss = servers
        .iter()
        .map(|s| format!("{:.0} MiB", peak_rss_mib(s.pid())))
        .collect::<Vec<_>>()
        .join(", ");
    for s in servers {
        s.stop();
    }
    Ok(plain)
}

/// `inflight` callers share `calls` calls of `print(i)`; (wall seconds, latencies in ms).
async fn closed_loop(client: &Client, inflight: usize, calls: usize) -> (f64, Vec<f64>) {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..inflight)
        .map(|_| {
            let (client, next) = (client.clone(), Arc::clone(&next));
            tokio::spawn(async move {
                let mut lat = Vec::new();
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    if i >= calls {
                        return lat;
                    }
                    let t = Instant::now();
                    let r = client.run(Submission::python(format!("print({i})"))).await;
                    lat.push(t.elapsed().as_secs_f64() * 1e3);
                    assert_eq!(r.stdout, Some(format!("{i}\n")), "{r:?}");
                }
            })
        })
        .collect();
    let mut lat = Vec::with_capacity(calls);
    for t in tasks {
        lat.extend(t.await.expect("a caller"));
    }
    (started.elapsed().as_secs_f64(), lat)
}

/// A `rstar tools serve` process and its URL.
struct Served {
    child: Child,
    url: String,
}

impl Served {
    fn start(
        rstar: &Path,
        python: &Path,
        workers: usize,
        max_queue: usize,
        preset: &str,
    ) -> Result<Self, Error> {
        let mut child = Command::new(rstar)
            .args([
                "tools",
                "serve",
                "--port",
                "0",
                "--preset",
                preset,
                "--workers",
            ])
            .arg(workers.to_string())
            .arg("--max-queue")
            .arg(max_queue.to_string())
            .arg("--python")
            .arg(python)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let stderr = child.stderr.take().expect("piped");
        let mut lines = std::io::BufReader::new(stderr).lines();
        let url = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(rest) = line.split("listening on ").nth(1) {
                        break rest.split_whitespace().next().unwrap_or("").to_string();
                    }
                }
                _ => return Err("rstar tools serve exited before listening".into()),
            }
        };
        // Keep draining its log so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines.by_ref() {});
        Ok(Served { child, url })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// `pid`'s open file descriptors.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// `pid`'s descendants (its workers and their calls).
fn descendants(pid: u32) -> usize {
    let mut parent: HashMap<u32, u32> = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(p) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some(ppid) = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok())
        {
            parent.insert(p, ppid);
        }
    }
    parent
        .keys()
        .filter(|&&p| {
            let mut at = p;
            for _ in 0..64 {
                match parent.get(&at) {
                    Some(&pp) if pp == pid => return true,
                    Some(&pp) if pp > 1 => at = pp,
                    _ => return false,
                }
            }
            false
        })
        .count()
}

/// Peak resident memory of `pid` in MiB (`VmHWM`).
fn peak_rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

async fn load(
    rstar: &Path,
    python: &Path,
    workers: usize,
    max_queue: usize,
    calls: usize,
) -> Result<f64, Error> {
    let servers = [
        Served::start(rstar, python, workers, max_queue, "paper")?,
        Served::start(rstar, python, workers, max_queue, "paper")?,
    ];
    let client = Client::builder()
        .endpoint(servers[0].url.clone())
        .endpoint(servers[1].url.clone())
        .concurrency(704)
        .batch_timeout(Duration::from_secs(3600))
        .status_interval(Duration::from_millis(200))
        .build()?;
    for i in 0..2 {
        client.status(i).await?;
    }
    let before: Vec<(usize, usize)> = servers
        .iter()
        .map(|s| (fds(s.pid()), descendants(s.pid())))
        .collect();
    let subs: Vec<Submission> = (0..calls)
        .map(|i| {
            Submission::python(format!("print({i} * 7919 % 100003)")).with_sub_id(format!("c{i}"))
        })
        .collect();
    let started = Instant::now();
    let results = client.run_batch_timed(subs).await;
    let wall = started.elapsed().as_secs_f64();
    let mut bad = 0;
    let mut lat = Vec::with_capacity(calls);
    for (i, (r, took)) in results.iter().enumerate() {
        let want = format!("{}\n", i as u64 * 7919 % 100_003);
        if r.sub_id != format!("c{i}")
            || r.stdout.as_deref() != Some(want.as_str())
            || r.reason != Reason::None
        {
            bad += 1;
        }
        lat.push(took.as_secs_f64() * 1e3);
    }
    bad += calls.saturating_sub(results.len());
    let lat = sorted(lat);
    let mut refused = 0;
    let mut ran = 0;
    for i in 0..2 {
        let s = client.status(i).await?;
        refused += s.refused;
        ran += s.completed;
    }
    // The client's pooled connections close with it; let the workers settle too (a retired
    // worker is replaced in the background).
    drop(client);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after: Vec<(usize, usize)> = servers
        .iter()
        .map(|s| (fds(s.pid()), descendants(s.pid())))
        .collect();
    let rss: Vec<String> = servers
        .iter()
        .map(|s| format!("{:.0} MiB", peak_rss_mib(s.pid())))
        .collect();
    let pair = |v: &[(usize, usize)], f: fn(&(usize, usize)) -> usize| {
        v.iter()
            .map(|x| f(x).to_string())
            .collect::<Vec<_>>()
            .join("+")
    };
    println!(
        "| {max_queue} | {wall:.1} s | {:.0} | {:.0} ms | {:.0} ms | {:.0} ms | {refused} | {ran} of {calls} | {bad} | {} | {} → {} | {} → {} |",
        calls as f64 / wall,
        q(&lat, 0.5),
        q(&lat, 0.99),
        lat.last().copied().unwrap_or(0.0),
        rss.join(", "),
        pair(&before, |x| x.0),
        pair(&after, |x| x.0),
        pair(&before, |x| x.1),
        pair(&after, |x| x.1),
    );
    for s in servers {
        s.stop();
    }
    Ok(calls as f64 / wall)
}
