//! Integration tests of `rstar-policy`, one module per topic.

mod policy {
    mod checkpoint;
    mod common;
    mod generation;
    mod kv_cache;
    mod lora;
    mod parity;
    mod peft;
    mod tokenizer_hf;
    mod training;
    #[cfg(feature = "wgpu")]
    mod wgpu;
}
