//! Integration tests of `rstar-curriculum`, one module per topic.

mod curriculum {
    mod config;
    mod resume;
    mod stages;
    mod triggers;
}
