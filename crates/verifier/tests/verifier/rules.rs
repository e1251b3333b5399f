//! One table of cases per rule: extraction, normalisation, expressions, several answers, ground truths.

use rstar_verifier::{Error, Reason, Verifier, verify};

/// Scores `response` against `gt` and checks the reason (the reward follows from it).
#[track_caller]
fn check(response: &str, gt: &str, want: Reason) {
    let v = verify(response, gt).unwrap_or_else(|e| panic!("{response:?}: {e}"));
    assert_eq!(v.reason, want, "{response:?} vs {gt:?}: {v:?}");
    assert_eq!(v.reward, u8::from(want == Reason::Right), "{response:?}");
}

#[test]
fn extraction() {
    use Reason::*;
    let cases: &[(&str, &str, Reason)] = &[
        ("$\\boxed{42}$", "42", Right),
        ("The answer is \\boxed{42}.", "42", Right),
        ("\\boxed 5", "5", Right),
        ("so \\boxed 5$.", "5", Right),
        ("\\boxed{5", "5", NoBox),
        ("\\fbox{7}", "7", Right),
        ("\\boxed{1} then later \\boxed{2}", "2", Right),
        ("\\boxed{42} wait, actually \\boxed{43}", "42", Wrong),
        ("\\boxed{\\boxed{42}}", "42", Right),
        ("\\boxed{{42}}", "42", Right),
        ("The answer is 42.", "42", NoBox),
        ("Answer: 42", "42", NoBox),
        ("\\boxed{}", "0", EmptyBox),
        ("\\boxed{ $ $ }", "0", EmptyBox),
        ("\\boxed{\\text{}}", "0", EmptyBox),
        // The final answer block wins over boxes outside it.
        (
            "<answer>\\boxed{3}</answer> tool said \\boxed{4}",
            "3",
            Right,
        ),
        ("\\boxed{4} <answer>I think \\boxed{3}</answer>", "3", Right),
        ("\\boxed{3} <answer>no box here</answer>", "3", NoBox),
        ("<answer>a</answer><answer>\\boxed{9}</answer>", "9", Right),
        ("<answer>\\boxed{9}", "9", Right),
        ("\\boxedx{3}", "3", NoBox),
    ];
    for &(r, g, want) in cases {
        check(r, g, want);
    }
}

#[test]
fn normalisation() {
    use Reason::*;
    let cases: &[(&str, &str, Reason)] = &[
        ("\\boxed{\\text{42}}", "42", Right),
        ("\\boxed{\\textbf{42}}", "42", Right),
        ("\\boxed{\\mathbf{42}}", "42", Right),
        ("\\boxed{\\mathrm{42}}", "42", Right),
        ("\\boxed{\\displaystyle 42}", "42", Right),
        ("\\boxed{\\left(42\\right)}", "42", Right),
        ("\\boxed{\\(42\\)}", "42", Right),
        ("\\boxed{\\!42\\,}", "42", Right),
        ("\\boxed{~42~}", "42", Right),
        ("\\boxed{1,000}", "1000", Right),
        ("\\boxed{1{,}000}", "1000", Right),
        ("\\boxed{1\\,000}", "1000", Right),
        ("\\boxed{1 000}", "1000", Right),
        ("\\boxed{1,234,567}", "1234567", Right),
        ("\\boxed{1,\\!000}", "1000", Right),
        ("\\boxed{\\$1,\\!000.00}", "1000", Right),
        ("\\boxed{42 \\, \\mathrm{m}^2}", "42", Right),
        ("\\boxed{42\\;\\mathrm{cm}}", "42", Right),
        ("\\boxed{42 \\text{ square units}}", "42", Right),
        ("\\boxed{a + b = 42}", "42", Right),
        ("\\boxed{42^{\\circ}\\text{C}}", "42", Right),
        ("\\boxed{12,34}", "1234", SeveralAnswers),
        ("\\boxed{1,0000}", "10000", SeveralAnswers),
        ("\\boxed{+42}", "42", Right),
        ("\\boxed{025}", "25", Right),
        ("\\boxed{000}", "0", Right),
        ("\\boxed{-0}", "0", Right),
        ("\\boxed{42.0}", "42", Right),
        ("\\boxed{42.000}", "42", Right),
        ("\\boxed{42.}", "42", Right),
        ("\\boxed{42.5}", "42", NotAnInteger),
        ("\\boxed{41.99999}", "42", NotAnInteger),
        ("\\boxed{0.42}", "42", NotAnInteger),
        ("\\boxed{x = 42}", "42", Right),
        ("\\boxed{n=42}", "42", Right),
        ("\\boxed{42 \\text{ cm}}", "42", Right),
        ("\\boxed{42\\text{ cm}^2}", "42", Right),
        ("\\boxed{42 \\mathrm{cm}^{2}}", "42", Right),
        ("\\boxed{42 \\text{ km}/\\text{h}}", "42", Right),
        ("\\boxed{42 dollars}", "42", Right),
        ("\\boxed{42x}", "42", NotAnInteger),
        ("\\boxed{42^\\circ}", "42", Right),
        ("\\boxed{42^{\\circ}}", "42", Right),
        ("\\boxed{42°}", "42", Right),
        ("\\boxed{42\\%}", "42", Right),
        ("\\boxed{\\$42}", "42", Right),
        ("\\boxed{\u{2212}42}", "-42", Right),
        ("\\boxed{-42}", "42", Wrong),
        ("\\boxed{4200}", "42", Wrong),
        ("\\boxed{\\{42\\}}", "42", Right),
        ("\\boxed{\\sqrt{4}}", "2", NotAnInteger),
        // Magnitude words, European decimals and en-dash ranges never pay.
        ("\\boxed{42 \\text{ million}}", "42", NotAnInteger),
        ("\\boxed{42 thousand}", "42000", NotAnInteger),
        ("\\boxed{0,001}", "1", SeveralAnswers),
        ("\\boxed{5\u{2013}7}", "-2", NotAnInteger),
        ("\\boxed{42 \\text{ m}}", "42", Right),
        ("\\boxed{42 \\text{ percent}}", "42", Right),
        ("\\boxed{\\pi}", "3", NotAnInteger),
        (
            "\\boxed{123456789012345678901234567890}",
            "123456789012345678901234567890",
            Right,
        ),
        (
            "\\boxed{123456789012345678901234567891}",
            "123456789012345678901234567890",
            Wrong,
        ),
    ];
    for &(r, g, want) in cases {
        check(r, g, want);
    }
}

#[test]
fn expressions() {
    use Reason::*;
    let cases: &[(&str, &str, Reason)] = &[
        ("\\boxed{2^{10}}", "1024", Right),
        ("\\boxed{2^5}", "32", Right),
        // LaTeX superscripts take one token: `2^10` is 2^1 followed by 0.
        ("\\boxed{2^10}", "1024", NotAnInteger),
        ("\\boxed{\\frac{84}{2}}", "42", Right),
        ("\\boxed{\\dfrac{84}{2}}", "42", Right),
        ("\\boxed{\\frac{85}{2}}", "42", NotAnInteger),
        ("\\boxed{\\frac{1}{0}}", "0", NotAnInteger),
        ("\\boxed{\\frac84}", "2", Right),
        ("\\boxed{84/2}", "42", Right),
        ("\\boxed{3\\cdot 14}", "42", Right),
        ("\\boxed{3 \\times 14}", "42", Right),
        ("\\boxed{3 * 14}", "42", Right),
        ("\\boxed{\\binom{9}{2}}", "36", Right),
        ("\\boxed{\\binom{9}{11}}", "0", Right),
        ("\\boxed{5!}", "120", Right),
        ("\\boxed{(2+3)!}", "120", Right),
        ("\\boxed{2^{3}+1}", "9", Right),
        ("\\boxed{-2^{2}}", "-4", Right),
        ("\\boxed{(-2)^{3}}", "-8", Right),
        ("\\boxed{2(3)}", "6", NotAnInteger),
        ("\\boxed{2^{-1}}", "0", NotAnInteger),
        ("\\boxed{10^{10^{10}}}", "0", TooLarge),
        ("\\boxed{100000!}", "0", TooLarge),
        ("\\boxed{\\binom{1000000}{500000}}", "0", TooLarge),
        ("\\boxed{2^{100}}", "1267650600228229401496703205376", Right),
        ("\\boxed{2^{10} = 1024}", "1024", Right),
        ("\\boxed{2^{10} = 1000}", "1000", SeveralAnswers),
    ];
    for &(r, g, want) in cases {
        check(r, g, want);
    }
    let lit = Verifier::literal_only();
    assert_eq!(
        lit.verify("\\boxed{2^{10}}", "1024").unwrap().reason,
        NotAnInteger
    );
}

#[test]
fn several_answers() {
    use Reason::*;
    let cases: &[(&str, &str, Reason)] = &[
        ("\\boxed{3, 5}", "3", SeveralAnswers),
        ("\\boxed{3; 5}", "3", SeveralAnswers),
        ("\\boxed{3 \\text{ and } 5}", "3", SeveralAnswers),
        ("\\boxed{3 \\text{ or } 5}", "5", SeveralAnswers),
        ("\\boxed{5, 5}", "5", Right),
        ("\\boxed{5,}", "5", Right),
        ("\\boxed{\\pm 3}", "3", SeveralAnswers),
        ("\\boxed{\\{2, 3\\}}", "2", SeveralAnswers),
        ("\\boxed{(2, 3)}", "3", SeveralAnswers),
        ("\\boxed{\\left\\{ 3 \\right\\}}", "3", Right),
        ("\\boxed{(1)+(2)}", "3", Right),
        ("\\boxed{(1), (2)}", "1", SeveralAnswers),
        ("\\boxed{x=3, y=4}", "3", SeveralAnswers),
        ("\\boxed{3} or \\boxed{5}", "5", SeveralAnswers),
        ("\\boxed{3}, \\boxed{5}", "5", SeveralAnswers),
        ("$\\boxed{3}$ and $\\boxed{5}$", "5", SeveralAnswers),
        ("\\boxed{5} \\quad \\boxed{5}", "5", Right),
        (
            "\\boxed{3}. Checking again, the answer is \\boxed{5}",
            "5",
            Right,
        ),
    ];
    for &(r, g, want) in cases {
        check(r, g, want);
    }
}

#[test]
fn ground_truths() {
    let v = Verifier::new();
    for (gt, want) in [
        ("025", "25"),
        ("27.0", "27"),
        ("1,000", "1000"),
        ("\\boxed{7}", "7"),
        ("-3", "-3"),
        (" 12 ", "12"),
    ] {
        assert_eq!(v.ground_truth(gt).unwrap().as_str(), want, "{gt}");
    }
    for (gt, reason) in [
        ("1/2", Reason::NotAnInteger),
        ("\\frac{1}{2}", Reason::NotAnInteger),
        ("2.5", Reason::NotAnInteger),
        ("", Reason::EmptyBox),
        ("3, 4", Reason::SeveralAnswers),
        ("\\sqrt{2}", Reason::NotAnInteger),
    ] {
        match v.ground_truth(gt) {
            Err(Error::GroundTruth { reason: r, .. }) => assert_eq!(r, reason, "{gt}"),
            other => panic!("{gt}: {other:?}"),
        }
    }
    let msg = verify("\\boxed{1}", "1/2").unwrap_err().to_string();
    assert!(msg.contains("`1/2` is not an integer"), "{msg}");
}

#[test]
fn batch_keeps_input_order() {
    let pairs: Vec<(String, String)> = (0..1000)
        .map(|i| {
            (
                format!("\\boxed{{{i}}}"),
                if i % 3 == 0 {
                    format!("{i}")
                } else {
                    "x".into()
                },
            )
        })
        .collect();
    let out = rstar_verifier::verify_batch(&pairs);
    for (i, r) in out.iter().enumerate() {
        if i % 3 == 0 {
            let v = r.as_ref().unwrap();
            assert_eq!(v.normalized.as_ref().unwrap().as_str(), i.to_string());
            assert!(v.is_right());
        } else {
            assert!(r.is_err());
        }
    }
}

#[test]
fn verdict_json_shape() {
    let v = verify("\\boxed{025}", "25").unwrap();
    let json = serde_json::to_string(&v).unwrap();
    assert_eq!(
        json,
        r#"{"reward":1,"reason":"right","extracted":"025","normalized":"25"}"#
    );
    let back: rstar_verifier::Verdict = serde_json::from_str(&json).unwrap();
    assert_eq!(back, v);
    let names: Vec<String> = Reason::ALL
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "\"right\"",
            "\"wrong\"",
            "\"no_box\"",
            "\"empty_box\"",
            "\"several_answers\"",
            "\"not_an_integer\"",
            "\"too_large\""
        ]
    );
}
