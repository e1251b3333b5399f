//! The crate's error type.

use std::net::SocketAddr;

/// Everything that can fail in `rstar-toolserver`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The pool could not be started.
    #[error("the tool pool failed: {0}")]
    Pool(#[from] rstar_toolenv::Error),
    /// An endpoint URL could not be parsed.
    #[error("invalid endpoint `{endpoint}`: {message}")]
    Endpoint {
        /// The URL as given.
        endpoint: String,
        /// What is wrong with it.
        message: String,
    },
    /// A request could not be sent or its answer not read.
    #[error("request to {endpoint} failed: {message}")]
    Transport {
        /// The endpoint.
        endpoint: String,
        /// What went wrong.
        message: String,
    },
    /// The server answered with an error status.
    #[error("{endpoint} answered {status}: {detail}")]
    Status {
        /// The endpoint.
        endpoint: String,
        /// The HTTP status code.
        status: u16,
        /// The server's `detail`, or the body.
        detail: String,
    },
    /// The server refused the request before running any of it: `429` (its queue is full)
    /// or `503` (it is draining, or at its connection limit). Resending it runs nothing twice.
    #[error("{endpoint} refused the request ({status}): {detail}")]
    Refused {
        /// The endpoint.
        endpoint: String,
        /// The HTTP status code.
        status: u16,
        /// The server's `detail`, or the body.
        detail: String,
        /// When to try again, from the `Retry-After` header.
        retry_after: Option<std::time::Duration>,
    },
    /// The server's answer did not match the protocol.
    #[error("unexpected answer from {endpoint}: {message}")]
    Protocol {
        /// The endpoint.
        endpoint: String,
        /// What did not match.
        message: String,
    },
    /// The server task failed.
    #[error("the server stopped with an error: {0}")]
    Serve(String),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
