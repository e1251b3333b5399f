//! Integration tests of `rstar-scheduler`, one module per topic.

mod dispatcher;
mod sim;
