//! Test-only helper that finds the project's shared data: the datasets and the
//! large recorded fixtures that live beside the checkout in `../shared`.
//!
//! Small fixtures are copied into each crate's `tests/data/` with a line on
//! their origin, so most tests run anywhere. The larger ones (the tiny Qwen
//! checkpoints, the real datasets) are read from the shared folder through this
//! crate, and only through it, so that a missing folder fails every such test
//! the same way: loudly, naming the path it looked for and how to fix it. It
//! never skips a test silently.
//!
//! It is **not** a data loader: it returns paths; parsing belongs to the tests.
//!
//! ```no_run
//! let aime = rstar_testdata::dataset("aime24.jsonl");
//! assert!(aime.ends_with("aime24.jsonl"));
//! ```
//!
//! # Crate features
//! None.
#![warn(missing_docs)]

use std::path::{Path, PathBuf};

/// The environment variable that overrides where the shared folder is.
pub const SHARED_ENV: &str = "RSTAR_SHARED";

/// The workspace root (the folder holding the top `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    // This crate lives at `<root>/crates/testdata`.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/testdata has two ancestors")
        .to_path_buf()
}

/// The shared folder: `$RSTAR_SHARED` when set, else `<workspace>/../shared`.
///
/// # Panics
/// When the folder does not exist, with a message that names the path and the
/// variable to set. Tests that need shared data must not pass without it.
pub fn shared_dir() -> PathBuf {
    let dir = match std::env::var_os(SHARED_ENV) {
        Some(dir) => PathBuf::from(dir),
        None => workspace_root().join("..").join("shared"),
    };
    if !dir.is_dir() {
        panic!(
            "the shared data folder is missing: looked for {} \
             (set {SHARED_ENV} to the folder that holds datasets/ and fixtures/)",
            dir.display()
        );
    }
    dir
}

fn existing(path: PathBuf) -> PathBuf {
    if !path.exists() {
        panic!(
            "shared test data is missing: {} does not exist (is {} complete?)",
            path.display(),
            shared_dir().display()
        );
    }
    path
}

/// A file of `shared/datasets/`, e.g. `dataset("aime24.jsonl")`.
///
/// # Panics
/// When the shared folder or the file is missing.
pub fn dataset(name: &str) -> PathBuf {
    existing(shared_dir().join("datasets").join(name))
}

/// A file or folder of `shared/fixtures/`, e.g. `fixture("qwen/qwen3_tiny")`.
///
/// # Panics
/// When the shared folder or the path is missing.
pub fn fixture(rel: &str) -> PathBuf {
    existing(shared_dir().join("fixtures").join(rel))
}

/// The Python interpreter tests should use: `$RSTAR_PYTHON` (which
/// `cargo xtask ci` points at its virtualenv with numpy and sympy), else
/// `python3` from `PATH`.
pub fn python() -> PathBuf {
    std::env::var_os("RSTAR_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("python3"))
}

/// One HTTP/1.1 exchange over a fresh connection, as a raw client with no dependencies:
/// `(status, body)`. `token` adds an `Authorization: Bearer` header. The servers' end-to-end
/// tests (`rstar serve`, `rstar tools serve`) share it.
///
/// # Panics
/// When the server cannot be reached or answers without a status line (a test failure).
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    body: &str,
    token: Option<&str>,
) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("the server accepts connections");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("the request is written");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("the response is read");
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_shared_datasets() {
        let aime = dataset("aime24.jsonl");
        let text = std::fs::read_to_string(aime).unwrap();
        assert_eq!(text.lines().count(), 30);
    }

    #[test]
    #[should_panic(expected = "shared test data is missing")]
    fn missing_file_panics_loudly() {
        dataset("no-such-file.jsonl");
    }
}
