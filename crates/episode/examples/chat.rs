//! A function-calling conversation (OpenAI layout: two tool calls, two tool results) rendered
//! as Qwen3's chat template renders it, with the spans `rstar sft` trains on marked, then a
//! bad row and the field its error names. No model, no tokenizer.
//!
//! `cargo run -p rstar-episode --example chat`

use rstar_episode::chat::{ChatFormat, Conversation, Json};

fn main() {
    let row = r#"{
      "messages": [
        {"role": "user", "content": "Is it warmer in Oslo or in Lima?"},
        {"role": "assistant", "content": null, "tool_calls": [
          {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}},
          {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Lima\"}"}}]},
        {"role": "tool", "content": "4"},
        {"role": "tool", "content": "22"},
        {"role": "assistant", "content": "Lima, at 22 °C."}],
      "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    }"#;
    let conv = Conversation::from_json(&Json::parse(row).expect("the row is JSON"))
        .expect("the row is a conversation");
    let rendered = ChatFormat::Qwen3.render(&conv);
    // Trained text in [[ ]].
    let mut marked = String::new();
    let mut at = 0;
    for span in &rendered.assistant {
        marked.push_str(&rendered.text[at..span.start]);
        marked.push_str("[[");
        marked.push_str(&rendered.text[span.clone()]);
        marked.push_str("]]");
        at = span.end;
    }
    marked.push_str(&rendered.text[at..]);
    println!("{marked}");

    let bad = r#"{"messages": [{"role": "assistant", "tool_calls": [{"name": "f", "arguments": "{oops"}]}]}"#;
    let err = Conversation::from_json(&Json::parse(bad).expect("the row is JSON"))
        .expect_err("its arguments are not JSON");
    println!("a bad row: {err}");
}
