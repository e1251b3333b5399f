//! Integration tests of `rstar-roc`, one module per topic.

mod roc {
    mod fixtures;
    mod props;
    mod sampling;
}
