//! One Python worker process and the length-prefixed JSON protocol to it.

use rstar_episode::IoError;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::call::{Outcome, ToolCall, ToolResult};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::sandbox::{self, Cgroup, PreExec, Scratch};

/// The worker program, run with `python -I -B -c`.
pub(crate) const ZYGOTE_SRC: &str = include_str!("zygote.py");

/// Largest frame accepted from a worker (outputs are capped well below).
const MAX_FRAME: u32 = 1 << 30;

/// A live worker process.
#[derive(Debug)]
pub(crate) struct Zygote {
    index: usize,
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    pid: i32,
    pub(crate) calls: u64,
    base_dir: PathBuf,
    cgroup: Option<Cgroup>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    /// The worker's ready message.
    pub(crate) ready: Value,
}

/// Everything a worker needs to start, shared by the pool.
#[derive(Debug)]
pub(crate) struct Launch {
    pub config: Config,
    pub pre_exec: PreExec,
    pub filter: &'static [libc::sock_filter],
    pub cgroup_root: Option<PathBuf>,
    pub run_dir: PathBuf,
    pub unmasks: Vec<sandbox::Unmask>,
}

impl Zygote {
    /// Starts a worker; `once` workers (the spawn-per-call backend) preload
    /// nothing and exit after one call.
    pub(crate) async fn start(
        launch: &Launch,
        index: usize,
        serial: u64,
        once: bool,
    ) -> Result<Self> {
        let cfg = &launch.config;
        let base_dir = launch.run_dir.join(format!("w{index}-{serial}"));
        std::fs::create_dir_all(&base_dir)
            .map_err(|source| Error::Io(IoError::new(base_dir.clone(), source)))?;
        let mut cmd = tokio::process::Command::new(&cfg.python);
        cmd.args(["-I", "-B", "-c", ZYGOTE_SRC])
            .env_clear()
            .envs([
                ("PATH", "/usr/local/bin:/usr/bin:/bin"),
                ("LANG", "C.UTF-8"),
                ("OPENBLAS_NUM_THREADS", "1"),
                ("OMP_NUM_THREADS", "1"),
                ("MKL_NUM_THREADS", "1"),
            ])
            .env("HOME", &base_dir)
            .current_dir(&base_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let hold = base_dir.with_extension("hold");
        let scratch = match launch.pre_exec.scratch {
            Some(bytes) => Some(
                Scratch::new(&base_dir, bytes, &launch.unmasks, &hold)
                    .map_err(|source| Error::Io(IoError::new(base_dir.clone(), source)))?,
            ),
            None => None,
        };
        sandbox::install(&mut cmd, launch.pre_exec, launch.filter, scratch);
        let spawned = cmd.spawn();
        // The parking directories are only needed during the fork.
        let _ = std::fs::remove_dir_all(&hold);
        let mut child = spawned.map_err(|source| Error::Spawn {
            python: cfg.python.clone(),
            source,
        })?;
        let pid = child.id().map(|p| p as i32).unwrap_or(0);
        let cgroup = match &launch.cgroup_root {
            Some(root) => {
                let cg = Cgroup::create(root, &format!("w{index}-{serial}"), cfg.max_processes + 2)
                    .and_then(|cg| cg.add(pid as u32).map(|()| cg));
                match cg {
                    Ok(cg) => Some(cg),
                    Err(e) => {
                        tracing::warn!(worker = index, error = %e, "pids cgroup unavailable for this worker");
                        None
                    }
                }
            }
            None => None,
        };
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let tail = Arc::clone(&stderr_tail);
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::debug!(worker = index, "{line}");
                let mut t = tail.lock().expect("stderr tail lock");
                if t.len() == 20 {
                    t.pop_front();
                }
                t.push_back(line);
            }
        });
        let mut z = Self {
            index,
            child,
            stdin,
            stdout,
            pid,
            calls: 0,
            base_dir: base_dir.clone(),
            cgroup,
            stderr_tail,
            ready: Value::Null,
        };
        let preload: Vec<&str> = if once {
            Vec::new()
        } else {
            cfg.preload.iter().map(String::as_str).collect()
        };
        let init = json!({
            "base_dir": base_dir,
            "preload": preload,
            "landlock": cfg.landlock,
            "uid": cfg.unprivileged_uid,
            "read_paths": cfg.read_paths,
            "once": once,
        });
        let ready = async {
            z.send(&init).await?;
            z.recv().await
        };
        // Preloading numpy and sympy takes about a second on a loaded machine.
        match tokio::time::timeout(cfg.start_timeout, ready).await {
            Ok(Ok(msg)) if msg.get("ready").and_then(Value::as_bool) == Some(true) => {
                z.ready = msg;
                Ok(z)
            }
            Ok(Ok(other)) => Err(z.fail(format!("unexpected ready message {other}"))),
            Ok(Err(e)) => Err(z.fail(e.to_string())),
            Err(_) => Err(z.fail(format!("did not start within {:?}", cfg.start_timeout))),
        }
    }

    fn fail(&mut self, message: String) -> Error {
        let tail: Vec<String> = self
            .stderr_tail
            .lock()
            .expect("stderr tail lock")
            .iter()
            .cloned()
            .collect();
        let message = if tail.is_empty() {
            message
        } else {
            format!("{message}; stderr: {}", tail.join(" | "))
        };
        Error::Worker {
            worker: self.index,
            message,
        }
    }

    async fn send(&mut self, msg: &Value) -> std::io::Result<()> {
        let body = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
        let mut frame = Vec::with_capacity(body.len() + 4);
        frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
        frame.extend_from_slice(&body);
        self.stdin.write_all(&frame).await?;
        self.stdin.flush().await
    }

    async fn recv(&mut self) -> std::io::Result<Value> {
        let mut head = [0u8; 4];
        self.stdout.read_exact(&mut head).await?;
        let n = u32::from_be_bytes(head);
        if n > MAX_FRAME {
            return Err(std::io::Error::other(format!("frame of {n} bytes")));
        }
        let mut body = vec![0u8; n as usize];
        self.stdout.read_exact(&mut body).await?;
        serde_json::from_slice(&body).map_err(std::io::Error::other)
    }

    /// Whether the worker process has exited.
    pub(crate) fn has_exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// The worker's process id.
    pub(crate) fn pid(&self) -> i32 {
        self.pid
    }

    /// Runs one call. An `Err` means the worker is unusable and must be killed.
    pub(crate) async fn call(&mut self, call: &ToolCall, cfg: &Config) -> Result<ToolResult> {
        let timeout = call.timeout.unwrap_or(cfg.timeout);
        let cpu = cfg
            .cpu_time
            .unwrap_or(timeout)
            .as_secs_f64()
            .ceil()
            .max(1.0) as u64;
        let req = json!({
            "id": self.calls,
            "code": call.code,
            "input": call.input,
            "history": call.history,
            "timeout": timeout.as_secs_f64(),
            "cpu": cpu,
            "mem": cfg.memory,
            "fsize": cfg.file_size,
            "nofile": cfg.open_files,
            "nproc": cfg.max_processes,
            // Overflow workers (`pool::OVERFLOW_PER_WORKER`) run calls beside the core ones.
            "nproc_user": cfg.max_processes as usize
                * cfg.workers
                * (1 + crate::pool::OVERFLOW_PER_WORKER)
                + 16,
            "max_output": cfg.max_output,
        });
        self.calls += 1;
        // The worker enforces the limit itself; this margin only catches a
        // worker that is itself stuck.
        let backstop = timeout + Duration::from_secs(5);
        let exchange = async {
            self.send(&req).await?;
            self.recv().await
        };
        let reply = match tokio::time::timeout(backstop, exchange).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(e)) => return Err(self.fail(format!("lost during a call: {e}"))),
            Err(_) => return Err(self.fail(format!("no answer within {backstop:?}"))),
        };
        if let Some(cg) = &self.cgroup {
            let stragglers = cg.kill_all_except(Some(self.pid));
            if stragglers > 0 {
                tracing::warn!(
                    worker = self.index,
                    stragglers,
                    "killed processes the worker's sweep missed"
                );
            }
        }
        Ok(to_result(&reply))
    }

    /// Kills the worker and everything it started, and removes its directory.
    pub(crate) async fn kill(mut self) {
        sandbox::kill_group(self.pid);
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await;
        drop(self.cgroup.take());
        let _ = std::fs::remove_dir_all(&self.base_dir);
    }
}

impl Drop for Zygote {
    fn drop(&mut self) {
        sandbox::kill_group(self.pid);
        let _ = std::fs::remove_dir_all(&self.base_dir);
    }
}

fn to_result(reply: &Value) -> ToolResult {
    let text = |k: &str| {
        reply
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let int = |k: &str| reply.get(k).and_then(Value::as_i64).map(|v| v as i32);
    let float = |k: &str| reply.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    let status = reply
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("failed");
    let stdout = text("stdout");
    let exit_code = int("exit_code");
    let outcome = match status {
        "exited" if exit_code == Some(0) && stdout.is_empty() => Outcome::NoOutput,
        "exited" if exit_code == Some(0) => Outcome::Output,
        "exited" | "signaled" | "output_limit" => Outcome::Error,
        "timeout" => Outcome::Timeout,
        _ => Outcome::Internal,
    };
    let message = match outcome {
        Outcome::Internal => Some(match status {
            "setup_failed" => format!("sandbox set-up failed: {}", text("stderr").trim()),
            _ => format!("worker failed: {}", text("error")),
        }),
        _ => None,
    };
    let (stdout, stderr) = if outcome == Outcome::Internal {
        (String::new(), String::new())
    } else {
        (stdout, text("stderr"))
    };
    ToolResult {
        outcome,
        stdout,
        stderr,
        exit_code,
        signal: int("signal"),
        cost: float("elapsed"),
        cpu: float("cpu"),
        output_limited: status == "output_limit",
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_map_to_outcomes() {
        let r = |v: Value| to_result(&v).outcome;
        assert_eq!(
            r(json!({"status": "exited", "exit_code": 0, "stdout": "1\n"})),
            Outcome::Output
        );
        assert_eq!(
            r(json!({"status": "exited", "exit_code": 0, "stdout": ""})),
            Outcome::NoOutput
        );
        assert_eq!(
            r(json!({"status": "exited", "exit_code": 1})),
            Outcome::Error
        );
        assert_eq!(
            r(json!({"status": "signaled", "signal": 11})),
            Outcome::Error
        );
        assert_eq!(r(json!({"status": "timeout"})), Outcome::Timeout);
        assert_eq!(r(json!({"status": "setup_failed"})), Outcome::Internal);
        assert_eq!(r(json!({"status": "nonsense"})), Outcome::Internal);
        let limited = to_result(&json!({"status": "output_limit", "stdout": "x"}));
        assert_eq!(
            (limited.outcome, limited.reason()),
            (Outcome::Error, "output_limit_exceeded")
        );
    }
}
