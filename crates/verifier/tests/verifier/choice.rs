//! Choice mode: what is read from a response, and which ground truths are letters.

use rstar_verifier::{Error, Mode, Reason, Verifier};

/// Scores `response` against the ground truth `letter` and checks the letter and the text it was read from.
fn check(response: &str, letter: char, extracted: &str) {
    let v = Verifier::new();
    let got = v.verify_choice(response, &letter.to_string()).unwrap();
    assert_eq!(got.reason, Reason::Right, "{response:?}: {got:?}");
    assert_eq!(
        got.canonical.as_deref(),
        Some(letter.to_string().as_str()),
        "{response:?}"
    );
    assert_eq!(got.extracted.as_deref(), Some(extracted), "{response:?}");
}

#[test]
fn issue_44_extracted_keeps_the_closing_bracket() {
    for (response, letter, extracted) in [
        // Parenthesised.
        ("The answer is (B)", 'B', "(B)"),
        ("Thus the answer is (B).", 'B', "(B)"),
        ("I pick option (b)", 'B', "(b)"),
        ("**Answer:** (A)", 'A', "(A)"),
        // Bracketed.
        ("The answer is [C].", 'C', "[C]"),
        ("answer is {E}", 'E', "{E}"),
        ("the answer is \"F\"", 'F', "\"F\""),
        // Bold.
        ("answer: **D**", 'D', "**D**"),
        ("The correct answer is **D**", 'D', "**D**"),
        ("answer is **(G)**.", 'G', "**(G)**"),
        ("answer is $\\textbf{H}$", 'H', "$\\textbf{H}$"),
        // Bare, and a closer that nothing opened.
        ("Answer: C", 'C', "C"),
        ("The answer is: J", 'J', "J"),
        ("The answer is B) because", 'B', "B"),
        // A box, and a last line, keep their text as written.
        ("so \\boxed{(B)}", 'B', "(B)"),
        ("Reasoning...\n**(A)**", 'A', "**(A)**"),
    ] {
        check(response, letter, extracted);
    }
}

#[test]
fn issue_44_rstar_verify_reads_the_same_text() {
    // What `rstar verify --mode choice` prints is the library's verdict; checked here without
    // the binary so that the crate's own tests catch a regression.
    let v = Verifier::new();
    let json = serde_json::to_value(
        v.verify_mode(Mode::Choice, "The answer is (B)", "B")
            .unwrap(),
    )
    .unwrap();
    assert_eq!(json["extracted"], "(B)", "{json}");
    assert_eq!(json["canonical"], "B", "{json}");
}

#[test]
fn issue_42_choice_truth_is_one_letter() {
    let v = Verifier::new();
    for (truth, letter) in [
        ("B", 'B'),
        ("b", 'B'),
        (" (C) ", 'C'),
        ("[D]", 'D'),
        ("**E**", 'E'),
        ("**(E)**", 'E'),
        ("\\text{(F)}", 'F'),
        ("\\textbf{G}", 'G'),
        ("$H$", 'H'),
        ("\\boxed{I}", 'I'),
        ("J)", 'J'),
        ("A.", 'A'),
    ] {
        let got = v.verify_choice(&format!("\\boxed{{{letter}}}"), truth);
        assert!(
            got.as_ref().is_ok_and(|g| g.is_right()),
            "{truth:?}: {got:?}"
        );
    }
    for truth in [
        "1e5",
        "3e",
        "42e",
        "1e308",
        "12b34",
        "e5",
        "42",
        "",
        "(",
        "()",
        "AB",
        "A, B",
        "K",
        "Answer: B",
        "(B",
        "**B",
        "B))",
        "\\text{B",
        "option B",
    ] {
        match v.verify_choice("\\boxed{E}", truth) {
            Err(Error::Truth { mode, text, .. }) => {
                assert_eq!((mode, text.as_str()), (Mode::Choice, truth), "{truth:?}");
            }
            other => panic!("{truth:?} read as a letter: {other:?}"),
        }
        assert!(v.check_truth(Mode::Choice, truth).is_err(), "{truth:?}");
    }
    // A dataset of such truths is not a choice dataset.
    assert_ne!(Mode::detect(["1e5", "12b34"]), Mode::Choice);
    assert_eq!(Mode::detect(["A", "(b)", "**C**"]), Mode::Choice);
}
