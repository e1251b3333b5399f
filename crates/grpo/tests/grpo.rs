//! Integration tests of `rstar-grpo`: verl fixtures, finite-difference gradients, invariants.

mod grpo {
    mod aggregation;
    mod common;
    mod correction;
    mod fixtures;
    mod gradients;
    mod props;
}
