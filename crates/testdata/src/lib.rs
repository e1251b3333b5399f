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
//! It is **not** a data loader: it returns paths; parsing belongs to the tests. Beside the
//! paths it holds the test doubles more than one crate's tests use: [`PairTokenizer`], a
//! tokenizer whose token spans differ from byte spans, and [`scorer`], a boxed-answer scorer
//! written out by hand (the episode and tasks tests); [`alloc::Counting`], the counting
//! global allocator of the binaries that measure the heap; and [`render_chat`], the Jinja
//! oracle of the chat layouts (`python/render_chat.py`).
//!
//! ```no_run
//! let aime = rstar_testdata::dataset("aime24.jsonl");
//! assert!(aime.ends_with("aime24.jsonl"));
//! ```
//!
//! # Crate features
//! None.
#![warn(missing_docs)]

pub mod alloc;
mod episode;

pub use episode::{PairTokenizer, last_boxed, scorer};

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

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

/// Chat rows (JSONL, the OpenAI / HF layout) rendered by Jinja with a chat template, as
/// transformers' `apply_chat_template(…, tokenize=False)` renders them: the independent
/// reference of rstar's chat layouts (`python/render_chat.py`, run with [`python`]).
/// `template` is a model's `tokenizer_config.json` (its `chat_template`) or a file of Jinja
/// text; `generation_prompt` renders with `add_generation_prompt=True`. One text per row.
///
/// # Panics
/// When Python or jinja2 is missing (`cargo xtask ci` installs it) or a row fails to render.
pub fn render_chat(template: &Path, rows_jsonl: &str, generation_prompt: bool) -> Vec<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/render_chat.py");
    let mut args = vec![template.as_os_str()];
    if generation_prompt {
        args.push("--generation-prompt".as_ref());
    }
    let out = run_python(&script, &args, rows_jsonl);
    serde_json::from_slice(&out).expect("render_chat.py writes a JSON list of texts")
}

/// The folder of rstar-testdata's Python scripts (`render_chat.py`), for a test's own script
/// to import them from.
pub fn python_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("python")
}

/// Runs a test's Python script with [`python`], `stdin` on its standard input, and returns
/// its standard output.
///
/// # Panics
/// When Python cannot start or the script fails (with its standard error; a Python module the
/// test needs, such as jinja2, is installed by `cargo xtask ci`).
pub fn run_python(script: &Path, args: &[&std::ffi::OsStr], stdin: &str) -> Vec<u8> {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let mut child = Command::new(python())
        .arg(script)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("could not start {}: {e}", python().display()));
    let mut pipe = child.stdin.take().expect("piped stdin");
    let input = stdin.to_owned();
    let writer = std::thread::spawn(move || pipe.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("the script runs");
    writer
        .join()
        .expect("the writer thread")
        .expect("the script's input written");
    assert!(
        out.status.success(),
        "{} failed (is every module it needs installed? `cargo xtask ci` installs them): {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
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
    status_and_body(&response)
}

/// [`http`] with a binary body (`Content-Type: application/octet-stream`), for the routes that
/// take a file (`rstar serve`'s uploads).
///
/// # Panics
/// As [`http`].
pub fn http_bytes(addr: &str, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("the server accepts connections");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .expect("the request head is written");
    // A server may answer (and close) before reading a body it refuses.
    let _ = stream.write_all(body);
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    status_and_body(&String::from_utf8_lossy(&response))
}

/// An HTTP/1.1 response's status code and body.
///
/// # Panics
/// Without a status line (a test failure).
fn status_and_body(response: &str) -> (u16, String) {
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

/// Reads from `stream` until the server closes the connection: what it answered, or `None`
/// when `limit` passed without a byte (a connection the server never cut off).
pub fn read_until_closed(
    stream: &mut std::net::TcpStream,
    limit: std::time::Duration,
) -> Option<String> {
    use std::io::Read;
    stream.set_read_timeout(Some(limit)).ok()?;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Some(String::from_utf8_lossy(&out).into_owned()),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return Some(String::from_utf8_lossy(&out).into_owned());
            }
            Err(_) => return None,
        }
    }
}

// --- A tiny HF model directory for end-to-end tests -------------------------------------------

/// GPT-2's byte-to-character table of byte-level BPE: printable Latin-1 bytes stand for
/// themselves, the others (controls, space, ...) for the characters from U+0100 on, in byte
/// order.
fn byte_chars() -> Vec<char> {
    let printable = |b: u32| {
        (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b)
    };
    let mut next = 256;
    (0u32..256)
        .map(|b| {
            if printable(b) {
                char::from_u32(b).expect("a Latin-1 code point")
            } else {
                next += 1;
                char::from_u32(next - 1).expect("a code point below U+0144")
            }
        })
        .collect()
}

/// The added tokens of [`byte_level_tokenizer_json`], from id 256 on: Qwen3's chat and
/// tool-call markup (the first three are special, the tags are not, as in Qwen3's tokenizer).
pub const ADDED: [(&str, bool); 9] = [
    ("<|endoftext|>", true),
    ("<|im_start|>", true),
    ("<|im_end|>", true),
    ("<tool_call>", false),
    ("</tool_call>", false),
    ("<tool_response>", false),
    ("</tool_response>", false),
    ("<think>", false),
    ("</think>", false),
];

/// An HF byte-level BPE `tokenizer.json` without merges: one token per byte (ids 0..256 in
/// byte order) plus [`ADDED`] (ids 256..265), so that it fits the fixture's 512-token vocab.
fn byte_level_tokenizer() -> Value {
    let vocab: serde_json::Map<String, Value> = byte_chars()
        .into_iter()
        .enumerate()
        .map(|(id, c)| (c.to_string(), json!(id)))
        .collect();
    let added: Vec<Value> = ADDED
        .iter()
        .enumerate()
        .map(|(i, (content, special))| {
            json!({
                "id": 256 + i, "content": content, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": special
            })
        })
        .collect();
    let byte_level = json!({
        "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": true
    });
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": byte_level,
        "post_processor": null,
        "decoder": byte_level,
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
            "ignore_merges": false, "vocab": vocab, "merges": []
        }
    })
}

/// [`byte_level_tokenizer`] as the text of a `tokenizer.json`.
pub fn byte_level_tokenizer_json() -> String {
    serde_json::to_string(&byte_level_tokenizer()).expect("the tokenizer serialises")
}

/// Writes `dir/model`, an HF Qwen3 directory that fits a test: the `qwen3_tiny` fixture's
/// weights, its config with `max_position_embeddings` set to `max_pos`, the byte-level
/// tokenizer ([`byte_level_tokenizer_json`], which fits the fixture's 512-token vocabulary) and
/// the real Qwen3 `tokenizer_config.json` (its chat template). Returns the directory.
///
/// # Panics
/// When the fixtures are missing or the directory cannot be written.
pub fn tiny_qwen3_dir(dir: &Path, max_pos: usize) -> PathBuf {
    let weights = fixture("qwen/qwen3_tiny");
    let model = dir.join("model");
    std::fs::create_dir_all(&model).expect("the model directory is writable");
    std::fs::copy(
        weights.join("model.safetensors"),
        model.join("model.safetensors"),
    )
    .expect("the fixture's weights copy");
    let mut config: Value = serde_json::from_str(
        &std::fs::read_to_string(weights.join("config.json")).expect("the fixture's config reads"),
    )
    .expect("the fixture's config is JSON");
    assert_eq!(config["vocab_size"], 512, "the fixture changed");
    config["max_position_embeddings"] = json!(max_pos);
    std::fs::write(
        model.join("config.json"),
        serde_json::to_string_pretty(&config).expect("the config serialises"),
    )
    .expect("the config writes");
    std::fs::write(model.join("tokenizer.json"), byte_level_tokenizer_json())
        .expect("the tokenizer writes");
    std::fs::copy(
        fixture("qwen/tokenizer_qwen3/tokenizer_config.json"),
        model.join("tokenizer_config.json"),
    )
    .expect("Qwen3's tokenizer_config.json copies");
    model
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
