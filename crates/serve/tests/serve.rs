//! Integration tests of `rstar serve` and [`RemoteEngine`](rstar_engine::remote::RemoteEngine):
//! the OpenAI-compatible API answers the real `openai` Python client, a remote engine over it
//! writes the same turns as a local engine, bad requests get OpenAI error bodies, concurrent
//! requests are all answered, streams add up to the whole answer, tool calls come back as
//! `tool_calls`, LoRA adapters are loaded and served as their merged weights, and the binary
//! serves and stops on SIGINT.

mod serve {
    mod adapters;
    mod common;
    mod errors;
    mod limits;
    mod load;
    mod openai_client;
    mod remote;
    mod stream;
    mod weights;
}
