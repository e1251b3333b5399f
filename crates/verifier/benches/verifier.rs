//! `cargo xtask bench verifier`: rstar-verifier against HuggingFace math-verify, side by side in one run.
//!
//! Measures (medians over repeated runs, ratios against the peer):
//! 1. answers/s in one thread, on the same 2000 responses for both;
//! 2. answers/s with rayon (ours only; math-verify is single-threaded Python);
//! 3. whole-process throughput: `rstar verify` (JSON in, JSON out) against a
//!    Python process doing the same with math-verify, on the same file;
//! 4. agreement with math-verify on every distinct integer answer of
//!    `../shared/datasets` written in ten styles plus three wrong variants,
//!    disagreements counted by category;
//! 5. the math mode: answers/s in one thread on every MATH-500 reference
//!    answer in its equivalent styles and perturbed variants
//!    (`tests/verifier/math_styles.rs`), against math-verify on the same cases, and
//!    the agreement on them by style.
//!
//! The peer parts need `RSTAR_PYTHON` (a Python with math-verify) and
//! `RSTAR_PEER` (xtask/bench/verifier_peer.py); the whole-process rows also
//! `RSTAR_BIN` (a release `rstar`). `cargo xtask bench verifier` sets all
//! three. Without them only our own numbers are printed, and the report says so.

use std::collections::{BTreeMap, BTreeSet};
use std::hint::black_box;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use rstar_verifier::{Verifier, verify, verify_batch};

#[path = "../tests/verifier/math_styles.rs"]
#[allow(dead_code)] // reason: the bench uses the style generator, not the test functions
mod math_styles;

/// splitmix64: a seeded generator, so every run scores the same responses.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// 2000 responses like the notes' throughput set: a short worked sentence
/// ending in `$\boxed{N}$`, half right and half wrong.
fn responses(n: usize) -> Vec<(String, String)> {
    let mut rng = Rng(20_250_829);
    (0..n)
        .map(|i| {
            let gt = rng.next() % 1_000_000;
            let said = if i % 2 == 0 {
                gt
            } else {
                gt + 1 + rng.next() % 100
            };
            let response = format!(
                "We compute the sum step by step. Adding the terms gives {a} + {b}, and after \
                 checking the remaining cases we conclude that the answer is $\\boxed{{{said}}}$.",
                a = said / 2,
                b = said - said / 2
            );
            (response, gt.to_string())
        })
        .collect()
}

fn write_jsonl(path: &Path, rows: &[(String, String)]) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for (r, a) in rows {
        serde_json::to_writer(&mut f, &serde_json::json!({"response": r, "answer": a})).unwrap();
        f.write_all(b"\n").unwrap();
    }
}

struct Peer {
    python: PathBuf,
    script: PathBuf,
    rstar: Option<PathBuf>,
}

impl Peer {
    fn from_env() -> Option<Peer> {
        Some(Peer {
            python: std::env::var_os("RSTAR_PYTHON")?.into(),
            script: std::env::var_os("RSTAR_PEER")?.into(),
            rstar: std::env::var_os("RSTAR_BIN").map(PathBuf::from),
        })
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new(&self.python)
            .arg(&self.script)
            .args(args)
            .stderr(Stdio::inherit())
            .output()
            .expect("the peer script runs");
        assert!(out.status.success(), "peer {args:?} failed");
        String::from_utf8(out.stdout).unwrap()
    }
}

/// Wall seconds of a whole process reading `input`, its stdout discarded.
fn time_process(cmd: &mut Command) -> f64 {
    let t = Instant::now();
    let status = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("process runs");
    let secs = t.elapsed().as_secs_f64();
    assert!(
        status.success() || status.code() == Some(2),
        "{cmd:?}: {status}"
    );
    secs
}

/// Every distinct integer answer of the shared datasets.
fn dataset_answers(v: &Verifier) -> Vec<String> {
    let mut out = BTreeSet::new();
    for name in [
        "aime24.jsonl",
        "aime25.jsonl",
        "amc23.jsonl",
        "gsm8k_test.jsonl",
        "hmmt_feb2025.jsonl",
        "math500.jsonl",
        "dapo_math_17k.jsonl",
    ] {
        let text = std::fs::read_to_string(rstar_testdata::dataset(name)).unwrap();
        for line in text.lines() {
            let row: serde_json::Value = serde_json::from_str(line).unwrap();
            let answer = row["answer"].as_str().unwrap().trim();
            // Integer answers as the datasets write them (digits, an optional minus).
            let digits = answer.strip_prefix('-').unwrap_or(answer);
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                out.insert(v.ground_truth(answer).unwrap().to_string());
            }
        }
    }
    out.into_iter().collect()
}

fn grouped(digits: &str, sep: &str) -> String {
    let first = digits.len() % 3;
    let mut out = String::from(&digits[..first]);
    for (i, chunk) in digits.as_bytes()[first..].chunks(3).enumerate() {
        if i > 0 || first > 0 {
            out.push_str(sep);
        }
        out.push_str(std::str::from_utf8(chunk).unwrap());
    }
    out
}

/// The ten styles (name, response) an answer is written in; all must score 1.
fn styles(n: &str) -> Vec<(&'static str, String)> {
    let (minus, digits) = match n.strip_prefix('-') {
        Some(d) => ("-", d),
        None => ("", n),
    };
    vec![
        ("plain", format!("The answer is $\\boxed{{{n}}}$.")),
        (
            "thousands_comma",
            format!("$\\boxed{{{minus}{}}}$", grouped(digits, ",")),
        ),
        (
            "thousands_brace",
            format!("$\\boxed{{{minus}{}}}$", grouped(digits, "{,}")),
        ),
        (
            "thousands_thin",
            format!("$\\boxed{{{minus}{}}}$", grouped(digits, "\\,")),
        ),
        ("text", format!("\\boxed{{\\text{{{n}}}}}")),
        ("leading_zero", format!("\\boxed{{{minus}0{digits}}}")),
        ("trailing_point_zero", format!("\\boxed{{{n}.0}}")),
        ("x_equals", format!("\\boxed{{x = {n}}}")),
        ("unit", format!("\\boxed{{{n} \\text{{ cm}}}}")),
        (
            "fbox_answer_tag",
            format!("<answer>so \\fbox{{{n}}}</answer>"),
        ),
    ]
}

/// The wrong variants (name, response); all must score 0.
fn wrongs(n: &str) -> Vec<(&'static str, String)> {
    let v: num_bigint::BigInt = n.parse().unwrap();
    let mut out = vec![("wrong_off_by_one", format!("\\boxed{{{}}}", &v + 1u32))];
    // Ten times zero is zero: not a wrong variant.
    if v != num_bigint::BigInt::ZERO {
        out.push(("wrong_times_ten", format!("\\boxed{{{}}}", &v * 10u32)));
    }
    let mut d: Vec<u8> = n.bytes().collect();
    let len = d.len();
    if len >= 2 && d[len - 1] != d[len - 2] && d[len - 2] != b'-' {
        d.swap(len - 1, len - 2);
        let swapped = String::from_utf8(d).unwrap();
        out.push(("wrong_digits_swapped", format!("\\boxed{{{swapped}}}")));
    }
    out
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is accepted.
    let v = Verifier::new();
    let peer = Peer::from_env();
    let tmp = std::env::temp_dir().join(format!("rstar-verifier-bench-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut report = String::new();
    let mut say = |line: String| {
        println!("{line}");
        report.push_str(&line);
        report.push('\n');
    };

    // `RSTAR_BENCH_PART=math` runs part 5 alone (it needs the peer).
    if std::env::var("RSTAR_BENCH_PART").is_ok_and(|p| p == "math") {
        let peer = peer.expect("RSTAR_BENCH_PART=math needs RSTAR_PYTHON and RSTAR_PEER");
        math_mode(&peer, &tmp, &mut say);
        let _ = std::fs::remove_dir_all(&tmp);
        return;
    }
    // 1. Single thread.
    let rows = responses(2000);
    let mut secs = Vec::new();
    for _ in 0..21 {
        // Both loops keep every verdict and free them after the clock stops.
        let t = Instant::now();
        let out: Vec<_> = rows
            .iter()
            .map(|(r, a)| verify(black_box(r), black_box(a)))
            .collect();
        secs.push(t.elapsed().as_secs_f64());
        drop(black_box(out));
    }
    let ours_1 = rows.len() as f64 / median(secs);
    // 2. Rayon over 100 copies of the set.
    let many: Vec<(String, String)> = (0..100).flat_map(|_| rows.iter().cloned()).collect();
    let mut secs = Vec::new();
    for _ in 0..7 {
        let t = Instant::now();
        let out = verify_batch(black_box(&many));
        secs.push(t.elapsed().as_secs_f64());
        drop(black_box(out));
    }
    let ours_par = many.len() as f64 / median(secs);
    let threads = rayon::current_num_threads();

    // 10 MB adversarial responses: the milliseconds one verify takes (median of 5).
    let ten = 10usize << 20;
    let mut nested = "\\boxed{".repeat(1_000_000);
    nested.push_str(&"{".repeat(ten - nested.len()));
    let adversarial = [
        ("a million unclosed `\\boxed{`, then 3M `{`", nested),
        (
            "a million nested boxes, all closed",
            format!("{}{}", "\\boxed{".repeat(1_000_000), "}".repeat(1_000_000)),
        ),
        (
            "one box, braces nested 5M deep",
            format!("\\boxed{{{}1{}}}", "{".repeat(ten / 2), "}".repeat(ten / 2)),
        ),
        (
            "950k adjacent `\\boxed{7}, `",
            "\\boxed{7}, ".repeat(ten / 11),
        ),
    ];
    let mut adversarial_rows = Vec::new();
    for (what, text) in &adversarial {
        let mut secs = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            black_box(verify(black_box(text), "7").unwrap());
            secs.push(t.elapsed().as_secs_f64());
        }
        adversarial_rows.push(format!("| {what} | {:.1} ms |", median(secs) * 1e3));
    }

    let input = tmp.join("responses.jsonl");
    write_jsonl(&input, &rows);
    let big = tmp.join("responses_x100.jsonl");
    write_jsonl(&big, &many);

    say("| measure | rstar-verifier | math-verify | ratio |".into());
    say("|---|---|---|---|".into());
    let Some(peer) = peer else {
        say(format!(
            "| answers/s, 1 thread (median of 21) | {ours_1:.0} | not run | |"
        ));
        say(format!(
            "| answers/s, rayon ({threads} threads) | {ours_par:.0} | | |"
        ));
        for row in &adversarial_rows {
            println!("{row}");
        }
        println!(
            "\nmath-verify not run: set RSTAR_PYTHON, RSTAR_PEER, RSTAR_BIN (`cargo xtask bench verifier` does)"
        );
        return;
    };

    let out = peer.run(&["throughput", input.to_str().unwrap(), "3"]);
    let j: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let peer_secs: Vec<f64> = j["seconds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    let peer_1 = rows.len() as f64 / median(peer_secs);
    say(format!(
        "| answers/s, 1 thread (median; ours of 21 runs, math-verify of 3) | {ours_1:.0} | {peer_1:.0} | {:.0}x |",
        ours_1 / peer_1
    ));
    say(format!(
        "| answers/s, rayon ({threads} threads) vs math-verify 1 thread | {ours_par:.0} | {peer_1:.0} | {:.0}x |",
        ours_par / peer_1
    ));

    // 3. Whole process, JSON in and out, the same 2000-line file.
    if let Some(rstar) = &peer.rstar {
        let mut ours = Vec::new();
        for _ in 0..11 {
            ours.push(time_process(
                Command::new(rstar).args(["verify", "--input"]).arg(&input),
            ));
        }
        let ours_proc = rows.len() as f64 / median(ours);
        let mut big_secs = Vec::new();
        for _ in 0..5 {
            big_secs.push(time_process(
                Command::new(rstar).args(["verify", "--input"]).arg(&big),
            ));
        }
        let ours_big = many.len() as f64 / median(big_secs);
        let mut theirs = Vec::new();
        for _ in 0..3 {
            theirs.push(time_process(
                Command::new(&peer.python)
                    .arg(&peer.script)
                    .arg("process")
                    .arg(&input),
            ));
        }
        let peer_proc = rows.len() as f64 / median(theirs);
        say(format!(
            "| lines/s, whole process on the same 2000-line JSONL (median; ours of 11, theirs of 3) | {ours_proc:.0} | {peer_proc:.0} | {:.0}x |",
            ours_proc / peer_proc
        ));
        say(format!(
            "| lines/s, `rstar verify` on 200 000 lines (median of 5) vs the same peer | {ours_big:.0} | {peer_proc:.0} | {:.0}x |",
            ours_big / peer_proc
        ));
    } else {
        say("| whole-process rows | not run: set RSTAR_BIN to a release `rstar` | | |".into());
    }

    say(String::new());
    say("| 10 MB adversarial response | time to score (median of 5) |".into());
    say("|---|---|".into());
    for row in &adversarial_rows {
        say(row.clone());
    }

    // 4. Agreement over the datasets' integer answers.
    let answers = dataset_answers(&v);
    let mut cases: Vec<(&'static str, String, String)> = Vec::new();
    for a in &answers {
        for (style, r) in styles(a).into_iter().chain(wrongs(a)) {
            cases.push((style, r, a.clone()));
        }
    }
    let case_rows: Vec<(String, String)> = cases
        .iter()
        .map(|(_, r, a)| (r.clone(), a.clone()))
        .collect();
    let agree_file = tmp.join("agreement.jsonl");
    write_jsonl(&agree_file, &case_rows);
    let theirs: Vec<u8> = peer
        .run(&["agree", agree_file.to_str().unwrap()])
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(theirs.len(), cases.len());
    let mut by_cat: BTreeMap<&str, (usize, usize, usize, usize, String)> = BTreeMap::new();
    let mut our_mistakes = 0;
    for ((style, r, a), their) in cases.iter().zip(&theirs) {
        let ours = v.verify(r, a).unwrap();
        let intended = u8::from(!style.starts_with("wrong"));
        if ours.reward != intended {
            our_mistakes += 1;
            eprintln!(
                "rstar-verifier disagrees with the intended verdict: {r} vs {a}: {:?}",
                ours.reason
            );
        }
        let e = by_cat.entry(style).or_default();
        e.0 += 1;
        if ours.reward != *their {
            if ours.reward == 1 {
                e.1 += 1;
            } else {
                e.2 += 1;
            }
            if e.4.is_empty() {
                e.4 = format!("`{}` vs `{a}`", r.replace('|', "\\|"));
            }
        }
        if *their != intended {
            e.3 += 1;
        }
    }
    let total_dis: usize = by_cat.values().map(|e| e.1 + e.2).sum();
    say(String::new());
    say(format!(
        "Agreement: {} distinct integer answers x (10 styles + up to 3 wrong variants) = {} cases; \
         agreement {:.2}% ({} disagreements); rstar-verifier matches the intended verdict on {} of {}.",
        answers.len(),
        cases.len(),
        100.0 * (cases.len() - total_dis) as f64 / cases.len() as f64,
        total_dis,
        cases.len() - our_mistakes,
        cases.len()
    ));
    say(String::new());
    say("| category | cases | ours 1, math-verify 0 | ours 0, math-verify 1 | math-verify off the intended verdict | first example |".into());
    say("|---|---|---|---|---|---|".into());
    for (cat, (n, a, b, off, ex)) in &by_cat {
        say(format!("| {cat} | {n} | {a} | {b} | {off} | {ex} |"));
    }

    math_mode(&peer, &tmp, &mut say);
    let _ = std::fs::remove_dir_all(&tmp);
}

/// Part 5: the math mode on MATH-500's reference answers, against math-verify.
fn math_mode(peer: &Peer, tmp: &Path, say: &mut impl FnMut(String)) {
    let v = Verifier::new();
    let text = std::fs::read_to_string(rstar_testdata::dataset("math500.jsonl")).unwrap();
    let mut cases: Vec<(&'static str, String, String)> = Vec::new();
    for line in text.lines() {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        let a = row["answer"].as_str().unwrap().to_string();
        for (style, r) in math_styles::styles(&a)
            .into_iter()
            .chain(math_styles::wrongs(&a))
        {
            cases.push((style, r, a.clone()));
        }
    }
    let rows: Vec<(String, String)> = cases
        .iter()
        .map(|(_, r, a)| (r.clone(), a.clone()))
        .collect();
    let mut secs = Vec::new();
    for _ in 0..21 {
        let t = Instant::now();
        let out: Vec<_> = rows
            .iter()
            .map(|(r, a)| v.verify_math(black_box(r), black_box(a)))
            .collect();
        secs.push(t.elapsed().as_secs_f64());
        drop(black_box(out));
    }
    let ours = rows.len() as f64 / median(secs);
    let file = tmp.join("math500_cases.jsonl");
    write_jsonl(&file, &rows);
    let out = peer.run(&["throughput", file.to_str().unwrap(), "3"]);
    let j: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let peer_secs: Vec<f64> = j["seconds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    let theirs = rows.len() as f64 / median(peer_secs);
    say(String::new());
    say("| math mode, MATH-500 cases | rstar-verifier | math-verify | ratio |".into());
    say("|---|---|---|---|".into());
    say(format!(
        "| answers/s, 1 thread, {} responses (median; ours of 21 runs, math-verify of 3) | {ours:.0} | {theirs:.0} | {:.0}x |",
        rows.len(),
        ours / theirs
    ));

    let verdicts: Vec<u8> = peer
        .run(&["agree", file.to_str().unwrap()])
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(verdicts.len(), cases.len());
    let mut by_style: BTreeMap<&str, (usize, usize, usize, usize, usize, String)> = BTreeMap::new();
    let (mut dis, mut ours_ok, mut theirs_ok) = (0, 0, 0);
    for ((style, r, a), their) in cases.iter().zip(&verdicts) {
        let mine = v.verify_math(r, a).unwrap().reward;
        let intended = u8::from(!style.starts_with("wrong"));
        let e = by_style.entry(style).or_default();
        e.0 += 1;
        if mine == intended {
            ours_ok += 1;
        } else {
            e.3 += 1;
            eprintln!("math mode off the intended verdict: {r} vs {a}");
        }
        if *their == intended {
            theirs_ok += 1;
        } else {
            e.4 += 1;
        }
        if mine != *their {
            dis += 1;
            if mine == 1 {
                e.1 += 1;
            } else {
                e.2 += 1;
            }
            eprintln!("disagreement [{style}] ours {mine} math-verify {their}: `{r}` vs `{a}`");
            if e.5.is_empty() {
                e.5 = format!("`{}` vs `{a}`", r.replace('|', "\\|"));
            }
        }
    }
    let n = cases.len();
    say(String::new());
    say(format!(
        "Math agreement: 500 MATH-500 answers -> {n} cases; agreement with math-verify {:.2}% ({dis} disagreements); \
         intended verdict: rstar-verifier {ours_ok}/{n} ({:.2}%), math-verify {theirs_ok}/{n} ({:.2}%).",
        100.0 * (n - dis) as f64 / n as f64,
        100.0 * ours_ok as f64 / n as f64,
        100.0 * theirs_ok as f64 / n as f64,
    ));
    say(String::new());
    say("| style | cases | ours 1, math-verify 0 | ours 0, math-verify 1 | ours off intended | math-verify off intended | first disagreement |".into());
    say("|---|---|---|---|---|---|---|".into());
    for (style, (n, a, b, mine, theirs, ex)) in &by_style {
        say(format!(
            "| {style} | {n} | {a} | {b} | {mine} | {theirs} | {ex} |"
        ));
    }
}
