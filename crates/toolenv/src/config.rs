//! Pool configuration and its builder.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::format::ResponseFormat;
use crate::pool::Pool;

/// How calls are executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// A preloaded worker per slot forks one sandboxed child per call (fast).
    #[default]
    Zygote,
    /// A new interpreter per call under the same sandbox, nothing preloaded:
    /// the portable fallback and the correctness oracle.
    Spawn,
}

/// Everything a pool needs. Build it with [`PoolBuilder`]; every field has a
/// documented default there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// Python interpreter.
    pub python: PathBuf,
    /// Number of workers (concurrent calls).
    pub workers: usize,
    /// Execution backend.
    pub backend: Backend,
    /// Wall-clock limit per call.
    pub timeout: Duration,
    /// CPU-time limit per call (`RLIMIT_CPU`, rounded up to whole seconds);
    /// `None` means the wall-clock limit.
    pub cpu_time: Option<Duration>,
    /// Address-space limit per call in bytes (`RLIMIT_AS`).
    pub memory: u64,
    /// Largest file a call may write, in bytes (`RLIMIT_FSIZE`).
    pub file_size: u64,
    /// Open file descriptors per call (`RLIMIT_NOFILE`).
    pub open_files: u32,
    /// Processes per call (pids cgroup, or `RLIMIT_NPROC` as a non-root uid).
    pub max_processes: u32,
    /// Bytes kept per stream; a call writing more is killed.
    pub max_output: usize,
    /// Modules each worker imports before its first call (skipped when absent).
    pub preload: Vec<String>,
    /// Calls after which a worker is replaced by a fresh one.
    pub max_calls_per_worker: u64,
    /// How long a worker may take to start and preload.
    pub start_timeout: Duration,
    /// Run workers in a new network namespace.
    pub network_namespace: bool,
    /// Install the seccomp filter.
    pub seccomp: bool,
    /// Confine file access with Landlock.
    pub landlock: bool,
    /// Put each worker in a v1 pids cgroup.
    pub cgroup: bool,
    /// Run user code as this uid when the interpreter is readable by it.
    pub unprivileged_uid: Option<u32>,
    /// Size of the tmpfs mounted (in a private mount namespace) on each
    /// worker's directory, so calls cannot fill the disk; `None` keeps the
    /// call directories on disk.
    pub scratch_size: Option<u64>,
    /// Extra paths user code may read.
    pub read_paths: Vec<PathBuf>,
    /// Where the per-worker and per-call directories are created.
    pub temp_root: PathBuf,
    /// Tool-response text formatting.
    pub format: ResponseFormat,
}

/// Builds a [`Pool`]. Defaults (from [`PoolBuilder::new`]):
///
/// | option | default |
/// |---|---|
/// | `python` | `python3` |
/// | `workers` | available CPUs |
/// | `backend` | [`Backend::Zygote`] |
/// | `timeout` | 10 s (code-judge's `MAX_EXECUTION_TIME`) |
/// | `cpu_time` | the timeout |
/// | `memory` | 4 GiB of address space |
/// | `file_size` | 64 MiB |
/// | `open_files` | 256 |
/// | `max_processes` | 64 |
/// | `max_output` | 1 MiB per stream |
/// | `preload` | `numpy`, `sympy` |
/// | `max_calls_per_worker` | 10 000 |
/// | `start_timeout` | 60 s |
/// | isolation layers | all on; unprivileged uid 65534 |
/// | `scratch_size` | a 256 MiB tmpfs per worker |
/// | `temp_root` | the system temporary directory |
/// | `format` | 1000 characters per stream, no budget |
#[derive(Debug, Clone)]
pub struct PoolBuilder {
    config: Config,
}

impl PoolBuilder {
    /// The documented defaults.
    pub fn new() -> Self {
        let workers = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        Self {
            config: Config {
                python: PathBuf::from("python3"),
                workers,
                backend: Backend::Zygote,
                timeout: Duration::from_secs(10),
                cpu_time: None,
                memory: 4 << 30,
                file_size: 64 << 20,
                open_files: 256,
                max_processes: 64,
                max_output: 1 << 20,
                preload: vec!["numpy".into(), "sympy".into()],
                max_calls_per_worker: 10_000,
                start_timeout: Duration::from_secs(60),
                network_namespace: true,
                seccomp: true,
                landlock: true,
                cgroup: true,
                unprivileged_uid: Some(65534),
                scratch_size: Some(256 << 20),
                read_paths: Vec::new(),
                temp_root: std::env::temp_dir(),
                format: ResponseFormat::new(),
            },
        }
    }

    /// Python interpreter to run.
    pub fn python(mut self, python: impl Into<PathBuf>) -> Self {
        self.config.python = python.into();
        self
    }

    /// Number of workers.
    pub fn workers(mut self, n: usize) -> Self {
        self.config.workers = n;
        self
    }

    /// Execution backend.
    pub fn backend(mut self, backend: Backend) -> Self {
        self.config.backend = backend;
        self
    }

    /// Wall-clock limit per call.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.config.timeout = timeout;
        self
    }

    /// CPU-time limit per call.
    pub fn cpu_time(mut self, cpu: Duration) -> Self {
        self.config.cpu_time = Some(cpu);
        self
    }

    /// Address-space limit per call, in bytes.
    pub fn memory(mut self, bytes: u64) -> Self {
        self.config.memory = bytes;
        self
    }

    /// File-size limit per call, in bytes.
    pub fn file_size(mut self, bytes: u64) -> Self {
        self.config.file_size = bytes;
        self
    }

    /// Processes per call.
    pub fn max_processes(mut self, n: u32) -> Self {
        self.config.max_processes = n;
        self
    }

    /// Bytes kept per stream before the call is killed.
    pub fn max_output(mut self, bytes: usize) -> Self {
        self.config.max_output = bytes;
        self
    }

    /// Modules to preload into each worker.
    pub fn preload<I, S>(mut self, modules: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.config.preload = modules.into_iter().map(Into::into).collect();
        self
    }

    /// Calls after which a worker is replaced.
    pub fn max_calls_per_worker(mut self, n: u64) -> Self {
        self.config.max_calls_per_worker = n;
        self
    }

    /// Turns the network namespace on or off.
    pub fn network_namespace(mut self, on: bool) -> Self {
        self.config.network_namespace = on;
        self
    }

    /// Turns the seccomp filter on or off.
    pub fn seccomp(mut self, on: bool) -> Self {
        self.config.seccomp = on;
        self
    }

    /// Turns Landlock on or off.
    pub fn landlock(mut self, on: bool) -> Self {
        self.config.landlock = on;
        self
    }

    /// Turns the per-worker pids cgroup on or off.
    pub fn cgroup(mut self, on: bool) -> Self {
        self.config.cgroup = on;
        self
    }

    /// The uid user code runs as when possible (`None`: keep the uid).
    pub fn unprivileged_uid(mut self, uid: Option<u32>) -> Self {
        self.config.unprivileged_uid = uid;
        self
    }

    /// Size of each worker's tmpfs scratch (`None`: call directories on disk).
    pub fn scratch_size(mut self, bytes: Option<u64>) -> Self {
        self.config.scratch_size = bytes;
        self
    }

    /// An extra path user code may read.
    pub fn read_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.config.read_paths.push(path.into());
        self
    }

    /// Where worker and call directories are created.
    pub fn temp_root(mut self, dir: impl Into<PathBuf>) -> Self {
        self.config.temp_root = dir.into();
        self
    }

    /// Tool-response formatting.
    pub fn format(mut self, format: ResponseFormat) -> Self {
        self.config.format = format;
        self
    }

    /// The configuration as it stands.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Checks the configuration and starts the pool; must be called inside a
    /// tokio runtime. Workers start in the background: await
    /// [`Pool::ready`] to wait for them.
    pub fn build(self) -> Result<Pool> {
        let c = &self.config;
        if c.workers == 0 {
            return Err(Error::Config("workers must be at least 1".into()));
        }
        if c.timeout.is_zero() {
            return Err(Error::Config("timeout must be positive".into()));
        }
        if c.max_output == 0 || c.max_processes == 0 || c.open_files < 16 {
            return Err(Error::Config(
                "max_output and max_processes must be positive, open_files at least 16".into(),
            ));
        }
        let mut config = self.config;
        config.python = resolve_program(&config.python);
        Pool::start(config)
    }
}

/// Makes the interpreter path independent of the working directory and of the
/// workers' reduced `PATH`: relative paths are joined to the current
/// directory, bare names are looked up in this process's `PATH`.
fn resolve_program(program: &std::path::Path) -> PathBuf {
    if program.components().count() > 1 {
        return std::path::absolute(program).unwrap_or_else(|_| program.to_path_buf());
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|candidate| {
                use std::os::unix::fs::PermissionsExt;
                candidate
                    .metadata()
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
    });
    found.unwrap_or_else(|| program.to_path_buf())
}

impl Default for PoolBuilder {
    fn default() -> Self {
        Self::new()
    }
}
