//! Property tests: every supported style of an integer verifies against it, no other integer does, nothing panics.

use proptest::prelude::*;
use rstar_verifier::{Reason, verify};

/// Digits of `n` grouped by threes with `sep`.
fn grouped(digits: &str, sep: &str) -> String {
    let first = digits.len() % 3;
    let mut out = String::new();
    if first > 0 {
        out.push_str(&digits[..first]);
    }
    for (i, chunk) in digits.as_bytes()[first..].chunks(3).enumerate() {
        if i > 0 || first > 0 {
            out.push_str(sep);
        }
        out.push_str(std::str::from_utf8(chunk).unwrap());
    }
    out
}

/// The integer `sign digits` written in style `style` (a box included).
fn styled(negative: bool, digits: &str, style: usize) -> String {
    let minus = if negative { "-" } else { "" };
    let body = match style {
        0 => format!("{minus}{digits}"),
        1 => format!("{minus}{}", grouped(digits, ",")),
        2 => format!("{minus}{}", grouped(digits, "{,}")),
        3 => format!("{minus}{}", grouped(digits, "\\,")),
        4 => format!("{minus}{}", grouped(digits, " ")),
        5 => format!("\\text{{{minus}{digits}}}"),
        6 => format!("\\mathbf{{{minus}{digits}}}"),
        7 => format!("{minus}00{digits}"),
        8 => format!("{minus}{digits}.00"),
        9 => format!("x = {minus}{digits}"),
        10 => format!("{minus}{digits} \\text{{ cm}}"),
        11 => format!("{minus}{digits}^\\circ"),
        12 => format!("{minus}{digits}\\%"),
        13 => format!("\\${minus}{digits}"),
        14 => format!("\\left( {minus}{digits} \\right)"),
        15 => format!("\\displaystyle {minus}{digits}"),
        16 => format!("{}{digits}", if negative { "\u{2212}" } else { "+" }),
        _ => format!("{minus}{digits}"),
    };
    match style % 4 {
        0 => format!("So the answer is $\\boxed{{{body}}}$."),
        1 => format!("<answer>Final: \\boxed{{{body}}}</answer>"),
        2 => format!("\\fbox{{{body}}}"),
        _ => format!("We get \\[\\boxed{{ {body} }}\\]"),
    }
}

fn digits_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u64..1_000_000).prop_map(|n| n.to_string()),
        "[1-9][0-9]{0,40}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_style_verifies_against_itself(neg in any::<bool>(), digits in digits_strategy(), style in 0usize..17) {
        let negative = neg && digits != "0";
        let gt = format!("{}{digits}", if negative { "-" } else { "" });
        let response = styled(negative, &digits, style);
        let v = verify(&response, &gt).unwrap();
        prop_assert_eq!(v.reason, Reason::Right, "{} vs {}", response, gt);
    }

    #[test]
    fn a_different_integer_never_verifies(
        neg in any::<bool>(), digits in digits_strategy(), style in 0usize..17, other in digits_strategy(), oneg in any::<bool>(),
    ) {
        let negative = neg && digits != "0";
        let response = styled(negative, &digits, style);
        let other_neg = oneg && other != "0";
        prop_assume!(other != digits || other_neg != negative);
        let gt = format!("{}{other}", if other_neg { "-" } else { "" });
        let v = verify(&response, &gt).unwrap();
        prop_assert_eq!(v.reward, 0, "{} vs {}", response, gt);
    }

    #[test]
    fn no_input_panics(response in "\\PC{0,200}", gt in "[0-9]{1,5}") {
        let _ = verify(&response, &gt).unwrap();
    }

    #[test]
    fn no_latexish_input_panics(
        parts in proptest::collection::vec(prop_oneof![
            Just("\\boxed{"), Just("\\fbox"), Just("{"), Just("}"), Just("\\frac"), Just("\\binom"), Just("^"),
            Just("!"), Just("1"), Just("99"), Just(","), Just(" "), Just("\\text{"), Just("-"), Just("="), Just("\\pm"),
            Just("("), Just(")"), Just("<answer>"), Just("</answer>"), Just("\\"), Just("."), Just("°"), Just("\u{2212}"),
            Just("/"), Just("\\cdot"), Just("0"), Just("{,}"), Just("\\,"), Just("cm"), Just("and"),
        ], 0..60),
        gt in "-?[0-9]{1,4}",
    ) {
        let response: String = parts.concat();
        let _ = verify(&response, &gt).unwrap();
        // Any ground-truth-like text either parses or is a clean error.
        let _ = rstar_verifier::Verifier::new().ground_truth(&response);
    }
}
