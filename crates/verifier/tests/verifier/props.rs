//! Property tests: every supported style of an integer verifies against it, no other integer does, math answers verify against themselves, nothing panics in any mode.

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

/// A random sum of MATH-style terms the math mode reads exactly.
fn math_sum() -> impl Strategy<Value = String> + Clone {
    let atom = prop_oneof![
        (1u32..500).prop_map(|n| n.to_string()),
        (1u32..50, 2u32..50).prop_map(|(a, b)| format!("\\frac{{{a}}}{{{b}}}")),
        (1u32..20, 2u32..60).prop_map(|(k, n)| format!("{k}\\sqrt{{{n}}}")),
        (1u32..20).prop_map(|k| format!("{k}\\pi")),
        (1u32..9).prop_map(|k| format!("{k}x^{{2}}")),
        (1u32..9).prop_map(|k| format!("{k}i")),
        (0u32..1000, 1u32..99).prop_map(|(a, b)| format!("{a}.{b:02}")),
    ];
    proptest::collection::vec((atom, any::<bool>()), 1..4).prop_map(|terms| {
        let mut s = String::new();
        for (k, (t, neg)) in terms.into_iter().enumerate() {
            match (k, neg) {
                (0, true) => s.push('-'),
                (0, false) => {}
                (_, true) => s.push_str(" - "),
                (_, false) => s.push_str(" + "),
            }
            s.push_str(&t);
        }
        s
    })
}

/// A random MATH-style answer: a sum, a pair, an interval, a set, a column vector.
fn math_answer() -> impl Strategy<Value = String> {
    let sum = math_sum();
    prop_oneof![
        sum.clone(),
        (sum.clone(), sum.clone()).prop_map(|(a, b)| format!("\\left({a}, {b}\\right)")),
        (sum.clone(), sum.clone()).prop_map(|(a, b)| format!("[{a}, {b})")),
        (sum.clone(), sum.clone()).prop_map(|(a, b)| format!("\\{{{a}, {b}\\}}")),
        (sum.clone(), sum)
            .prop_map(|(a, b)| format!("\\begin{{pmatrix}} {a} \\\\ {b} \\end{{pmatrix}}")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Every answer verifies against itself, boxed in any way, in math mode.
    #[test]
    fn math_answers_verify_against_themselves(a in math_answer(), wrap in 0usize..4) {
        let response = match wrap {
            0 => format!("\\boxed{{{a}}}"),
            1 => format!("<answer>so $\\boxed{{ {a} }}$.</answer>"),
            2 => format!("\\fbox{{\\displaystyle {a}}}"),
            _ => format!("\\[\\boxed{{{}}}\\]", a.replace("\\frac", "\\dfrac")),
        };
        let v = rstar_verifier::Verifier::new().verify_math(&response, &a).unwrap();
        prop_assert_eq!(v.reason, Reason::Right, "{} vs {}", response, a);
    }

    /// Adding one changes a scalar answer.
    #[test]
    fn math_answers_plus_one_differ(a in math_sum()) {
        let response = format!("\\boxed{{{a} + 1}}");
        let v = rstar_verifier::Verifier::new().verify_math(&response, &a).unwrap();
        prop_assert_eq!(v.reward, 0, "{} vs {}", response, a);
    }

    #[test]
    fn no_math_or_choice_input_panics(
        parts in proptest::collection::vec(prop_oneof![
            Just("\\boxed{"), Just("{"), Just("}"), Just("\\frac"), Just("\\sqrt"), Just("^"), Just("\\pi"),
            Just("1"), Just("99"), Just(","), Just(" "), Just("\\text{"), Just("-"), Just("="), Just("\\pm"),
            Just("("), Just(")"), Just("["), Just("]"), Just("\\{"), Just("\\}"), Just("\\infty"), Just("\\cup"),
            Just("x"), Just("i"), Just("abc"), Just("&"), Just("\\\\"), Just("\\begin{pmatrix}"), Just("\\end{pmatrix}"),
            Just("."), Just("e5"), Just("%"), Just("^\\circ"), Just("/"), Just("0"), Just("(B)"), Just("answer is "),
        ], 0..60),
        truth in "[-0-9x(),.\\\\{}a-c ]{0,12}",
    ) {
        let response: String = parts.concat();
        let v = rstar_verifier::Verifier::new();
        for verdict in [v.verify_math(&response, &truth), v.verify_choice(&response, &truth)].into_iter().flatten() {
            prop_assert_eq!(verdict.reward, u8::from(verdict.reason == Reason::Right));
        }
        let _ = v.verify_math(&response, &response);
        let _ = v.math_truth(&response);
    }
}
