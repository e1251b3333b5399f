//! Integration tests of `rstar-analysis`: the per-token fields of `Trajectory`, the entropy
//! groups and counts, and reading bad files.

mod analysis {
    mod common;
    mod entropy;
    mod fields;
    mod reading;
}
