//! `rstar report`: the smoke run's page opened in headless Chromium (Debian's `chromium`;
//! `cargo xtask ci` installs it) renders the evaluation table, the plots and a trajectory with a
//! tool call, its script runs without errors and hostile model text stays text; a damaged run
//! directory gives a page that says what is missing; two runs are compared.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::train::rstar;
use super::train_tensorboard::smoke_run;

/// The Chromium binary: `$RSTAR_CHROMIUM`, else `chromium` or `chromium-browser` on `PATH`.
fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("RSTAR_CHROMIUM") {
        return PathBuf::from(p);
    }
    for name in ["chromium", "chromium-browser"] {
        let found = std::env::var_os("PATH")
            .map(|paths| {
                std::env::split_paths(&paths)
                    .map(|d| d.join(name))
                    .find(|p| p.is_file())
            })
            .unwrap_or_default();
        if let Some(p) = found {
            return p;
        }
    }
    panic!(
        "headless Chromium is needed: install Debian's `chromium` (`apt-get install chromium`; \
         `cargo xtask ci` does) or set RSTAR_CHROMIUM to the browser binary"
    );
}

/// The DOM after the page's scripts ran, and the browser's log (console messages included).
fn dump_dom(page: &Path) -> (String, String) {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "chromium failed: {log}");
    (String::from_utf8(out.stdout).unwrap(), log)
}

/// Lines of Chromium's log that report a console message or a script error.
fn console_errors(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains("CONSOLE") || l.contains("Uncaught") || l.contains("Refused to"))
        .collect()
}

/// The contents of the `<text class="{class}">` elements of `html`.
fn texts<'a>(html: &'a str, class: &str) -> Vec<&'a str> {
    html.match_indices(&format!("<text class=\"{class}\""))
        .map(|(i, _)| {
            let body = &html[i + html[i..].find('>').unwrap() + 1..];
            &body[..body.find("</text>").unwrap()]
        })
        .collect()
}

/// The figure `data-chart="{name}"` of `html`.
fn figure<'a>(html: &'a str, name: &str) -> &'a str {
    let at = html
        .find(&format!("data-chart=\"{name}\""))
        .unwrap_or_else(|| panic!("no chart {name}"));
    &html[at..at + html[at..].find("</figure>").unwrap()]
}

/// Issue 39: step ticks are integers, and in the browser no stage label covers a legend entry
/// or another stage label (the page's script measures the drawn boxes).
fn assert_plots_are_legible(dom: &str, log: &str) {
    let ticks = texts(dom, "xtick");
    assert!(!ticks.is_empty());
    for t in &ticks {
        assert!(
            t.parse::<u64>().is_ok(),
            "step tick {t:?} is not an integer"
        );
    }
    assert!(dom.contains("<g class=\"legend\">"));
    assert!(
        dom.contains("data-label-overlaps=\"0\""),
        "a stage label overlaps a legend entry or another label: {}",
        dom.find("data-label-overlaps=")
            .map_or(log, |at| &dom[at..at + 30])
    );
}

/// A copy of a run's files (not its checkpoints) in `to`.
fn copy_run(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for f in [
        "config.json",
        "sft_metrics.jsonl",
        "metrics.jsonl",
        "eval.jsonl",
        "samples.jsonl",
    ] {
        std::fs::copy(from.join(f), to.join(f)).unwrap();
    }
}

const HOSTILE: &str = "<script>document.body.setAttribute('data-pwned','1')</script><img src=x onerror=\"document.body.setAttribute('data-pwned','2')\">";

#[test]
fn the_smoke_report_renders_in_chromium_with_its_table_plots_and_a_tool_call() {
    let run = smoke_run();
    let page = run.join("report.html");
    let html = std::fs::read_to_string(&page).unwrap();
    // Self-contained: no external asset, a policy that forbids fetching any.
    for external in ["src=\"http", "href=\"http", "<link", "@import", "url("] {
        assert!(!html.contains(external), "{external}");
    }
    assert!(html.contains("Content-Security-Policy\" content=\"default-src 'none'"));

    // A copy with hostile model text in a trajectory, rendered too.
    let dir = tempfile::tempdir().unwrap();
    let hostile = dir.path().join("hostile");
    copy_run(run, &hostile);
    let samples = hostile.join("samples.jsonl");
    let mut lines: Vec<Value> = std::fs::read_to_string(&samples)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut bad = lines[0].clone();
    bad["id"] = Value::String(HOSTILE.into());
    for turn in bad["turns"].as_array_mut().unwrap() {
        turn["text"] = Value::String(HOSTILE.into());
    }
    if let Some(first) = bad["token_texts"].get_mut(0) {
        *first = Value::String(HOSTILE.into());
    }
    lines.push(bad);
    std::fs::write(
        &samples,
        lines
            .iter()
            .map(|v| v.to_string() + "\n")
            .collect::<String>(),
    )
    .unwrap();
    let hostile_page = dir.path().join("hostile.html");
    let (ok, _, stderr) = rstar(&[
        "report",
        hostile.to_str().unwrap(),
        "--out",
        hostile_page.to_str().unwrap(),
    ]);
    assert!(ok, "{stderr}");

    for page in [&page, &hostile_page] {
        let (dom, log) = dump_dom(page);
        assert!(
            dom.contains("data-script=\"ok\""),
            "the page's script did not finish: {log}"
        );
        // The attribute, not the script's own text, which names it too.
        assert!(!dom.contains("data-script-errors=\""), "{log}");
        assert!(
            console_errors(&log).is_empty(),
            "{:?}",
            console_errors(&log)
        );
        // The hostile text is in the page as escaped text (so "data-pwned" is in the DOM as
        // characters); had it run, the body element would carry the attribute.
        let body_at = dom.find("<body").expect("a body");
        let body_tag = &dom[body_at..body_at + dom[body_at..].find('>').unwrap()];
        assert!(!body_tag.contains("data-pwned"), "model text ran as markup");
        assert!(
            !dom.contains("<img src=\"x\""),
            "model text became an element"
        );
        // The evaluation table: after SFT and each stage.
        let table_at = dom.find("<table class=\"evals\">").expect("the table");
        let table = &dom[table_at..table_at + dom[table_at..].find("</table>").unwrap()];
        for phase in ["sft", "stage short", "stage long", "stage hard"] {
            assert!(table.contains(&format!("<td>{phase}</td>")), "{table}");
        }
        // Plots: inline SVG with a drawn series.
        assert!(dom.contains("<figure class=\"plot\" data-chart=\"reward\">"));
        assert!(
            dom.matches("<svg").count() >= 8,
            "SFT loss and seven RL charts"
        );
        assert!(dom.contains("class=\"series\""));
        assert_plots_are_legible(&dom, &log);
        // Trajectories: one with a tool call and its output, entropy shading.
        assert!(dom.contains("<details class=\"traj"), "a trajectory");
        assert!(dom.contains("▶ tool call 0: python"), "a tool call");
        assert!(dom.contains("<pre class=\"tool "), "a tool output");
        assert!(dom.contains("class=\"tok\" style=\"background:rgba("));
        assert!(dom.contains("interactive: filters and expand buttons ready"));
    }
    let (dom, _) = dump_dom(&hostile_page);
    assert!(dom.contains("&lt;script&gt;document.body.setAttribute"));
}

#[test]
fn a_damaged_run_directory_gives_a_report_that_says_what_is_missing() {
    let run = smoke_run();
    let dir = tempfile::tempdir().unwrap();
    let damaged = dir.path().join("damaged");
    copy_run(run, &damaged);
    std::fs::remove_file(damaged.join("samples.jsonl")).unwrap();
    std::fs::remove_file(damaged.join("config.json")).unwrap();
    // metrics.jsonl cut in the middle of its fourth line, eval.jsonl with a line of garbage.
    let metrics = std::fs::read_to_string(damaged.join("metrics.jsonl")).unwrap();
    let cut: usize = metrics.lines().take(3).map(|l| l.len() + 1).sum::<usize>() + 40;
    std::fs::write(damaged.join("metrics.jsonl"), &metrics[..cut]).unwrap();
    let mut evals = std::fs::read_to_string(damaged.join("eval.jsonl")).unwrap();
    evals.push_str("not json\n");
    std::fs::write(damaged.join("eval.jsonl"), evals).unwrap();

    let (ok, stdout, stderr) = rstar(&["report", damaged.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    let page = damaged.join("report.html");
    assert_eq!(stdout.trim(), page.display().to_string());
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("Missing or unreadable"));
    assert!(html.contains("samples.jsonl is missing"), "{stderr}");
    assert!(html.contains("config.json is missing"));
    assert!(
        html.contains("metrics.jsonl: 1 unreadable line(s), skipped (line 4: truncated"),
        "{stderr}"
    );
    assert!(html.contains("eval.jsonl: 1 unreadable line(s), skipped (line 5:"));
    // What could be read is still there: three RL steps in the plots, the four evaluations.
    assert!(html.contains("<figure class=\"plot\" data-chart=\"reward\">"));
    assert_eq!(html.matches("<td>stage ").count(), 3);
    assert!(html.contains("No sampled trajectories"));
    assert!(stderr.contains("samples.jsonl is missing"), "{stderr}");

    // An empty directory is a report too (a run that has not written anything yet).
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let (ok, _, stderr) = rstar(&["report", empty.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    let html = std::fs::read_to_string(empty.join("report.html")).unwrap();
    for f in [
        "config.json",
        "metrics.jsonl",
        "eval.jsonl",
        "samples.jsonl",
    ] {
        assert!(html.contains(&format!("{f} is missing")), "{f}");
    }
    // Issue 70: a path that is no run directory, first or second, with or without --out, is
    // an error naming it (scripts can trust the exit code), and no page is written.
    let out = dir.path().join("gone.html");
    let gone = dir.path().join("gone");
    let (gone_s, empty_s, out_s) = (
        gone.to_str().unwrap(),
        empty.to_str().unwrap(),
        out.to_str().unwrap(),
    );
    for args in [
        &["report", gone_s][..],
        &["report", gone_s, "--out", out_s],
        &["report", empty_s, gone_s, "--out", out_s],
    ] {
        let (ok, _, stderr) = rstar(args);
        assert!(!ok, "{args:?}");
        assert!(
            stderr.contains(&format!("{gone_s}: no such run directory")),
            "{stderr}"
        );
        assert!(!out.exists());
    }
}

#[test]
fn two_runs_are_compared_roc_against_no_roc() {
    let run = smoke_run();
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("ablation");
    copy_run(run, &other);
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(other.join("config.json")).unwrap()).unwrap();
    config["rl"]["roc"] = Value::Bool(false);
    std::fs::write(other.join("config.json"), config.to_string()).unwrap();
    let out = dir.path().join("compare.html");
    let (ok, _, stderr) = rstar(&[
        "report",
        run.to_str().unwrap(),
        other.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{stderr}");
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(html.contains(
        "<section id=\"comparison\"><h2>Comparison: run (RoC) vs ablation (no RoC)</h2>"
    ));
    let compare_at = html.find("<table class=\"compare\">").unwrap();
    let table = &html[compare_at..compare_at + html[compare_at..].find("</table>").unwrap()];
    assert_eq!(table.matches("<tr><td>").count(), 4, "{table}");
    // The overlaid reward chart has a series per run.
    let chart_at = html.find("data-chart=\"compare_reward\"").unwrap();
    let chart = &html[chart_at..chart_at + html[chart_at..].find("</figure>").unwrap()];
    assert_eq!(chart.matches("class=\"series\"").count(), 2, "{chart}");
    assert!(chart.contains("data-name=\"ablation (no RoC)\""));
}

/// Issue 39 at the paper's scale of the problem: 160 RL steps, two stage boundaries four steps
/// apart, the scheduled driver's summed tool seconds (2,500 s) against 30-second steps.
#[test]
fn issue_39_a_long_scheduled_run_has_round_ticks_clear_labels_and_a_wall_clock_time_split() {
    let run = smoke_run();
    let dir = tempfile::tempdir().unwrap();
    let long = dir.path().join("long");
    copy_run(run, &long);
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(long.join("config.json")).unwrap()).unwrap();
    config["rl"]["rollout_driver"] = Value::String("scheduled".into());
    std::fs::write(long.join("config.json"), config.to_string()).unwrap();
    let first: Value = serde_json::from_str(
        std::fs::read_to_string(long.join("metrics.jsonl"))
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    let mut metrics = String::new();
    for step in 1..=160u64 {
        let mut line = first.clone();
        let (stage, name) = match step {
            ..=60 => (0, "short"),
            61..=64 => (1, "long"),
            _ => (2, "hard"),
        };
        line["step"] = step.into();
        line["stage"] = stage.into();
        line["stage_name"] = name.into();
        line["decision"] = match step {
            60 => "advance to `long`".into(),
            64 => "advance to `hard` (optimizer reset)".into(),
            160 => "finish".into(),
            _ => "stay".into(),
        };
        line["time_rollout"] = 20.0.into();
        line["time_tools"] = 2500.0.into();
        line["time_update"] = 8.0.into();
        line["time_step"] = 30.0.into();
        metrics.push_str(&format!("{line}\n"));
    }
    std::fs::write(long.join("metrics.jsonl"), metrics).unwrap();
    let (ok, _, stderr) = rstar(&["report", long.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    let (dom, log) = dump_dom(&long.join("report.html"));
    assert!(dom.contains("data-script=\"ok\""), "{log}");
    assert_plots_are_legible(&dom, &log);
    let reward = figure(&dom, "reward");
    assert_eq!(
        texts(reward, "xtick"),
        ["20", "40", "60", "80", "100", "120", "140", "160"]
    );
    assert_eq!(texts(reward, "vlabel").len(), 2);
    // The time split: wall-clock parts that add up to the step (20 + 8 + 2 = 30 s, on an axis
    // to 30), and no series of the summed tool seconds.
    let time = figure(&dom, "step_time");
    let names: Vec<&str> = time
        .match_indices("class=\"series\" data-name=\"")
        .map(|(i, m)| {
            let rest = &time[i + m.len()..];
            &rest[..rest.find('"').unwrap()]
        })
        .collect();
    assert_eq!(
        names,
        [
            "rollout (tools overlapped)",
            "update",
            "other (logging, checkpoints)"
        ]
    );
    assert_eq!(texts(time, "ytick").last(), Some(&"30"), "{time}");
}
