//! MATH-500 agreement: every reference answer written in several equivalent styles (all must score 1) and perturbed (all must score 0).
//!
//! The rewrites are plain string transforms of the reference text, written
//! independently of the verifier's parser, so they can catch it out. The same
//! generator feeds `cargo xtask bench verifier` (math-verify's agreement).

/// The styles of `truth` (name, response); each is the same answer.
pub fn styles(truth: &str) -> Vec<(&'static str, String)> {
    let t = truth.trim();
    let mut out = vec![
        ("plain", format!("The answer is $\\boxed{{{t}}}$.")),
        (
            "answer_tag_spaced",
            format!("<answer>so \\boxed{{ {t} }}</answer>"),
        ),
        ("display", format!("\\[\\boxed{{\\displaystyle {t}}}\\]")),
    ];
    let mut push = |name: &'static str, body: String| {
        if body != t {
            out.push((name, format!("so $\\boxed{{{body}}}$")));
        }
    };
    if t.contains("\\dfrac") {
        push("frac_kind", t.replace("\\dfrac", "\\frac"));
    } else if t.contains("\\frac") {
        push("frac_kind", t.replace("\\frac", "\\dfrac"));
    }
    if let Some(w) = whole_command(t, "\\text") {
        push("text_unwrapped", w.to_string());
        push("text_bold", format!("\\textbf{{{w}}}"));
    }
    if let Some(v) = t.strip_suffix("^\\circ") {
        push("degrees_dropped", v.trim().to_string());
        push("degrees_braced", format!("{v}^{{\\circ}}"));
    }
    if t.contains(",\\!") {
        push(
            "thousands_plain",
            t.replace(",\\! ", "").replace(",\\!", ""),
        );
    }
    if t.contains("\\$") {
        push("dollar_dropped", t.replace("\\$", ""));
    }
    if t.contains("pmatrix") {
        push("bmatrix", t.replace("pmatrix", "bmatrix"));
    }
    for prefix in ["x \\in ", "x=", "x = "] {
        if let Some(rest) = t.strip_prefix(prefix) {
            push("prefix_dropped", rest.to_string());
        }
    }
    let items = split_depth0(t, &[',']);
    let bracketed = t.starts_with(['(', '[', '\\']) && !t.starts_with("\\frac");
    if items.len() >= 2 && !bracketed && !t.contains('=') && !thousands(t) {
        let mut rev: Vec<&str> = items.iter().map(|s| s.trim()).collect();
        rev.reverse();
        push("list_reversed", rev.join(", "));
    }
    if scalar(t) {
        if let Some(terms) = signed_terms(t) {
            push("sum_reordered", reorder(&terms));
        }
        push("x_equals", format!("x = {t}"));
        push("times_one", format!("1 \\cdot \\left({t}\\right)"));
    }
    if let Some((neg, p, q)) = int_fraction(t) {
        let s = if neg { "-" } else { "" };
        push("slash", format!("{s}{p}/{q}"));
        push("unreduced", format!("{s}\\frac{{{}}}{{{}}}", 2 * p, 2 * q));
        if let Some(d) = decimal(p, q) {
            push("decimal", format!("{s}{d}"));
        }
        if p > q {
            push("mixed", format!("{s}{}\\frac{{{}}}{{{q}}}", p / q, p % q));
        }
    }
    if let Some(n) = integer(t) {
        push("fraction_of_integer", format!("\\frac{{{}}}{{2}}", 2 * n));
        push("point_zero", format!("{n}.0"));
        push("units", format!("{n} \\text{{ units}}"));
    }
    if let Some((k, n)) = surd(t) {
        push("surd_inside", format!("\\sqrt{{{}}}", k * k * n));
        push("surd_cdot", format!("{k} \\cdot \\sqrt{{{n}}}"));
    }
    if let Some(rest) = t.strip_prefix('-') {
        push("unicode_minus", format!("\u{2212}{rest}"));
    }
    if items.len() >= 2 && !bracketed && !t.contains('=') && !thousands(t) {
        push("set_braces", format!("\\{{{t}\\}}"));
    }
    if let Some(w) = whole_command(t, "\\text") {
        push("text_upper", format!("\\text{{{}}}", w.to_uppercase()));
    }
    if let Some(n) = integer(t).filter(|n| n.abs() >= 1000) {
        let digits = n.abs().to_string();
        let sign = if n < 0 { "-" } else { "" };
        let head = digits.len() % 3;
        let mut grouped = digits[..head].to_string();
        for (k, chunk) in digits.as_bytes()[head..].chunks(3).enumerate() {
            if k > 0 || head > 0 {
                grouped.push_str("\\,");
            }
            grouped.push_str(std::str::from_utf8(chunk).unwrap());
        }
        push("thousands_thin", format!("{sign}{grouped}"));
    }
    if t.starts_with(['(', '[']) && !t.contains("\\left") && !t.contains("\\cup") {
        let (open, close) = (&t[..1], &t[t.len() - 1..]);
        if matches!(close, ")" | "]") {
            push(
                "left_right",
                format!("\\left{open} {} \\right{close}", &t[1..t.len() - 1]),
            );
        }
    }
    // An `\fbox` instead of a box (math-verify does not read it).
    out.push(("fbox", format!("Final: \\fbox{{{t}}}")));
    out
}

/// Perturbed variants of `truth` (name, response); none is the same answer.
pub fn wrongs(truth: &str) -> Vec<(&'static str, String)> {
    let t = truth.trim();
    let mut out = Vec::new();
    let mut push = |name: &'static str, body: String| {
        if body != t {
            out.push((name, format!("so $\\boxed{{{body}}}$")));
        }
    };
    if let Some(i) = t.find(|c: char| c.is_ascii_digit()) {
        let d = t.as_bytes()[i] - b'0';
        // The digit of a thousands group (`10,\!080`) or of a base (`52_8`) changes the value too.
        let bumped = char::from(b'0' + (d + 1) % 10);
        let mut s = t.to_string();
        s.replace_range(i..i + 1, &bumped.to_string());
        // `0.5` bumped to `1.5` and `9` to `0` are fine; `1` in `\frac{1}{1}`-like
        // answers does not occur in MATH-500.
        push("wrong_digit", s);
    }
    if scalar(t) && t != "0" {
        push("wrong_negated", format!("-\\left({t}\\right)"));
        push("wrong_plus_one", format!("{t} + 1"));
        // Off by 10^-7: close, but not the same number.
        push("wrong_tiny_offset", format!("{t} + 0.0000001"));
    }
    if let Some(w) = whole_command(t, "\\text") {
        push("wrong_text", format!("\\text{{not {w}}}"));
    }
    let items = split_depth0(t, &[',']);
    if items.len() >= 2 && !t.starts_with(['(', '[', '\\']) && !t.contains('=') && !thousands(t) {
        push(
            "wrong_item_dropped",
            items[..items.len() - 1]
                .iter()
                .map(|s| s.trim())
                .collect::<Vec<_>>()
                .join(", "),
        );
    }
    // Ordered pairs and tuples: the first two entries swapped (when they differ).
    if let Some(inner) = t.strip_prefix('(').and_then(|r| r.strip_suffix(')')) {
        let parts = split_depth0(inner, &[',']);
        if parts.len() >= 2 && parts[0].trim() != parts[1].trim() {
            let mut p: Vec<&str> = parts.iter().map(|s| s.trim()).collect();
            p.swap(0, 1);
            push("wrong_swapped", format!("({})", p.join(", ")));
        }
    }
    // Intervals: a finite closed end opened, or an open one closed.
    if t.ends_with(']') && !t.contains("pmatrix") {
        push("wrong_end", format!("{})", &t[..t.len() - 1]));
    } else if t.starts_with('(')
        && t.ends_with(')')
        && !t.ends_with("\\infty)")
        && t.contains("\\infty")
    {
        push("wrong_end", format!("{}]", &t[..t.len() - 1]));
    }
    out
}

/// Whether a comma separates thousands (`10,\!080`, `58,500`) rather than items.
fn thousands(t: &str) -> bool {
    let b = t.as_bytes();
    t.contains(",\\!")
        || (1..b.len()).any(|i| {
            b[i] == b','
                && b[i - 1].is_ascii_digit()
                && b.len() >= i + 4
                && b[i + 1..i + 4].iter().all(u8::is_ascii_digit)
                && !b.get(i + 4).is_some_and(u8::is_ascii_digit)
        })
}

/// `\text{W}` as a whole: `W`.
fn whole_command<'a>(t: &'a str, cmd: &str) -> Option<&'a str> {
    let inner = t.strip_prefix(cmd)?.strip_prefix('{')?.strip_suffix('}')?;
    (!inner.contains(['{', '}'])).then_some(inner)
}

/// Splits at `seps` outside `()`, `[]`, `{}`.
fn split_depth0<'a>(t: &'a str, seps: &[char]) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in t.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            c if depth == 0 && seps.contains(&c) => {
                // `\{` and `\}` are set braces: a preceding backslash is part of them.
                if i > 0 && t.as_bytes()[i - 1] == b'\\' {
                    continue;
                }
                out.push(&t[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    out.push(&t[start..]);
    out
}

/// A single algebraic value: no list, tuple, interval, equation, text, set, matrix, subscript or function.
fn scalar(t: &str) -> bool {
    const NOT: &[&str] = &[
        ",", "=", "\\text", "\\mbox", "_", "\\in", "\\pm", "\\cup", "matrix", "\\infty", "\\{",
        "\\cot", "(", "[", "\\$", "^\\circ",
    ];
    !NOT.iter().any(|n| t.contains(n))
}

/// The top-level signed terms of a sum: `x^3+3x-6` is `+x^3`, `+3x`, `-6`.
fn signed_terms(t: &str) -> Option<Vec<(bool, &str)>> {
    let b = t.as_bytes();
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    let mut neg = false;
    for i in 0..b.len() {
        match b[i] {
            b'{' | b'(' | b'[' => depth += 1,
            b'}' | b')' | b']' => depth -= 1,
            b'+' | b'-' if depth == 0 => {
                let before = t[..i].trim_end();
                if before.is_empty() {
                    neg = b[i] == b'-';
                    start = i + 1;
                    continue;
                }
                if before.ends_with(['^', '+', '-', '*']) || before.ends_with("\\cdot") {
                    continue;
                }
                out.push((neg, t[start..i].trim()));
                neg = b[i] == b'-';
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push((neg, t[start..].trim()));
    (out.len() >= 2 && out.iter().all(|(_, s)| !s.is_empty())).then_some(out)
}

fn reorder(terms: &[(bool, &str)]) -> String {
    let mut s = String::new();
    for (k, (neg, term)) in terms.iter().rev().enumerate() {
        match (k, neg) {
            (0, true) => s.push('-'),
            (0, false) => {}
            (_, true) => s.push_str(" - "),
            (_, false) => s.push_str(" + "),
        }
        s.push_str(term);
    }
    s
}

/// `\frac{p}{q}`, `\dfrac pq`, `\frac43`, `-\frac{p}{q}` with integers: (negative, p, q).
fn int_fraction(t: &str) -> Option<(bool, u64, u64)> {
    let (neg, rest) = match t.strip_prefix('-') {
        Some(r) => (true, r.trim_start()),
        None => (false, t),
    };
    let rest = rest
        .strip_prefix("\\frac")
        .or_else(|| rest.strip_prefix("\\dfrac"))?
        .trim_start();
    let (p, rest) = arg(rest)?;
    let (q, rest) = arg(rest.trim_start())?;
    if !rest.trim().is_empty() || q == 0 {
        return None;
    }
    Some((neg, p, q))
}

/// A brace group of digits, or one digit.
fn arg(t: &str) -> Option<(u64, &str)> {
    if let Some(r) = t.strip_prefix('{') {
        let close = r.find('}')?;
        Some((r[..close].trim().parse().ok()?, &r[close + 1..]))
    } else {
        let c = t.chars().next()?;
        Some((c.to_digit(10)? as u64, &t[1..]))
    }
}

/// `p/q` as a terminating decimal, when it is one.
fn decimal(p: u64, q: u64) -> Option<String> {
    let mut m = q;
    for f in [2, 5] {
        while m.is_multiple_of(f) {
            m /= f;
        }
    }
    if m != 1 {
        return None;
    }
    let mut places = 0;
    let mut scale = 1u128;
    while !(p as u128 * scale).is_multiple_of(q as u128) {
        scale *= 10;
        places += 1;
    }
    let v = p as u128 * scale / q as u128;
    let digits = format!("{v:0>width$}", width = places + 1);
    let (int, frac) = digits.split_at(digits.len() - places);
    Some(if places == 0 {
        int.to_string()
    } else {
        format!("{int}.{frac}")
    })
}

fn integer(t: &str) -> Option<i64> {
    t.parse().ok()
}

/// `k\sqrt{n}`, `k \sqrt n`: (k, n).
fn surd(t: &str) -> Option<(u64, u64)> {
    let at = t.find("\\sqrt")?;
    let k: u64 = t[..at].trim().parse().ok()?;
    let (n, rest) = arg(t[at + 5..].trim_start())?;
    rest.trim().is_empty().then_some((k, n))
}

#[test]
fn generator_by_hand() {
    assert_eq!(decimal(3, 8).as_deref(), Some("0.375"));
    assert_eq!(decimal(1, 3), None);
    assert_eq!(int_fraction("\\frac43"), Some((false, 4, 3)));
    assert_eq!(int_fraction("-\\frac{35}{9}"), Some((true, 35, 9)));
    assert_eq!(surd("11\\sqrt2"), Some((11, 2)));
    assert_eq!(reorder(&signed_terms("x^3+3x-6").unwrap()), "-6 + 3x + x^3");
    assert_eq!(reorder(&signed_terms("-2 + 7i").unwrap()), "7i - 2");
    assert!(signed_terms("10^{-3}").is_none());
}

#[test]
fn every_math500_answer_in_every_style() {
    let v = rstar_verifier::Verifier::new();
    let text = std::fs::read_to_string(rstar_testdata::dataset("math500.jsonl")).unwrap();
    let (mut n_right, mut n_wrong) = (0, 0);
    let mut failures = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        let truth = row["answer"].as_str().unwrap();
        let parsed = v
            .math_truth(truth)
            .unwrap_or_else(|e| panic!("math500.jsonl:{}: {e}", i + 1));
        for (style, response) in styles(truth) {
            n_right += 1;
            let got = v.verify_math_truth(&response, &parsed);
            if !got.is_right() {
                failures.push(format!(
                    "line {}: {style}: {response:?} vs {truth:?}: {got:?}",
                    i + 1
                ));
            }
        }
        for (style, response) in wrongs(truth) {
            n_wrong += 1;
            let got = v.verify_math_truth(&response, &parsed);
            if got.is_right() {
                failures.push(format!(
                    "line {}: {style}: {response:?} vs {truth:?}: {got:?}",
                    i + 1
                ));
            }
        }
    }
    assert!(n_right > 2000 && n_wrong > 800, "{n_right} {n_wrong}");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
