//! Integration tests of `rstar serve` and [`RemoteEngine`](rstar_agent::remote::RemoteEngine):
//! the OpenAI-compatible API answers the real `openai` Python client, a remote engine over it
//! writes the same turns as a local engine, bad requests get OpenAI error bodies, concurrent
//! requests are all answered, and the binary serves and stops on SIGINT.

mod serve {
    mod common;
    mod errors;
    mod load;
    mod openai_client;
    mod remote;
    mod weights;
}
