//! Integration tests of `rstar-toolenv`: one module per topic.
//!
//! They run the configured interpreter (`rstar_testdata::python()`, the CI
//! virtualenv) through real pools; each adversarial case checks the outcome,
//! that no process is left behind, and that the pool then answers `print(1)`.

mod toolenv {
    mod adversarial;
    mod common;
    mod lifecycle;
    mod oracle;
    mod tool_response;
    mod tools;
}
