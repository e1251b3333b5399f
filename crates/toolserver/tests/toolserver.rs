//! Integration tests of the service and the client, one module per topic.

mod toolserver {
    pub mod client;
    pub mod code_judge;
    pub mod common;
    pub mod errors;
    pub mod limits;
    pub mod load;
    pub mod python_clients;
    pub mod queue;
    pub mod sandbox_fusion;
    pub mod shutdown;
    pub mod verify;
}
