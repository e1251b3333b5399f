//! End-to-end tests of `rstar verify serve`: OpenRLHF's remote reward-model request and the
//! batch route score as `rstar verify` does, behind a bearer token.

use rstar_testdata::http;

use super::common::Listening;

fn server(token: Option<&str>) -> Listening {
    let mut cmd = super::common::command();
    cmd.args(["verify", "serve", "--port", "0"]);
    if let Some(t) = token {
        cmd.args(["--token", t]);
    }
    Listening::start(&mut cmd)
}

#[test]
fn get_reward_speaks_openrlhf_and_needs_the_token() {
    let server = server(Some("s3cret"));
    let url = server.addr.clone();
    // OpenRLHF's body: each query is the prompt and the response decoded together.
    let body = serde_json::json!({
        "query": [
            "<|im_start|>user\nWhat is 6*7? Put it in \\boxed{}.<|im_end|>\n<|im_start|>assistant\nIt is \\boxed{42}.<|im_end|>",
            "<|im_start|>user\nWhat is 6*7? Put it in \\boxed{}.<|im_end|>\n<|im_start|>assistant\nIt is \\boxed{41}.<|im_end|>",
            "<|im_start|>user\nHalf?<|im_end|>\n<|im_start|>assistant\n$\\boxed{\\frac{2}{4}}$",
            "no prompt here: \\boxed{B}",
        ],
        "prompts": [
            "<|im_start|>user\nWhat is 6*7? Put it in \\boxed{}.<|im_end|>\n<|im_start|>assistant\n",
            "<|im_start|>user\nWhat is 6*7? Put it in \\boxed{}.<|im_end|>\n<|im_start|>assistant\n",
            "<|im_start|>user\nHalf?<|im_end|>\n<|im_start|>assistant\n",
            "something else",
        ],
        "labels": ["42", 42, "\\frac{1}{2}", "B"],
    })
    .to_string();
    let (status, text) = http(&url, "POST", "/get_reward", &body, Some("s3cret"));
    assert_eq!(status, 200, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        v["rewards"],
        serde_json::json!([1.0, 0.0, 1.0, 1.0]),
        "{text}"
    );
    assert_eq!(v["scores"], v["rewards"]);

    assert_eq!(http(&url, "POST", "/get_reward", &body, None).0, 401);
    assert_eq!(
        http(&url, "POST", "/get_reward", &body, Some("wrong")).0,
        401
    );
    assert_eq!(http(&url, "GET", "/ping", "", None).0, 200);

    let (status, text) = http(
        &url,
        "POST",
        "/get_reward",
        r#"{"query": ["x"]}"#,
        Some("s3cret"),
    );
    assert_eq!(status, 400);
    assert!(text.contains("labels"), "{text}");
    let (status, text) = http(
        &url,
        "POST",
        "/get_reward",
        r#"{"query": ["x", "y"], "labels": ["1"]}"#,
        Some("s3cret"),
    );
    assert_eq!(status, 400);
    assert!(
        text.contains("`labels` has 1 items but `query` has 2"),
        "{text}"
    );
    assert_eq!(
        http(&url, "POST", "/get_reward", "{oops", Some("s3cret")).0,
        400
    );

    let (ok, rest) = server.stop("TERM");
    assert!(ok, "{rest}");
    assert!(rest.contains("stopped"), "{rest}");
}

#[test]
fn score_route_gives_verdicts_like_rstar_verify() {
    let server = server(None);
    let url = server.addr.clone();
    let rows = [
        ("<answer>so $\\boxed{1{,}024}$</answer>", "1024"),
        ("\\boxed{4200}", "42"),
        ("\\boxed{3} or \\boxed{5}", "5"),
        ("I give up", "7"),
    ];
    let body = serde_json::json!({
        "responses": rows.iter().map(|r| r.0).collect::<Vec<_>>(),
        "answers": rows.iter().map(|r| r.1).collect::<Vec<_>>(),
        "mode": "integer",
    })
    .to_string();
    let (status, text) = http(&url, "POST", "/score", &body, None);
    assert_eq!(status, 200, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();

    // The same rows through `rstar verify` (the CLI's JSONL path).
    let input: String = rows
        .iter()
        .map(|(r, a)| serde_json::json!({"response": r, "answer": a}).to_string() + "\n")
        .collect();
    let cli = super::common::run(&["verify"], Some(input.as_bytes()), &[]);
    assert_eq!(cli.code, 0, "{}", cli.stderr);
    for (i, line) in cli.out().lines().enumerate() {
        let want: serde_json::Value = serde_json::from_str(line).unwrap();
        let got = &v["verdicts"][i];
        for field in ["reward", "reason", "extracted", "normalized"] {
            assert_eq!(got[field], want[field], "row {i} field {field}: {text}");
        }
        assert_eq!(v["rewards"][i].as_f64(), want["reward"].as_f64());
    }

    // A ground truth the mode cannot score is that item's error, not the request's.
    let body = r#"{"responses": ["\\boxed{1}", "\\boxed{1}"], "answers": ["1/2", "1"], "mode": "integer"}"#;
    let (status, text) = http(&url, "POST", "/score", body, None);
    assert_eq!(status, 200, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(
        v["verdicts"][0]["error"]
            .as_str()
            .unwrap()
            .contains("not an integer"),
        "{text}"
    );
    assert_eq!(v["rewards"], serde_json::json!([0.0, 1.0]));
    let (status, text) = http(
        &url,
        "POST",
        "/score",
        r#"{"responses": [], "answers": [], "mode": "exact"}"#,
        None,
    );
    assert_eq!(status, 400);
    assert!(text.contains("mode"), "{text}");
}
