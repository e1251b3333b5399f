//! `rstar_train::tools`: code-judge servers as the rollouts' tools, and the choice between
//! them and the in-process sandbox.

use rstar_episode::toolcall::{OutcomeKind, ToolCall, ToolName};
use rstar_rollout::scheduled::AsyncTools;
use rstar_rollout::tools::{ToolOptions, VerifyAt};
use rstar_train::tools::{RunTools, ServerTools};

#[test]
fn server_tools_refuse_notebook_calls_and_report_unreachable_servers_as_tool_errors() {
    assert!(ServerTools::connect(&[]).is_err());
    // Nothing listens on port 9: the client's retries run out and the call is an error
    // outcome (the rollout goes on), never a hang or a panic.
    let tools = ServerTools::connect(&["http://127.0.0.1:9".to_string()]).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let notebook = ToolCall {
        name: ToolName::JupyterCode,
        code: "x = 1".into(),
        input: String::new(),
    };
    let refused = rt.block_on(tools.run(notebook, Vec::new()));
    assert_eq!(refused.kind, OutcomeKind::Error);
    assert!(
        refused
            .text
            .contains("jupyter_code needs the in-process sandbox"),
        "{}",
        refused.text
    );
    let failed = rt.block_on(tools.run(ToolCall::python("print(1)"), Vec::new()));
    assert_eq!(failed.kind, OutcomeKind::Error, "{}", failed.text);
    assert!(failed.text.contains("internal_error"), "{}", failed.text);
    // Dropped on another runtime's thread without panicking.
    rt.block_on(async move { drop(tools) });
}

#[test]
fn remote_verification_without_servers_is_refused_naming_the_key() {
    let options = ToolOptions {
        python: "python3".into(),
        workers: 1,
        timeout_secs: 1.0,
        servers: Vec::new(),
        latency_budget_secs: None,
    };
    let err = RunTools::start_verifying(&options, VerifyAt::Remote).unwrap_err();
    assert!(err.to_string().contains("`rl.verify`"), "{err}");
    assert!(err.to_string().contains("--tools"), "{err}");
    // With servers, remote verification is on; it needs no server to answer yet.
    let options = ToolOptions {
        servers: vec!["http://127.0.0.1:9".into()],
        ..options
    };
    let tools = RunTools::start_verifying(&options, VerifyAt::Remote).unwrap();
    assert!(tools.verifies());
    assert!(tools.async_tools().verifies());
    let err = ServerTools::connect(&[]).unwrap_err();
    assert!(err.to_string().contains("tools.servers"), "{err}");
}

#[test]
fn a_verification_the_servers_cannot_answer_is_a_tools_error() {
    let tools = ServerTools::connect(&["http://127.0.0.1:9".to_string()])
        .unwrap()
        .verifying(true);
    let err = tools
        .verify_round(vec![rstar_verifier::VerifyItem::new(
            "\\boxed{1}",
            "1",
            rstar_verifier::Mode::Integer,
        )])
        .unwrap_err();
    assert!(matches!(err, rstar_rollout::Error::Tools(_)), "{err:?}");
    assert!(err.to_string().starts_with("tools: "), "{err}");
}
