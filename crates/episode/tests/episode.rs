//! Integration tests of `rstar-episode`, one module per topic.

mod episode {
    mod state_machine;
}
