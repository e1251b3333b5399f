//! The two reference tools on the shared pool: stdin, Jupyter replay, the
//! trailing-expression rule and the reference's error text.

use rstar_toolenv::{Outcome, ResponseFormat, ToolCall};

use super::common::{exclusive, pool};

fn run(call: ToolCall) -> rstar_toolenv::ToolResult {
    let _guard = exclusive();
    pool().run(call)
}

/// One case: code, stdin, expected outcome, stdout and stderr.
fn check(code: &str, input: &str, outcome: Outcome, stdout: &str, stderr: &str) {
    let r = run(ToolCall::python(code, input));
    assert_eq!(
        (r.outcome, r.stdout.as_str(), r.stderr.as_str()),
        (outcome, stdout, stderr),
        "code: {code:?}"
    );
}

#[test]
fn python_with_standard_io_table() {
    // Expected texts follow the reference template's rules, written out by hand.
    check("print(int(input()) + 1)", "41", Outcome::Output, "42\n", "");
    check(
        "import sys\nprint(sum(map(int, sys.stdin.read().split())))",
        "1 2\n3\n",
        Outcome::Output,
        "6\n",
        "",
    );
    check("x = 5", "", Outcome::NoOutput, "", "");
    check("x = 5\nx * 2", "", Outcome::Output, "10\n", "");
    check("'a' + 'b'", "", Outcome::Output, "'ab'\n", "");
    check("print('shown')\nNone", "", Outcome::Output, "shown\n", "");
    // The reference offsets the line number of a failing trailing expression
    // but looks it up in the expression alone, so the line is usually lost.
    check(
        "x = 1\n1/0",
        "",
        Outcome::Error,
        "",
        "ZeroDivisionError: division by zero\n",
    );
    check(
        "1/0",
        "",
        Outcome::Error,
        "",
        "ZeroDivisionError at line 1: division by zero\n  1/0\n",
    );
    check(
        "y = undefined_name + 1\nprint(y)",
        "",
        Outcome::Error,
        "",
        "NameError at line 1: name 'undefined_name' is not defined\n  y = undefined_name + 1\n",
    );
    check(
        "def f(:\n  pass",
        "",
        Outcome::Error,
        "",
        "SyntaxError at line 1: invalid syntax (<unknown>, line 1)\n  def f(:\n",
    );
    check(
        "import sys\nsys.stderr.write('warn\\n')\nprint('ok')",
        "",
        Outcome::Output,
        "ok\n",
        "warn\n",
    );
    check(
        "print(input())",
        "",
        Outcome::Error,
        "",
        "EOFError at line 1: EOF when reading a line\n  print(input())\n",
    );
}

#[test]
fn jupyter_replays_history_silently() {
    let history = vec![
        "import math\nx = 40\nprint('not shown')".to_string(),
        "1/0".to_string(),
        "x += 2".to_string(),
    ];
    let r = run(ToolCall::jupyter("print(math.gcd(x, 6))\nx", history));
    assert_eq!(
        (r.outcome, r.stdout.as_str(), r.stderr.as_str()),
        (Outcome::Output, "6\n42\n", ""),
        "{r:?}"
    );
    let r = run(ToolCall::jupyter("undefined", vec!["x = 1".into()]));
    assert_eq!(r.outcome, Outcome::Error);
    assert_eq!(
        r.stderr,
        "NameError at line 1: name 'undefined' is not defined\n  undefined\n"
    );
}

#[test]
fn tool_text_matches_the_reference_layout() {
    let r = run(ToolCall::python("print('hi')", ""));
    let text = r.text(&ResponseFormat::new());
    let expected = format!(
        "Tool call success\nstdout: hi\n\nexecution time: {:.2}s",
        r.cost
    );
    assert_eq!(text, expected);
    let r = run(ToolCall::python("1/0", ""));
    assert!(
        r.text(&ResponseFormat::new())
            .starts_with("Tool call failure\nreason: \nstderr: ZeroDivisionError at line 1")
    );
}

#[test]
fn calls_do_not_share_state() {
    let _guard = exclusive();
    let first = pool().run(ToolCall::python("import os\nos.environ['LEAK'] = '1'\nopen('f', 'w').write('x')\nimport builtins\nbuiltins.leak = 1", ""));
    assert_eq!(first.outcome, Outcome::NoOutput, "{first:?}");
    for _ in 0..3 {
        let r = pool().run(ToolCall::python("import os, builtins\nprint(os.environ.get('LEAK'), os.path.exists('f'), hasattr(builtins, 'leak'))", ""));
        assert_eq!(r.stdout, "None False False\n", "{r:?}");
    }
}
