//! A served tiny random model, saved and loaded back through the checkpoint layout.

use std::path::PathBuf;
use std::sync::OnceLock;

use burn::tensor::Device;
use rstar_policy::{Qwen, QwenConfig, Tokenizer, WeightDtype};
use rstar_serve::{ServeConfig, ServerHandle, start};

/// The served model's name.
pub const MODEL: &str = "tiny";

/// A random `tiny_char` model saved once into a temporary directory (as `rstar serve --model`
/// reads it).
pub fn model_dir() -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let model = Qwen::random(QwenConfig::tiny_char(), 42, &Device::flex()).unwrap();
        rstar_policy::save_dir(&model, &Tokenizer::char(), dir.path(), WeightDtype::F32).unwrap();
        dir
    })
    .path()
    .to_path_buf()
}

/// The saved model, loaded.
pub fn load() -> (Qwen, Tokenizer) {
    rstar_policy::load_dir(&model_dir(), &Device::flex()).unwrap()
}

/// A multi-threaded runtime for a test.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Starts a server on a free loopback port; `max_batch` 1 makes every choice its own batch
/// (bitwise comparable with one-request generation).
pub fn serve(rt: &tokio::runtime::Runtime, engines: usize, max_batch: usize) -> ServerHandle {
    let (model, tokenizer) = load();
    let mut config = ServeConfig::new(MODEL);
    config.port = 0;
    config.engines = engines;
    config.max_batch = max_batch;
    rt.block_on(start(model, tokenizer, config)).unwrap()
}

/// One HTTP/1.1 exchange over a fresh connection: (status, body).
pub fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    rstar_testdata::http(addr, method, path, body, None)
}

/// A JSON exchange.
pub fn post(addr: &str, path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
    let (status, text) = http(addr, "POST", path, &body.to_string());
    let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (status, json)
}
