//! Integration tests of `rstar-verifier`, one module per topic.

mod datasets;
mod edge;
mod props;
mod rules;
