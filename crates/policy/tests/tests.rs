//! Integration tests of `rstar-policy`, one module per topic.

mod policy;
