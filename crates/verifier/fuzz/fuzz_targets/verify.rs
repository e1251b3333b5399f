//! Fuzz target: no mode panics, an integer answer that verifies is the ground truth's own integer, and every reward matches its reason.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rstar_verifier::{Reason, Verifier};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // The first line is the ground truth, the rest the response.
    let (gt, response) = text.split_once('\n').unwrap_or(("0", text));
    let v = Verifier::new();
    // The math and choice modes take any ground truth (or refuse it cleanly).
    for verdict in [v.verify_math(response, gt), v.verify_choice(response, gt)]
        .into_iter()
        .flatten()
    {
        assert_eq!(verdict.reward, u8::from(verdict.reason == Reason::Right));
    }
    let _ = v.math_truth(response);
    let Ok(truth) = v.ground_truth(gt) else {
        return;
    };
    let verdict = v.verify_integer(response, &truth);
    if verdict.reason == Reason::Right {
        assert_eq!(verdict.normalized.as_ref(), Some(&truth));
        assert_eq!(verdict.reward, 1);
    } else {
        assert_eq!(verdict.reward, 0);
    }
    let _ = v.ground_truth(response);
});
