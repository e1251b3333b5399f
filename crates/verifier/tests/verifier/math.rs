//! The math mode against hand-written MATH-style cases: `check(truth, response, expected)`.

use rstar_verifier::{Reason, Verifier};

/// Scores `response` (boxed unless it has a box or an `<answer>` block) against `truth`.
fn check(truth: &str, response: &str, expected: bool) -> Result<(), String> {
    let response = if response.contains("\\boxed") || response.contains("\\fbox") {
        response.to_string()
    } else {
        format!("\\boxed{{{response}}}")
    };
    let v = Verifier::new()
        .verify_math(&response, truth)
        .unwrap_or_else(|e| panic!("{truth:?}: {e}"));
    if v.is_right() == expected {
        Ok(())
    } else {
        Err(format!("truth {truth:?}, response {response:?}: {v:?}"))
    }
}

#[rustfmt::skip]
const CASES: &[(&str, &str, bool)] = &[
    // Integers and decimals: exact rationals.
    ("42", "42", true),
    ("42", "42.0", true),
    ("42", "042", true),
    ("42", "4.2 \\times 10^{1}", true),
    ("42", "\\frac{84}{2}", true),
    ("42", "43", false),
    ("42", "41.99999", false),
    ("1.25", "\\frac{5}{4}", true),
    ("1.25", "1.250", true),
    ("1.25", "5/4", true),
    ("1.25", "1\\frac{1}{4}", true),
    ("1.25", "1.2", false),
    (".0000672", "0.0000672", true),
    (".0000672", "6.72 \\times 10^{-5}", true),
    (".0000672", "6.72e-5", true),
    (".0000672", "6.72 \\cdot 10^{-4}", false),
    ("326.5", "\\frac{653}{2}", true),
    ("326.5", "326\\frac{1}{2}", true),
    ("326.5", "326.6", false),
    ("10,\\!080", "10080", true),
    ("10,\\!080", "10{,}080", true),
    ("10,\\!080", "10,080", true),
    ("10,\\!080", "10.080", false),
    ("58,500", "58500", true),
    ("\\$32,\\!348", "32348", true),
    ("\\$32,\\!348", "\\$32,348", true),
    ("\\$18.90", "18.9", true),
    ("\\$18.90", "\\$18.09", false),
    ("11,\\! 111,\\! 111,\\! 100", "11111111100", true),
    // Fractions.
    ("\\frac{14}{3}", "\\dfrac{14}{3}", true),
    ("\\frac{14}{3}", "\\tfrac{14}{3}", true),
    ("\\frac{14}{3}", "14/3", true),
    ("\\frac{14}{3}", "\\frac{28}{6}", true),
    ("\\frac{14}{3}", "4\\frac{2}{3}", true),
    ("\\frac{14}{3}", "4.67", false),
    ("\\frac{14}{3}", "\\frac{3}{14}", false),
    ("\\frac43", "\\frac{4}{3}", true),
    ("\\frac 59", "\\frac{5}{9}", true),
    ("\\frac9{19}", "\\frac{9}{19}", true),
    ("\\frac9{19}", "\\frac{9}{91}", false),
    ("-\\frac{35}{9}", "\\frac{-35}{9}", true),
    ("-\\frac{35}{9}", "-3\\frac{8}{9}", true),
    ("-\\frac{35}{9}", "\\frac{35}{9}", false),
    ("\\frac{1}{3}", "0.333", false),
    ("\\frac{1}{3}", "(1)/(3)", true),
    ("1\\frac{4}{5}", "\\frac{9}{5}", true),
    ("1\\frac{4}{5}", "1.8", true),
    ("1\\frac{4}{5}", "\\frac{4}{5}", false),
    ("137 \\frac{1}{2}", "137.5", true),
    ("137 \\frac{1}{2}", "\\frac{275}{2}", true),
    ("\\dfrac{33}{100}", "0.33", true),
    ("\\dfrac{33}{100}", "33\\%", true),
    // Percentages: a percentage truth also takes the fraction.
    ("25\\%", "25\\%", true),
    ("25\\%", "25", true),
    ("25\\%", "0.25", true),
    ("25\\%", "\\frac{1}{4}", true),
    ("25\\%", "0.025", false),
    ("12.5\\%", "12.5", true),
    ("12.5\\%", "\\frac{1}{8}", true),
    // Radicals in simplified canonical form.
    ("\\sqrt{12}", "2\\sqrt{3}", true),
    ("2\\sqrt{3}", "\\sqrt{12}", true),
    ("2\\sqrt{3}", "2\\sqrt3", true),
    ("2\\sqrt{3}", "\\sqrt{3} \\cdot 2", true),
    ("2\\sqrt{3}", "3\\sqrt{2}", false),
    ("2\\sqrt{3}", "\\sqrt{6}", false),
    ("\\frac{\\sqrt{3}}{2}", "\\frac{1}{2}\\sqrt{3}", true),
    ("\\frac{\\sqrt{3}}{2}", "\\sqrt{\\frac{3}{4}}", true),
    ("\\frac{\\sqrt{3}}{2}", "\\frac{3}{2\\sqrt{3}}", true),
    ("\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt{2}}{3}", false),
    ("\\frac{\\sqrt{3}}{3}", "\\frac{1}{\\sqrt{3}}", true),
    ("\\frac{\\sqrt{3}}{3}", "\\frac{1}{\\sqrt{2}}", false),
    ("11\\sqrt2", "\\sqrt{242}", true),
    ("11\\sqrt2", "11\\sqrt{3}", false),
    ("70 \\sqrt{2}", "70\\sqrt{2}", true),
    ("3\\sqrt{13}", "\\sqrt{117}", true),
    ("3\\sqrt{13}", "\\sqrt{39}", false),
    ("\\frac{3\\sqrt{3}}{4}", "\\frac{3}{4}\\sqrt{3}", true),
    ("\\frac{3\\sqrt{3}}{4}", "0.75\\sqrt{3}", true),
    ("\\frac{3\\sqrt{3}}{4}", "\\frac{\\sqrt{27}}{4}", true),
    ("\\frac{3\\sqrt{3}}{4}", "1.299", false),
    ("1+2\\sqrt{3}", "2\\sqrt{3}+1", true),
    ("1+2\\sqrt{3}", "1+\\sqrt{12}", true),
    ("1+2\\sqrt{3}", "1-2\\sqrt{3}", false),
    ("11 \\sqrt{5} + 11", "11(\\sqrt{5}+1)", true),
    ("11 \\sqrt{5} + 11", "11(\\sqrt{5}-1)", false),
    ("\\sqrt{2}-1", "\\frac{1}{\\sqrt{2}+1}", true),
    ("-\\sqrt{3}", "-1 \\cdot \\sqrt{3}", true),
    ("-\\sqrt{3}", "\\sqrt{-3}", false),
    ("2", "\\sqrt{4}", true),
    ("2", "\\frac{6}{3} \\cdot \\pi / \\pi", true),
    ("\\sqrt{2}", "2^{1/2}", true),
    // Multiples of pi.
    ("\\pi", "\\pi", true),
    ("\\pi", "1\\pi", true),
    ("\\pi", "3.14", false),
    ("288 \\pi", "288\\pi", true),
    ("288 \\pi", "\\pi \\cdot 288", true),
    ("288 \\pi", "144 \\cdot 2\\pi", true),
    ("288 \\pi", "288", false),
    ("-\\frac{\\pi}{6}", "-\\frac{1}{6}\\pi", true),
    ("-\\frac{\\pi}{6}", "\\frac{-\\pi}{6}", true),
    ("-\\frac{\\pi}{6}", "\\frac{\\pi}{6}", false),
    ("18+2\\pi", "2\\pi + 18", true),
    ("18+2\\pi", "2(9+\\pi)", true),
    ("18+2\\pi", "20\\pi", false),
    ("\\frac{20000}{\\pi}", "20000/\\pi", true),
    ("\\frac{20000}{\\pi}", "20000\\pi", false),
    ("\\frac{5 \\pi^2}{4}", "1.25\\pi^2", true),
    ("12\\pi", "12 \\pi \\text{ cm}^2", true),
    // Complex numbers and polynomials.
    ("6 - 5i", "-5i + 6", true),
    ("6 - 5i", "6 + 5i", false),
    ("1+2i", "i \\cdot 2 + 1", true),
    ("1+274i", "1 + 274 i", true),
    ("x^3+3x-6", "3x + x^3 - 6", true),
    ("x^3+3x-6", "x^3+3x+6", false),
    ("(a+5)(b+2)", "ab + 2a + 5b + 10", true),
    ("(a+5)(b+2)", "(b+2)(a+5)", true),
    ("(a+5)(b+2)", "(a+2)(b+5)", false),
    ("2k+2", "2(k+1)", true),
    ("2k+2", "2k+1", false),
    ("6r^2-4r-24", "2(3r^2-2r-12)", true),
    ("p - q", "-q + p", true),
    ("p - q", "q - p", false),
    ("\\frac{11+9a}{20}", "\\frac{9a+11}{20}", true),
    ("\\frac{11+9a}{20}", "\\frac{11}{20} + \\frac{9a}{20}", true),
    ("\\frac{11+9a}{20}", "\\frac{11+9a}{2}", false),
    ("3R^2", "3 R^{2}", true),
    ("3R^2", "3r^2", false),
    // Degrees and units.
    ("90^\\circ", "90", true),
    ("90^\\circ", "90^{\\circ}", true),
    ("90^\\circ", "90°", true),
    ("90^\\circ", "90 \\text{ degrees}", true),
    ("90^\\circ", "45^\\circ", false),
    ("\\frac{270}7\\text{ degrees}", "\\frac{270}{7}", true),
    ("\\frac{270}7\\text{ degrees}", "\\frac{270}{7}^\\circ", true),
    ("864 \\mbox{ inches}^2", "864", true),
    ("864 \\mbox{ inches}^2", "864 \\text{ square inches}", true),
    ("864 \\mbox{ inches}^2", "846", false),
    ("5.4 \\text{ cents}", "5.4", true),
    ("5.4 \\text{ cents}", "\\$0.054", false),
    ("15\\mbox{ cm}^2", "15 \\text{cm}^2", true),
    ("42", "42 \\text{ km}/\\text{h}", true),
    // Words.
    ("\\text{Evelyn}", "Evelyn", true),
    ("\\text{Evelyn}", "\\text{evelyn}", true),
    ("\\text{Evelyn}", "\\textbf{Evelyn}", true),
    ("\\text{Evelyn}", "Navin", false),
    ("\\text{east}", "\\text{East}", true),
    ("\\text{east}", "\\text{ east }", true),
    ("\\text{east}", "\\text{west}", false),
    ("\\text{even}", "\\text{Even}", true),
    ("\\text{even}", "\\text{odd}", false),
    ("\\text{ellipse}", "\\text{an ellipse}", false),
    ("\\text{(C)}", "C", true),
    ("\\text{(C)}", "(C)", true),
    ("\\text{(C)}", "\\text{C}", true),
    ("\\text{(C)}", "D", false),
    // Tuples and ordered pairs.
    ("(-2,1)", "(-2, 1)", true),
    ("(-2,1)", "\\left(-2,1\\right)", true),
    ("(-2,1)", "(1,-2)", false),
    ("(6,31,-1)", "(6, 31, -1)", true),
    ("(6,31,-1)", "(6, 31, 1)", false),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3, \\pi/2)", true),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3, \\pi)", false),
    ("\\left( \\frac{3}{2}, -13 \\right)", "(1.5, -13)", true),
    ("(1,-16,-4,43)", "(1,-16,-4,43)", true),
    ("(1,-16,-4,43)", "(1,-16,-4)", false),
    // Intervals and unions.
    ("(3,4]", "(3, 4]", true),
    ("(3,4]", "\\left(3,4\\right]", true),
    ("(3,4]", "[3,4]", false),
    ("(3,4]", "(3,4)", false),
    ("(2,\\infty)", "(2, \\infty)", true),
    ("(2,\\infty)", "(2, +\\infty)", true),
    ("(2,\\infty)", "[2,\\infty)", false),
    ("(-\\infty, 0]", "(-\\infty,0]", true),
    ("(-\\infty, 0]", "(-\\infty,0)", false),
    ("x \\in [-2,7]", "[-2,7]", true),
    ("x \\in [-2,7]", "[-2, 7)", false),
    ("\\left(\\frac{3}{5},\\frac{8}{3}\\right]", "(0.6, \\frac{8}{3}]", true),
    ("(0,9) \\cup (9,36)", "(0,9)\\cup(9,36)", true),
    ("(0,9) \\cup (9,36)", "(9,36) \\cup (0,9)", true),
    ("(0,9) \\cup (9,36)", "(0,36)", false),
    ("(-\\infty, 2) \\cup (3, \\infty)", "(-\\infty,2)\\cup(3,\\infty)", true),
    ("(-\\infty, 2) \\cup (3, \\infty)", "(-\\infty,2]\\cup(3,\\infty)", false),
    ("(2,12) \\cup (12,102)", "(2,12)\\cup(12,102)", true),
    ("(2,12) \\cup (12,102)", "(2,102)", false),
    ("\\left[ \\frac{\\pi^2}{8}, \\frac{5 \\pi^2}{4} \\right]", "[\\pi^2/8, 5\\pi^2/4]", true),
    // Sets and unordered lists.
    ("1,-2", "-2, 1", true),
    ("1,-2", "\\{1, -2\\}", true),
    ("1,-2", "1", false),
    ("1,-2", "1, 2", false),
    ("3, 5, 7", "7, 5, 3", true),
    ("3, 5, 7", "3, 5", false),
    ("3, 5, 7", "3, 5, 7, 9", false),
    ("1 \\pm \\sqrt{19}", "1+\\sqrt{19}, 1-\\sqrt{19}", true),
    ("1 \\pm \\sqrt{19}", "1-\\sqrt{19}, 1+\\sqrt{19}", true),
    ("1 \\pm \\sqrt{19}", "1+\\sqrt{19}", false),
    ("3 \\pm 2 \\sqrt{2}", "3+2\\sqrt{2}, 3-2\\sqrt{2}", true),
    ("\\{1\\pm\\sqrt{5},-2\\}", "-2, 1+\\sqrt{5}, 1-\\sqrt{5}", true),
    ("\\{1\\pm\\sqrt{5},-2\\}", "1+\\sqrt{5}, 1-\\sqrt{5}", false),
    ("3 \\text{ and } 5", "\\boxed{5} and \\boxed{3}", true),
    ("3, 5", "\\boxed{3}, \\boxed{5}", true),
    ("(2,3)", "x = 2, y = 3", true),
    ("(2,3)", "x = 3, y = 2", false),
    ("-1, 2", "x = -1 \\text{ or } x = 2", true),
    ("\\emptyset", "\\{\\}", true),
    ("\\emptyset", "\\varnothing", true),
    ("\\emptyset", "\\{0\\}", false),
    ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\langle 1, 2 \\rangle", true),
    // Matrices.
    ("\\begin{pmatrix} -1 & 0 \\\\ 0 & -1 \\end{pmatrix}", "\\begin{bmatrix} -1 & 0 \\\\ 0 & -1 \\end{bmatrix}", true),
    ("\\begin{pmatrix} -1 & 0 \\\\ 0 & -1 \\end{pmatrix}", "\\begin{pmatrix} -1 & 0 \\\\ 0 & 1 \\end{pmatrix}", false),
    ("\\begin{pmatrix} -1/3 \\\\ 2/3 \\\\ 5/3 \\end{pmatrix}", "\\begin{pmatrix} -\\frac{1}{3} \\\\ \\frac{2}{3} \\\\ \\frac{5}{3} \\end{pmatrix}", true),
    ("\\begin{pmatrix} -1/3 \\\\ 2/3 \\\\ 5/3 \\end{pmatrix}", "\\left(-\\frac13, \\frac23, \\frac53\\right)", true),
    ("\\begin{pmatrix} -1/3 \\\\ 2/3 \\\\ 5/3 \\end{pmatrix}", "\\begin{pmatrix} 2/3 \\\\ -1/3 \\\\ 5/3 \\end{pmatrix}", false),
    ("\\begin{pmatrix} 1/5 \\\\ -18/5 \\end{pmatrix}", "\\begin{pmatrix} 0.2 \\\\ -3.6 \\end{pmatrix}", true),
    // Equations and `x = …`.
    ("x=5", "5", true),
    ("x=5", "x = 5", true),
    ("x=5", "x=6", false),
    ("5", "x = 5", true),
    ("y = 2x + 3", "y=3+2x", true),
    ("y = 2x + 3", "2x+3", true),
    ("y = 2x + 3", "y = 2x - 3", false),
    ("y = -2x", "y=-2x", true),
    ("y = -2x", "2x + y = 0", true),
    ("5x - 7y + 11z + 4 = 0", "-5x + 7y - 11z - 4 = 0", true),
    ("5x - 7y + 11z + 4 = 0", "5x - 7y + 11z = -4", true),
    ("5x - 7y + 11z + 4 = 0", "5x - 7y + 11z - 4 = 0", false),
    // Scientific notation.
    ("3 \\times 10^{5}", "300000", true),
    ("3 \\times 10^{5}", "3 \\cdot 10^5", true),
    ("3 \\times 10^{5}", "3e5", true),
    ("3 \\times 10^{5}", "3 \\times 10^{6}", false),
    ("1.5 \\times 10^{-3}", "0.0015", true),
    // Text fallback for what is not parsed exactly.
    ("52_8", "52_8", true),
    ("52_8", "52_{8}", true),
    ("52_8", "25_8", false),
    ("\\cot x", "\\cot x", true),
    ("\\cot x", "\\tan x", false),
    ("\\sqrt[3]{2}", "\\sqrt[3]{2}", true),
    ("\\sqrt[3]{2}", "\\sqrt[3]{3}", false),
    // Extraction.
    ("\\frac{1}{2}", "<answer>so \\fbox{\\frac12}</answer>", true),
    ("\\frac{1}{2}", "\\boxed{\\frac{1}{3}} wait, actually \\boxed{\\frac{1}{2}}", true),
    ("\\frac{1}{2}", "\\boxed{\\frac{1}{2}} or \\boxed{\\frac{1}{3}}", false),
    ("\\frac{1}{2}", "the answer is 1/2", false),
];

#[test]
fn hand_written_cases() {
    assert!(CASES.len() >= 150, "{}", CASES.len());
    let failures: Vec<String> = CASES
        .iter()
        .filter_map(|&(truth, response, expected)| check(truth, response, expected).err())
        .collect();
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn reasons_and_fields() {
    let v = Verifier::new();
    let r = v.verify_math("no box", "\\frac12").unwrap();
    assert_eq!(r.reason, Reason::NoBox);
    let r = v.verify_math("\\boxed{ $ $ }", "\\frac12").unwrap();
    assert_eq!(r.reason, Reason::EmptyBox);
    let r = v.verify_math("\\boxed{3} or \\boxed{5}", "3").unwrap();
    assert_eq!(r.reason, Reason::SeveralAnswers);
    let r = v.verify_math("\\boxed{10^{10^{10}}}", "1").unwrap();
    assert_eq!(r.reason, Reason::TooLarge);
    let r = v.verify_math("\\boxed{\\frac{84}{2}}", "42").unwrap();
    assert_eq!(r.normalized.as_ref().map(|n| n.as_str()), Some("42"));
    assert_eq!(r.canonical.as_deref(), Some("42"));
    assert!(v.verify_math("\\boxed{1}", " $ $ ").is_err());
    // The integer mode is untouched: its JSON has no `canonical`.
    let json = serde_json::to_string(&v.verify("\\boxed{42}", "42").unwrap()).unwrap();
    assert!(!json.contains("canonical"), "{json}");
}

#[test]
fn choice_mode() {
    let v = Verifier::new();
    for (response, truth, want) in [
        ("\\boxed{B}", "B", Reason::Right),
        ("\\boxed{\\text{(B)}}", "(B)", Reason::Right),
        ("The answer is (C).", "C", Reason::Right),
        ("Answer: D", "D", Reason::Right),
        ("answer: d", "D", Reason::NoBox),
        ("**Answer:** (A)", "A", Reason::Right),
        ("The correct option is B, since ...\n", "B", Reason::Right),
        ("\\boxed{A}", "B", Reason::Wrong),
        ("\\boxed{A, B}", "B", Reason::SeveralAnswers),
        ("I cannot decide", "B", Reason::NoBox),
        ("<answer>\\boxed{J}</answer>", "J", Reason::Right),
    ] {
        let got = v.verify_choice(response, truth).unwrap();
        assert_eq!(got.reason, want, "{response:?} vs {truth}");
    }
    assert!(v.verify_choice("\\boxed{A}", "42").is_err());
}

#[test]
fn mode_detection() {
    use rstar_verifier::Mode;
    assert_eq!(Mode::detect(["1", "025", "1,000"]), Mode::Integer);
    assert_eq!(Mode::detect(["A", "(B)", "\\text{(C)}"]), Mode::Choice);
    assert_eq!(Mode::detect(["1", "\\frac12"]), Mode::Math);
    assert_eq!(Mode::detect(["1", "B"]), Mode::Math);
    assert_eq!("math".parse::<Mode>(), Ok(Mode::Math));
    assert!("float".parse::<Mode>().is_err());
}

#[test]
fn hostile_inputs_are_quick_and_never_panic() {
    let v = Verifier::new();
    let deep = format!("\\boxed{{{}1{}}}", "(".repeat(100_000), ")".repeat(100_000));
    assert_eq!(v.verify_math(&deep, "1").unwrap().reward, 0);
    let braces = format!("\\boxed{{{}1{}}}", "{".repeat(100_000), "}".repeat(100_000));
    assert_eq!(v.verify_math(&braces, "1").unwrap().reward, 0);
    let long = format!("\\boxed{{{}}}", "x+".repeat(500_000));
    assert_eq!(v.verify_math(&long, "1").unwrap().reward, 0);
    let list = format!("\\boxed{{{}}}", "1,".repeat(500_000));
    let _ = v.verify_math(&list, "1").unwrap();
    for e in [
        "2^{2^{2^{2^{2^{5}}}}}",
        "(1+\\sqrt{2})^{64}",
        "(x+y)^{64}",
        "999999!",
        "10^{400}",
        "\\sqrt{99999999999999999999}",
    ] {
        let _ = v.verify_math(&format!("\\boxed{{{e}}}"), "1").unwrap();
    }
}
