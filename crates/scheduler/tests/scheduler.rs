//! Integration tests of `rstar-scheduler`, one module per topic.

mod scheduler {
    mod dispatcher;
    mod sim;
}
