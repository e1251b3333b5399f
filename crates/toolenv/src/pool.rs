//! The async pool, its status, and the blocking wrapper.

use rstar_episode::IoError;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use tokio::sync::{Mutex, mpsc, oneshot, watch};

use crate::call::{ToolCall, ToolResult};
use crate::config::{Backend, Config};
use crate::error::{Error, Result};
use crate::format::ResponseFormat;
use crate::sandbox::{self, Layer, LayerState, PreExec, SandboxReport};
use crate::worker::{Launch, Zygote};

struct Job {
    call: ToolCall,
    reply: oneshot::Sender<(ToolResult, Duration)>,
    /// [`StalledClock::now`] when the call was queued.
    queued_at: Duration,
}

/// The time during which at least one running call was past its soft limit ([`soft_limit`]),
/// as a clock that only runs then: the part of a call's queue wait spent behind calls at their
/// limit is the clock's advance between its queueing and its start.
#[derive(Default)]
struct StalledClock {
    /// Calls past their soft limit now.
    stalled: usize,
    /// The clock's reading when `stalled` last rose from 0, and when.
    since: Option<std::time::Instant>,
    /// The clock's reading at `since` (or now, when nothing is stalled).
    total: Duration,
}

impl StalledClock {
    fn now(&self) -> Duration {
        self.total + self.since.map_or(Duration::ZERO, |s| s.elapsed())
    }

    fn stall(&mut self) {
        if self.stalled == 0 {
            self.since = Some(std::time::Instant::now());
        }
        self.stalled += 1;
    }

    fn unstall(&mut self) {
        self.stalled -= 1;
        if self.stalled == 0
            && let Some(s) = self.since.take()
        {
            self.total += s.elapsed();
        }
    }
}

/// A snapshot of the pool's load (for a service's `/status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PoolStatus {
    /// Calls submitted and not yet picked up by a worker.
    pub queued: usize,
    /// Calls running now.
    pub running: usize,
    /// Configured workers.
    pub workers: usize,
    /// Workers with a live, ready process.
    pub alive: usize,
    /// Workers replaced after dying, hanging or reaching their call budget.
    pub restarts: u64,
}

struct Shared {
    launch: Launch,
    /// When calls were past their soft limit ([`StalledClock`]).
    stalled: std::sync::Mutex<StalledClock>,
    /// Overflow workers alive now ([`OVERFLOW_PER_WORKER`]).
    overflow: AtomicUsize,
    queued: AtomicUsize,
    running: AtomicUsize,
    alive: AtomicUsize,
    restarts: AtomicU64,
    serial: AtomicU64,
    report: OnceLock<SandboxReport>,
    zygotes: std::sync::Mutex<std::collections::HashSet<i32>>,
    pre_exec_notes: Vec<String>,
    last_start_error: std::sync::Mutex<Option<String>>,
    /// Workers that finished their first start attempt (ok or not).
    started: watch::Sender<usize>,
}

impl Shared {
    fn stalled_clock(&self) -> Duration {
        self.stalled.lock().expect("stalled clock lock").now()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.launch.run_dir);
        if let Some(root) = &self.launch.cgroup_root {
            let _ = std::fs::remove_dir(root);
        }
    }
}

/// A pool of sandboxed Python workers. Cheap to clone; the workers stop when
/// the last clone is dropped.
///
/// Every call submitted through [`Pool::run`] gets exactly one
/// [`ToolResult`]: a worker that dies or hangs yields an
/// [`Outcome::Internal`](crate::Outcome::Internal) result and is replaced.
#[derive(Clone)]
pub struct Pool {
    tx: mpsc::UnboundedSender<Job>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("status", &self.status())
            .finish()
    }
}

static POOL_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Pool {
    /// A builder with the documented defaults.
    pub fn builder() -> crate::PoolBuilder {
        crate::PoolBuilder::new()
    }

    pub(crate) fn start(config: Config) -> Result<Self> {
        let filter: &'static [libc::sock_filter] = seccomp_program();
        let want = PreExec {
            netns: config.network_namespace,
            seccomp: config.seccomp,
            scratch: config.scratch_size,
        };
        let id = POOL_COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("rstar-toolenv-{}-{id}", std::process::id());
        sandbox::reap_stale(&config.temp_root);
        let run_dir = config.temp_root.join(&name);
        std::fs::create_dir_all(&run_dir)
            .map_err(|source| Error::Io(IoError::new(run_dir.clone(), source)))?;
        let unmasks = match config.unprivileged_uid {
            Some(uid) if sandbox::is_root() && config.scratch_size.is_some() => {
                sandbox::blocked_dirs(&python_paths(&config.python), uid)
            }
            _ => Vec::new(),
        };
        let (pre_exec, pre_exec_notes, unmask_ok) = sandbox::probe_pre_exec(
            &config.python,
            want,
            filter,
            &run_dir.join("probe"),
            &unmasks,
        );
        let unmasks = if unmask_ok { unmasks } else { Vec::new() };
        let cgroup_root = if config.cgroup {
            match sandbox::pids_cgroup_root().and_then(|root| {
                sandbox::reap_stale(&root);
                let dir = root.join(&name);
                std::fs::create_dir(&dir).map(|()| dir)
            }) {
                Ok(dir) => Some(dir),
                Err(e) => {
                    tracing::warn!(error = %e, "no pids cgroup: fork bombs are bounded only by RLIMIT_NPROC");
                    None
                }
            }
        } else {
            None
        };
        let workers = config.workers;
        let (started, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            launch: Launch {
                config,
                pre_exec,
                filter,
                cgroup_root,
                run_dir,
                unmasks,
            },
            overflow: AtomicUsize::new(0),
            stalled: std::sync::Mutex::default(),
            queued: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            alive: AtomicUsize::new(0),
            restarts: AtomicU64::new(0),
            serial: AtomicU64::new(0),
            report: OnceLock::new(),
            zygotes: std::sync::Mutex::new(std::collections::HashSet::new()),
            pre_exec_notes,
            last_start_error: std::sync::Mutex::new(None),
            started,
        });
        let (tx, rx) = mpsc::unbounded_channel();
        let rx = Arc::new(Mutex::new(rx));
        for index in 0..workers {
            tokio::spawn(worker_loop(
                index,
                Arc::clone(&shared),
                Arc::clone(&rx),
                None,
            ));
        }
        Ok(Self { tx, shared })
    }

    /// Runs one call. Never fails: sandbox failures are results too.
    pub async fn run(&self, call: ToolCall) -> ToolResult {
        self.run_waited(call).await.0
    }

    /// [`Pool::run`], with the part of the call's queue wait spent while another call was past
    /// its soft limit (a quarter of its timeout, at most 1 s): the time it waited behind calls at
    /// their time limit, which the overflow workers keep short (issue #68).
    pub async fn run_waited(&self, call: ToolCall) -> (ToolResult, Duration) {
        let (reply, rx) = oneshot::channel();
        self.shared.queued.fetch_add(1, Ordering::SeqCst);
        let queued_at = self.shared.stalled_clock();
        if self
            .tx
            .send(Job {
                call,
                reply,
                queued_at,
            })
            .is_err()
        {
            self.shared.queued.fetch_sub(1, Ordering::SeqCst);
            return (
                ToolResult::internal("the pool is shut down"),
                Duration::ZERO,
            );
        }
        rx.await.unwrap_or_else(|_| {
            (
                ToolResult::internal("the worker dropped the call"),
                Duration::ZERO,
            )
        })
    }

    /// Runs calls concurrently (bounded by the worker count) and returns the
    /// results in input order.
    pub async fn run_batch(&self, calls: Vec<ToolCall>) -> Vec<ToolResult> {
        let handles: Vec<_> = calls
            .into_iter()
            .map(|call| {
                let pool = self.clone();
                tokio::spawn(async move { pool.run(call).await })
            })
            .collect();
        let mut out = Vec::with_capacity(handles.len());
        for h in handles {
            out.push(
                h.await
                    .unwrap_or_else(|e| ToolResult::internal(format!("call task failed: {e}"))),
            );
        }
        out
    }

    /// The pool's load.
    pub fn status(&self) -> PoolStatus {
        let s = &self.shared;
        PoolStatus {
            queued: s.queued.load(Ordering::SeqCst),
            running: s.running.load(Ordering::SeqCst),
            workers: s.launch.config.workers,
            alive: s.alive.load(Ordering::SeqCst),
            restarts: s.restarts.load(Ordering::SeqCst),
        }
    }

    /// The configuration the pool runs with.
    pub fn config(&self) -> &Config {
        &self.shared.launch.config
    }

    /// The tool-response format.
    pub fn format(&self) -> &ResponseFormat {
        &self.shared.launch.config.format
    }

    /// Waits until every worker has made its first start attempt; returns the
    /// isolation report, or an error when no worker could start.
    pub async fn ready(&self) -> Result<SandboxReport> {
        let workers = self.shared.launch.config.workers;
        let mut rx = self.shared.started.subscribe();
        rx.wait_for(|n| *n >= workers)
            .await
            .map_err(|_| Error::Closed)?;
        self.report().ok_or_else(|| {
            let last = self
                .shared
                .last_start_error
                .lock()
                .expect("start error lock")
                .clone();
            Error::Worker {
                worker: 0,
                message: format!("no worker could start: {}", last.unwrap_or_default()),
            }
        })
    }

    /// The isolation report, once a worker has started.
    pub fn report(&self) -> Option<SandboxReport> {
        self.shared.report.get().cloned()
    }

    /// Processes started by calls that are still alive: members of the
    /// workers' cgroups, and any process whose working directory is under
    /// [`Pool::run_dir`], other than the workers themselves. Empty between
    /// calls unless something escaped; tests and `rstar tools doctor` use it.
    pub fn stray_processes(&self) -> Vec<i32> {
        let zygotes = self.shared.zygotes.lock().expect("zygote set lock").clone();
        let run_dir = self.shared.launch.run_dir.clone();
        let mut strays = std::collections::BTreeSet::new();
        if let Some(root) = &self.shared.launch.cgroup_root {
            for entry in std::fs::read_dir(root).into_iter().flatten().flatten() {
                let procs =
                    std::fs::read_to_string(entry.path().join("cgroup.procs")).unwrap_or_default();
                strays.extend(procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
            }
        }
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            if std::fs::read_link(entry.path().join("cwd"))
                .is_ok_and(|cwd| cwd.starts_with(&run_dir))
            {
                strays.insert(pid);
            }
        }
        strays
            .into_iter()
            .filter(|p| !zygotes.contains(p))
            .collect()
    }

    /// The process ids of the live workers (for monitoring; user code runs
    /// in their children).
    pub fn worker_pids(&self) -> Vec<i32> {
        let mut pids: Vec<i32> = self
            .shared
            .zygotes
            .lock()
            .expect("zygote set lock")
            .iter()
            .copied()
            .collect();
        pids.sort_unstable();
        pids
    }

    /// Where this pool's worker directories live (removed on drop).
    pub fn run_dir(&self) -> PathBuf {
        self.shared.launch.run_dir.clone()
    }
}

/// The interpreter's prefixes and import path, as it reports them (empty when
/// it cannot be run).
fn python_paths(python: &std::path::Path) -> Vec<PathBuf> {
    let code = "import sys, os, json\n\
        paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]\n\
        paths.append(os.path.realpath(sys.executable))\n\
        print(json.dumps(paths + [p for p in sys.path if p]))";
    let out = std::process::Command::new(python)
        .args(["-I", "-c", code])
        .env_clear()
        .output();
    match out {
        Ok(o) if o.status.success() => {
            serde_json::from_slice::<Vec<PathBuf>>(&o.stdout).unwrap_or_default()
        }
        _ => Vec::new(),
    }
}

fn seccomp_program() -> &'static [libc::sock_filter] {
    static PROGRAM: OnceLock<Vec<libc::sock_filter>> = OnceLock::new();
    PROGRAM.get_or_init(|| sandbox::seccomp_filter().unwrap_or_default())
}

fn build_report(shared: &Shared, ready: &Value) -> SandboxReport {
    let cfg = &shared.launch.config;
    let layers_json = ready.get("layers").cloned().unwrap_or(Value::Null);
    let get = |k: &str| {
        layers_json
            .get(k)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let landlock_abi = ready
        .get("landlock_abi")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let pre = shared.launch.pre_exec;
    let mut layers = Vec::new();
    let net_parts: Vec<&str> = [
        pre.netns.then_some("network namespace"),
        pre.seccomp.then_some("seccomp denies socket()"),
        (landlock_abi >= 4).then_some("Landlock denies TCP bind/connect"),
    ]
    .into_iter()
    .flatten()
    .collect();
    let net_state = if pre.netns && pre.seccomp {
        LayerState::Active
    } else if net_parts.is_empty() {
        LayerState::Missing
    } else {
        LayerState::Degraded
    };
    let net_detail = if net_parts.is_empty() {
        "no layer blocks the network".to_string()
    } else {
        net_parts.join(", ")
    };
    layers.push(Layer {
        name: "network",
        state: net_state,
        detail: net_detail,
    });
    layers.push(sandbox::parse_layer(
        "filesystem",
        get("filesystem").as_deref(),
    ));
    layers.push(match pre.scratch {
        Some(bytes) => Layer {
            name: "disk",
            state: LayerState::Active,
            detail: format!("each worker's call directories live on a private {} MiB tmpfs", bytes >> 20),
        },
        None => Layer {
            name: "disk",
            state: LayerState::Degraded,
            detail: format!(
                "call directories are on disk under {}: RLIMIT_FSIZE bounds each file, not their number",
                cfg.temp_root.display()
            ),
        },
    });
    layers.push(Layer {
        name: "environment",
        state: LayerState::Active,
        detail: "cleared: only PATH, HOME, TMPDIR, LANG and thread-count variables reach user code"
            .into(),
    });
    layers.push(sandbox::parse_layer(
        "privileges",
        get("privileges").as_deref(),
    ));
    let uid_drop = layers
        .last()
        .map(|l| l.state == LayerState::Active)
        .unwrap_or(false);
    let (proc_state, proc_detail) = match (&shared.launch.cgroup_root, uid_drop) {
        (Some(_), _) => (
            LayerState::Active,
            format!("pids cgroup v1, {} per call", cfg.max_processes),
        ),
        (None, true) => (
            LayerState::Active,
            format!("RLIMIT_NPROC {} as a non-root uid", cfg.max_processes),
        ),
        (None, false) => (
            LayerState::Missing,
            "no pids cgroup and uid 0: RLIMIT_NPROC does nothing".into(),
        ),
    };
    layers.push(Layer {
        name: "processes",
        state: proc_state,
        detail: proc_detail,
    });
    layers.push(Layer {
        name: "limits",
        state: LayerState::Active,
        detail: format!(
            "wall {:?}, RLIMIT_CPU {}s, RLIMIT_AS {} MiB, RLIMIT_FSIZE {} MiB, RLIMIT_NOFILE {}, core 0",
            cfg.timeout,
            cfg.cpu_time.unwrap_or(cfg.timeout).as_secs_f64().ceil().max(1.0),
            cfg.memory >> 20,
            cfg.file_size >> 20,
            cfg.open_files
        ),
    });
    layers.push(Layer {
        name: "output",
        state: LayerState::Active,
        detail: format!(
            "{} bytes per stream, then the call is killed",
            cfg.max_output
        ),
    });
    let cleanup = sandbox::parse_layer("cleanup", get("reaper").as_deref());
    let cleanup = if shared.launch.cgroup_root.is_some() {
        Layer {
            name: "cleanup",
            state: LayerState::Active,
            detail: format!("{}; pids cgroup swept after each call", cleanup.detail),
        }
    } else {
        cleanup
    };
    layers.push(cleanup);
    let syscalls = if pre.seccomp {
        Layer {
            name: "syscalls",
            state: LayerState::Active,
            detail: "seccomp: namespaces, mount, ptrace, bpf, io_uring, keyrings, modules denied"
                .into(),
        }
    } else {
        Layer {
            name: "syscalls",
            state: LayerState::Missing,
            detail: shared.pre_exec_notes.join("; "),
        }
    };
    layers.push(syscalls);
    let strings = |k: &str| -> Vec<String> {
        ready
            .get(k)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    SandboxReport {
        layers,
        python: ready
            .get("python")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string(),
        preloaded: strings("preloaded"),
        failed_preload: strings("failed_preload"),
    }
}

fn log_report(report: &SandboxReport, notes: &[String]) {
    for note in notes {
        tracing::warn!("{note}");
    }
    for layer in &report.layers {
        if layer.state != LayerState::Active {
            tracing::warn!(layer = layer.name, state = %layer.state, "isolation layer not fully active: {}", layer.detail);
        }
    }
}

async fn start_zygote(index: usize, shared: &Shared, once: bool) -> Result<Zygote> {
    let serial = shared.serial.fetch_add(1, Ordering::Relaxed);
    let z = Zygote::start(&shared.launch, index, serial, once)
        .await
        .inspect_err(|e| {
            *shared.last_start_error.lock().expect("start error lock") = Some(e.to_string());
        })?;
    shared
        .zygotes
        .lock()
        .expect("zygote set lock")
        .insert(z.pid());
    if !once && shared.report.get().is_none() {
        let report = build_report(shared, &z.ready);
        if shared.report.set(report.clone()).is_ok() {
            log_report(&report, &shared.pre_exec_notes);
        }
    }
    Ok(z)
}

/// How many overflow workers a worker may add to the pool: a call that runs past its soft limit
/// ([`soft_limit`]) no longer holds a place in the queue's service, since an overflow worker
/// takes its place until it returns (issue #68). Bounded, so a batch of hostile calls holds at
/// most `workers × (1 + OVERFLOW_PER_WORKER)` processes, each within its own limits.
pub(crate) const OVERFLOW_PER_WORKER: usize = 4;

/// When a running call stops counting as a worker: a quarter of its wall-clock limit, at most
/// one second. Quick calls (milliseconds) never reach it; one that loops, sleeps or hangs does,
/// long before its limit.
fn soft_limit(timeout: Duration) -> Duration {
    (timeout / 4).min(Duration::from_secs(1))
}

type Queue = Arc<Mutex<mpsc::UnboundedReceiver<Job>>>;

/// A worker: takes calls from the queue one at a time. A core worker (`stop` is `None`) starts
/// its process at once and lives as long as the pool; an overflow worker starts its process on
/// its first call and ends when `stop` fires (its sender dropped: the call that made it
/// returned), after the call it is running.
async fn worker_loop(
    index: usize,
    shared: Arc<Shared>,
    rx: Queue,
    mut stop: Option<oneshot::Receiver<()>>,
) {
    let cfg = &shared.launch.config;
    let mut zygote: Option<Zygote> = None;
    let mut failures = 0u32;
    let overflow = stop.is_some();
    if overflow {
        // Started on the first call.
    } else if cfg.backend == Backend::Zygote {
        match start_zygote(index, &shared, false).await {
            Ok(z) => {
                shared.alive.fetch_add(1, Ordering::SeqCst);
                zygote = Some(z);
            }
            Err(e) => tracing::error!(worker = index, error = %e, "worker failed to start"),
        }
    } else if shared.report.get().is_none() {
        // The spawn backend reports the same layers; start one probe worker.
        if let Ok(z) = start_zygote(index, &shared, false).await {
            discard(&shared, z).await;
        }
    }
    if !overflow {
        shared.started.send_modify(|n| *n += 1);
    }
    loop {
        let job = match stop.as_mut() {
            None => rx.lock().await.recv().await,
            Some(stop) => tokio::select! {
                // `recv` is cancel-safe: a job is either taken or left in the queue.
                job = async { rx.lock().await.recv().await } => job,
                _ = stop => None,
            },
        };
        let Some(job) = job else { break };
        let behind = shared.stalled_clock().saturating_sub(job.queued_at);
        shared.queued.fetch_sub(1, Ordering::SeqCst);
        shared.running.fetch_add(1, Ordering::SeqCst);
        let soft = soft_limit(job.call.timeout.unwrap_or(cfg.timeout));
        let result = {
            let run = run_job(&job.call, index, &shared, &mut zygote, &mut failures);
            tokio::pin!(run);
            tokio::select! {
                r = &mut run => r,
                () = tokio::time::sleep(soft) => {
                    // Past the soft limit: an overflow worker serves the queue until this call
                    // returns (its stop sender lives as long as this arm).
                    let _helper = spawn_overflow(&shared, &rx);
                    shared.stalled.lock().expect("stalled clock lock").stall();
                    let r = run.await;
                    shared.stalled.lock().expect("stalled clock lock").unstall();
                    r
                }
            }
        };
        shared.running.fetch_sub(1, Ordering::SeqCst);
        let _ = job.reply.send((result, behind));
        // An overflow worker whose call returned stops after the call it ran.
        if let Some(s) = stop.as_mut()
            && matches!(s.try_recv(), Err(oneshot::error::TryRecvError::Closed))
        {
            break;
        }
    }
    if let Some(z) = zygote.take() {
        shared.alive.fetch_sub(1, Ordering::SeqCst);
        discard(&shared, z).await;
    }
    if overflow {
        shared.overflow.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Starts an overflow worker unless the pool has its most already; the worker ends when the
/// returned sender is dropped.
fn spawn_overflow(shared: &Arc<Shared>, rx: &Queue) -> Option<oneshot::Sender<()>> {
    let most = shared.launch.config.workers * OVERFLOW_PER_WORKER;
    let n = shared.overflow.fetch_add(1, Ordering::SeqCst);
    if n >= most {
        shared.overflow.fetch_sub(1, Ordering::SeqCst);
        return None;
    }
    let (tx, stop) = oneshot::channel();
    let index = shared.launch.config.workers + n;
    let worker: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> = Box::pin(
        worker_loop(index, Arc::clone(shared), Arc::clone(rx), Some(stop)),
    );
    tokio::spawn(worker);
    Some(tx)
}

/// Runs one call on this worker's process (started or replaced as needed).
async fn run_job(
    call: &ToolCall,
    index: usize,
    shared: &Shared,
    zygote: &mut Option<Zygote>,
    failures: &mut u32,
) -> ToolResult {
    let cfg = &shared.launch.config;
    match cfg.backend {
        Backend::Spawn => match start_zygote(index, shared, true).await {
            Ok(mut z) => {
                let r = z.call(call, cfg).await;
                discard(shared, z).await;
                r.unwrap_or_else(|e| ToolResult::internal(e.to_string()))
            }
            Err(e) => ToolResult::internal(e.to_string()),
        },
        Backend::Zygote => {
            // A worker that died between calls is replaced before the
            // call, which then runs normally.
            if zygote.as_mut().is_some_and(|z| z.has_exited()) {
                tracing::warn!(worker = index, "replacing a worker that died while idle");
                retire(shared, zygote.take()).await;
            }
            if zygote.is_none() {
                if *failures > 0 {
                    // Back off a little when workers keep failing to start.
                    tokio::time::sleep(Duration::from_millis(50 * u64::from((*failures).min(20))))
                        .await;
                }
                match start_zygote(index, shared, false).await {
                    Ok(z) => {
                        *failures = 0;
                        shared.alive.fetch_add(1, Ordering::SeqCst);
                        *zygote = Some(z);
                    }
                    Err(e) => {
                        *failures += 1;
                        tracing::error!(worker = index, error = %e, "worker failed to start");
                    }
                }
            }
            match zygote.as_mut() {
                None => ToolResult::internal("no worker could be started"),
                Some(z) => match z.call(call, cfg).await {
                    Ok(r) => {
                        if z.calls >= cfg.max_calls_per_worker {
                            retire(shared, zygote.take()).await;
                        }
                        r
                    }
                    Err(e) => {
                        tracing::warn!(worker = index, error = %e, "replacing a failed worker");
                        retire(shared, zygote.take()).await;
                        ToolResult::internal(e.to_string())
                    }
                },
            }
        }
    }
}

async fn retire(shared: &Shared, z: Option<Zygote>) {
    if let Some(z) = z {
        shared.alive.fetch_sub(1, Ordering::SeqCst);
        shared.restarts.fetch_add(1, Ordering::SeqCst);
        discard(shared, z).await;
    }
}

/// Stops `z` and forgets its pid (the set `worker_pids` and the stray check read).
async fn discard(shared: &Shared, z: Zygote) {
    shared
        .zygotes
        .lock()
        .expect("zygote set lock")
        .remove(&z.pid());
    z.kill().await;
}

/// A blocking wrapper: owns a small tokio runtime and a [`Pool`].
#[derive(Debug)]
pub struct BlockingPool {
    runtime: tokio::runtime::Runtime,
    pool: Pool,
}

impl BlockingPool {
    /// Starts a pool from `builder` and waits until its workers are ready.
    pub fn new(builder: crate::PoolBuilder) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|source| Error::Io(IoError::new(PathBuf::from("<tokio runtime>"), source)))?;
        let pool = runtime.block_on(async { builder.build() })?;
        runtime.block_on(pool.ready())?;
        Ok(Self { runtime, pool })
    }

    /// Runs one call.
    pub fn run(&self, call: ToolCall) -> ToolResult {
        self.runtime.block_on(self.pool.run(call))
    }

    /// [`Pool::run_waited`]: the result and the time the call waited behind calls at their
    /// time limit.
    pub fn run_waited(&self, call: ToolCall) -> (ToolResult, Duration) {
        self.runtime.block_on(self.pool.run_waited(call))
    }

    /// Runs calls concurrently; results in input order.
    pub fn run_batch(&self, calls: Vec<ToolCall>) -> Vec<ToolResult> {
        self.runtime.block_on(self.pool.run_batch(calls))
    }

    /// The async pool inside.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }
}

#[cfg(test)]
mod tests {
    use super::StalledClock;
    use std::time::Duration;

    #[test]
    fn the_stalled_clock_runs_only_while_a_call_is_past_its_soft_limit() {
        let mut clock = StalledClock::default();
        let a = clock.now();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(clock.now(), a, "nothing stalled: the clock stands");
        clock.stall();
        clock.stall();
        std::thread::sleep(Duration::from_millis(5));
        clock.unstall();
        let b = clock.now();
        assert!(b > a, "one call still stalled: the clock runs");
        std::thread::sleep(Duration::from_millis(5));
        clock.unstall();
        let c = clock.now();
        assert!(c > b);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(clock.now(), c, "all returned: the clock stands again");
    }
}
