//! The spawn-per-call backend as the oracle: both backends agree on a table
//! of snippets.

use rstar_toolenv::{Backend, BlockingPool, ToolCall};

use super::common::builder;

#[test]
fn spawn_and_zygote_backends_agree() {
    let calls = vec![
        ToolCall::python("print(sum(i * i for i in range(100)))", ""),
        ToolCall::python("print(input()[::-1])", "abc"),
        ToolCall::python("x = [1, 2]\nx[5]", ""),
        ToolCall::python(
            "import fractions\nfractions.Fraction(1, 3) + fractions.Fraction(1, 6)",
            "",
        ),
        ToolCall::python("import sys\nprint('out')\nsys.exit(2)", ""),
        ToolCall::python("pass", ""),
        ToolCall::jupyter("y", vec!["y = 7".into()]),
    ];
    let spawn = BlockingPool::new(
        builder()
            .backend(Backend::Spawn)
            .preload(Vec::<String>::new()),
    )
    .unwrap();
    let zygote = BlockingPool::new(builder()).unwrap();
    let a = spawn.run_batch(calls.clone());
    let b = zygote.run_batch(calls.clone());
    for ((call, a), b) in calls.iter().zip(&a).zip(&b) {
        assert_eq!(
            (a.outcome, &a.stdout, &a.stderr, a.exit_code),
            (b.outcome, &b.stdout, &b.stderr, b.exit_code),
            "{call:?}"
        );
    }
    assert_eq!(a[0].stdout, "328350\n");
    assert_eq!(a[3].stdout, "Fraction(1, 2)\n");
    assert!(spawn.pool().stray_processes().is_empty());
}
