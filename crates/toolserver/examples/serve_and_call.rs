//! Starts a pool behind a local server, calls it through the batching client
//! and through SandboxFusion's `/run_code`, prints the results, and shuts
//! down gracefully.
//!
//! `cargo run -p rstar-toolserver --example serve_and_call` (uses
//! `$RSTAR_PYTHON`, else `python3`).

use rstar_toolenv::Pool;
use rstar_toolserver::api::{RunCodeRequest, Submission};
use rstar_toolserver::{Client, ServerBuilder, ServerConfig};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let python = std::env::var("RSTAR_PYTHON").unwrap_or_else(|_| "python3".into());
    let pool = Pool::builder()
        .python(python)
        .workers(2)
        .preload(["sympy"])
        .build()?;
    pool.ready().await?;
    let server = ServerBuilder::new()
        .config(ServerConfig::local())
        .serve(pool)
        .await?;
    println!("serving on {}", server.url());

    let client = Client::builder().endpoint(server.url()).build()?;
    let calls = vec![
        Submission::python("import sympy\nprint(sympy.factorint(2**32 + 1))").with_sub_id("factor"),
        Submission::python("print(sum(map(int, input().split())))")
            .with_input("1 2 3 4")
            .with_expected_output("10")
            .with_sub_id("sum"),
        Submission::python("1/0").with_sub_id("error"),
    ];
    for r in client.run_batch(calls).await {
        println!(
            "{:>7}: success={} run_success={} reason={:?} cost={:.3}s stdout={:?} stderr={:?}",
            r.sub_id,
            r.success,
            r.run_success,
            r.reason.as_str(),
            r.cost,
            r.stdout.unwrap_or_default(),
            r.stderr.unwrap_or_default().lines().next().unwrap_or("")
        );
    }
    let fusion = client
        .run_code(&RunCodeRequest::python("print('hello from /run_code')"))
        .await?;
    println!("/run_code: {}", serde_json::to_string(&fusion)?);
    println!("status: {:?}", client.status(0).await?);
    server.shutdown().await?;
    Ok(())
}
