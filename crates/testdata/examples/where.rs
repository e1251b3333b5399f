//! Prints where `rstar-testdata` looks for the shared datasets and fixtures, and whether they
//! are there: the first thing to run when a test panics about a missing `../shared`.
//!
//! Run with `cargo run -p rstar-testdata --example where`.

fn main() {
    println!(
        "workspace root: {}",
        rstar_testdata::workspace_root().display()
    );
    let shared = std::env::var_os(rstar_testdata::SHARED_ENV).map_or_else(
        || rstar_testdata::workspace_root().join("..").join("shared"),
        std::path::PathBuf::from,
    );
    let found = if shared.is_dir() { "found" } else { "missing" };
    println!(
        "shared folder (${}): {} ({found})",
        rstar_testdata::SHARED_ENV,
        shared.display()
    );
}
