//! End-to-end tests of `rstar tools run` and `rstar tools doctor`.

use serde_json::Value;

fn rstar(args: &[&str], input: &str) -> (i32, String, String) {
    let python = rstar_testdata::python();
    let r = super::common::run(
        &[&["tools"], args].concat(),
        Some(input.as_bytes()),
        &[("RSTAR_PYTHON", python.as_os_str())],
    );
    (r.code, r.out(), r.stderr)
}

#[test]
fn run_writes_one_result_per_line_in_input_order() {
    let input = [
        r#"{"code": "import time\ntime.sleep(0.5)\nprint('slow')"}"#,
        r#"{"code": "print(int(input()) * 2)", "input": "21"}"#,
        "not json",
        r#"{"code": "while True:\n    pass"}"#,
        r#"{"code": "open('/etc/passwd', 'a').write('x')"}"#,
        "",
        r#"{"tool": "jupyter_code", "code": "x + 1", "history": ["x = 41"]}"#,
    ]
    .join("\n");
    let (code, stdout, stderr) = rstar(
        &[
            "run",
            "--workers",
            "2",
            "--timeout",
            "1",
            "--no-progress",
            "--preload",
            "",
        ],
        &input,
    );
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let outcomes: Vec<&str> = lines
        .iter()
        .map(|v| v["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        [
            "output",
            "output",
            "invalid_input",
            "timeout",
            "error",
            "output"
        ],
        "{stdout}"
    );
    assert_eq!(lines[0]["stdout"], "slow\n");
    assert_eq!(lines[1]["stdout"], "42\n");
    assert!(
        lines[2]["message"]
            .as_str()
            .unwrap()
            .starts_with("line 3: ")
    );
    assert_eq!(lines[3]["reason"], "worker_timeout");
    assert!(
        lines[4]["stderr"]
            .as_str()
            .unwrap()
            .starts_with("PermissionError"),
        "{}",
        lines[4]
    );
    assert_eq!(lines[5]["stdout"], "42\n");
    assert!(
        lines[1]["text"]
            .as_str()
            .unwrap()
            .starts_with("Tool call success\nstdout: 42\n\nexecution time: ")
    );
    assert!(
        stderr.contains("6 calls: 3 succeeded, 2 failed, 1 invalid"),
        "{stderr}"
    );
}

#[test]
fn run_reads_a_file_and_reports_a_missing_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("calls.jsonl");
    std::fs::write(&path, "{\"code\": \"print(7)\"}\n").unwrap();
    let (code, stdout, _) = rstar(
        &[
            "run",
            path.to_str().unwrap(),
            "--workers",
            "1",
            "--preload",
            "",
        ],
        "",
    );
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["stdout"], "7\n");
    let (code, _, stderr) = rstar(&["run", "/nonexistent/calls.jsonl", "--preload", ""], "");
    assert_ne!(code, 0);
    assert!(stderr.contains("/nonexistent/calls.jsonl"), "{stderr}");
}

#[test]
fn doctor_reports_the_layers_and_blocks_every_probe() {
    let (code, stdout, stderr) = rstar(&["doctor", "--preload", ""], "");
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    for layer in [
        "network",
        "filesystem",
        "environment",
        "processes",
        "limits",
        "output",
        "cleanup",
    ] {
        assert!(
            stdout.lines().any(|l| l.starts_with(layer)),
            "{layer} missing from\n{stdout}"
        );
    }
    assert!(!stdout.contains("ESCAPED"), "{stdout}");
    for probe in [
        "network",
        "write-outside",
        "etc-shadow",
        "parent-environ",
        "environment",
        "fork-limit",
        "cleanup",
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.trim_start().starts_with(probe) && l.contains("blocked")),
            "{probe}: {stdout}"
        );
    }
}
