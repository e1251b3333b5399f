//! Runs a few snippets through a sandboxed pool and prints the isolation
//! report and each tool response: `cargo run -p rstar-toolenv --example run_snippets [PYTHON]`.

use rstar_toolenv::{BlockingPool, Pool, ToolCall};

fn main() -> anyhow::Result<()> {
    let python = std::env::args().nth(1).unwrap_or_else(|| "python3".into());
    let pool = BlockingPool::new(Pool::builder().python(python).workers(2))?;
    if let Some(report) = pool.pool().report() {
        println!("{report}");
    }
    let calls = vec![
        ToolCall::python("print(sum(range(10)))", ""),
        ToolCall::python("a, b = map(int, input().split())\nprint(a * b)", "6 7"),
        ToolCall::python("1/0", ""),
        ToolCall::jupyter("x * 2", vec!["x = 21".into()]),
        ToolCall::python(
            "import socket\nsocket.create_connection(('1.1.1.1', 80))",
            "",
        ),
    ];
    for (call, result) in calls.iter().zip(pool.run_batch(calls.clone())) {
        println!("--- {}\n{}\n", call.code, result.text(pool.pool().format()));
    }
    Ok(())
}
