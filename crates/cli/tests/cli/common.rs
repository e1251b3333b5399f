//! The one way these tests run `rstar`.

use std::ffi::OsStr;
use std::io::Write;
use std::process::{Command, Stdio};

/// What a run of `rstar` returned.
#[derive(Debug)]
pub struct Run {
    /// The exit code (-1 when killed by a signal).
    pub code: i32,
    /// Standard output, as bytes.
    pub stdout: Vec<u8>,
    /// Standard error.
    pub stderr: String,
}

impl Run {
    /// Standard output as UTF-8 (panics otherwise: every subcommand writes text).
    pub fn out(&self) -> String {
        String::from_utf8(self.stdout.clone()).expect("stdout is UTF-8")
    }
}

/// The `rstar` binary as a [`Command`], with `NO_COLOR` cleared so tests see what a user sees.
pub fn command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rstar"));
    cmd.env_remove("NO_COLOR");
    cmd
}

/// Runs `rstar ARGS` without input and returns its raw output.
pub fn output(args: &[&str]) -> std::process::Output {
    command()
        .args(args)
        .output()
        .expect("the rstar binary runs")
}

/// Runs `rstar ARGS` with `stdin` written to its input (closed when `None`) and extra
/// environment variables.
pub fn run<S: AsRef<OsStr>>(args: &[S], stdin: Option<&[u8]>, envs: &[(&str, &OsStr)]) -> Run {
    let mut cmd = command();
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("the rstar binary runs");
    if let Some(input) = stdin {
        // A command may exit before reading everything (bad flags): a broken pipe is fine.
        let _ = child.stdin.take().unwrap().write_all(input);
    }
    let out = child.wait_with_output().expect("rstar finishes");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: out.stdout,
        stderr: String::from_utf8(out.stderr).expect("stderr is UTF-8"),
    }
}

/// Runs `rstar ARGS` without input: (code, stdout, stderr).
pub fn rstar(args: &[&str]) -> (i32, String, String) {
    let r = run(args, None, &[]);
    (r.code, r.out(), r.stderr)
}

/// A server started by `rstar … serve --port 0`, once it said where it listens.
pub struct Listening {
    /// The process.
    pub child: std::process::Child,
    /// `host:port` from its `listening on http://…` line.
    pub addr: String,
    /// That line.
    pub line: String,
    /// The rest of its standard error.
    pub stderr: std::io::BufReader<std::process::ChildStderr>,
}

impl Listening {
    /// Spawns `cmd` with standard error piped and reads it up to the line that says where the
    /// server listens (panics when the process exits before that).
    #[allow(clippy::zombie_processes)] // reason: `stop` waits for the child, `Drop` kills and waits otherwise
    pub fn start(cmd: &mut Command) -> Listening {
        use std::io::BufRead;
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the server starts");
        let mut stderr = std::io::BufReader::new(child.stderr.take().expect("stderr is piped"));
        let mut line = String::new();
        loop {
            line.clear();
            if stderr.read_line(&mut line).unwrap_or(0) == 0 {
                let status = child.wait();
                panic!("the server exited before listening: {status:?}");
            }
            if let Some(rest) = line.split("listening on http://").nth(1) {
                let addr = rest.split_whitespace().next().unwrap_or("").to_string();
                return Listening {
                    child,
                    addr,
                    line,
                    stderr,
                };
            }
        }
    }

    /// Sends `signal` (`INT`, `TERM`), waits for the exit and returns whether it succeeded and
    /// the rest of standard error.
    pub fn stop(mut self, signal: &str) -> (bool, String) {
        use std::io::Read;
        let sent = Command::new("kill")
            .args([format!("-{signal}"), self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success());
        let mut rest = String::new();
        self.stderr.read_to_string(&mut rest).expect("stderr reads");
        let exit = self.child.wait().expect("the server exits");
        (exit.success(), rest)
    }
}

impl Drop for Listening {
    /// A test that failed before `stop` leaves no server behind.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `rstar tools serve` on a free port with one worker and the tests' Python.
pub fn tool_server() -> Listening {
    Listening::start(
        command()
            .args([
                "tools",
                "serve",
                "--port",
                "0",
                "--workers",
                "1",
                "--python",
            ])
            .arg(rstar_testdata::python()),
    )
}

/// A TCP proxy in front of a server that dies mid-run, where a test wants it: it forwards
/// both ways until the client side has sent `marker` (a request line such as
/// `POST /v1/completions`) for the `after`-th time; then it drops that request and every
/// connection, and closes every later one at once, as a killed server would leave its
/// clients.
pub struct DyingProxy {
    /// `127.0.0.1:port` of the proxy.
    pub addr: String,
    /// Whether it has died.
    pub dead: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// How many times the marker was sent (the one that killed it included).
    pub seen: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl DyingProxy {
    /// A proxy to `target` (`host:port`).
    pub fn start(target: &str, marker: &'static str, after: usize) -> DyingProxy {
        use std::io::Read;
        use std::net::{Shutdown, TcpListener, TcpStream};
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        use std::sync::{Arc, Mutex};
        let listener = TcpListener::bind("127.0.0.1:0").expect("a local port");
        let addr = listener.local_addr().unwrap().to_string();
        let dead = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(AtomicUsize::new(0));
        let sockets: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (d, n, target) = (Arc::clone(&dead), Arc::clone(&seen), target.to_string());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if d.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                {
                    let mut all = sockets.lock().unwrap();
                    all.push(client.try_clone().unwrap());
                    all.push(server.try_clone().unwrap());
                }
                let (mut from, mut to) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (d, n, sockets) = (Arc::clone(&d), Arc::clone(&n), Arc::clone(&sockets));
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 1 << 16];
                    loop {
                        let len = match from.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(len) => len,
                        };
                        let chunk = &buf[..len];
                        let hits = chunk
                            .windows(marker.len())
                            .filter(|w| *w == marker.as_bytes())
                            .count();
                        if hits > 0 && n.fetch_add(hits, Ordering::SeqCst) + hits >= after {
                            d.store(true, Ordering::SeqCst);
                            for s in sockets.lock().unwrap().drain(..) {
                                let _ = s.shutdown(Shutdown::Both);
                            }
                            break;
                        }
                        if to.write_all(chunk).is_err() {
                            break;
                        }
                    }
                    let _ = to.shutdown(Shutdown::Write);
                });
                let (mut from, mut to) = (server, client);
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from, &mut to);
                    let _ = to.shutdown(Shutdown::Write);
                });
            }
        });
        DyingProxy { addr, dead, seen }
    }
}
