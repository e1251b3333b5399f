//! Integration tests of `rstar-verifier`, one module per topic.

mod verifier {
    mod choice;
    mod datasets;
    mod edge;
    mod math;
    mod math_styles;
    mod props;
    mod rules;
}
