//! Tool calls in a chat turn's text, returned as OpenAI `tool_calls` (what vLLM's Hermes parser does).

use rstar_engine::wire;
use rstar_episode::chat::Json;
use serde::Deserialize;

/// One function call the model wrote.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct FunctionCall {
    /// `call_…`, unique within the response.
    pub id: String,
    /// The function's name.
    pub name: String,
    /// The arguments as a JSON string (Python's separators, key order kept, as vLLM writes it).
    pub arguments: String,
}

impl FunctionCall {
    /// The call in OpenAI's layout; `index` is set in stream deltas only.
    pub fn to_wire(&self, index: Option<usize>) -> wire::ToolCall {
        wire::ToolCall {
            index,
            id: self.id.clone(),
            kind: "function".into(),
            function: wire::FunctionCall {
                name: self.name.clone(),
                arguments: self.arguments.clone(),
            },
        }
    }
}

/// A turn read for tool calls: the content before the first `<tool_call>`, and the calls.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ToolTurn {
    /// The text before the first call (may be empty).
    pub content: String,
    /// The calls in order (at least one).
    pub calls: Vec<FunctionCall>,
}

/// A Hermes call body: `{"name": …, "arguments": …}`.
#[derive(Deserialize)]
struct Block {
    name: String,
    arguments: Json,
}

/// Reads the Hermes `<tool_call>{"name", "arguments"}</tool_call>` blocks of a chat turn (split
/// by [`rstar_episode::toolcall::hermes_blocks`]) as vLLM's `hermes` tool parser does: `None`
/// when there is no block, or when any block fails to decode (the text then stays content, as
/// vLLM leaves it). An unterminated last block counts when its JSON is whole (a turn cut by a
/// stop string). `arguments` may be a JSON object (written with Python's separators) or a JSON
/// string (taken as it is). `id_of(k)` names call `k`.
pub(super) fn parse(text: &str, id_of: impl Fn(usize) -> String) -> Option<ToolTurn> {
    let start = text.find("<tool_call>")?;
    let calls = rstar_episode::toolcall::hermes_blocks(text)
        .into_iter()
        .enumerate()
        .map(|(k, block)| {
            let body = block.unwrap_or_else(|rest| rest);
            let block: Block = serde_json::from_str(body.trim()).ok()?;
            Some(FunctionCall {
                id: id_of(k),
                name: block.name,
                arguments: match block.arguments {
                    Json::String(s) => s,
                    other => other.to_python_json(),
                },
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(ToolTurn {
        content: text[..start].to_string(),
        calls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expected: Option<(&str, &[(&str, &str)])>) {
        let got = parse(text, |k| format!("call_{k}"));
        let expected = expected.map(|(content, calls)| ToolTurn {
            content: content.to_string(),
            calls: calls
                .iter()
                .enumerate()
                .map(|(k, (name, arguments))| FunctionCall {
                    id: format!("call_{k}"),
                    name: name.to_string(),
                    arguments: arguments.to_string(),
                })
                .collect(),
        });
        assert_eq!(got, expected, "{text}");
    }

    #[test]
    fn issue_44_hermes_tool_calls_as_vllm_reads_them() {
        // No call: plain content.
        check("The answer is 4.", None);
        // One call, object arguments re-written with Python's separators in their order.
        check(
            "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\",\"unit\":\"c\"}}\n</tool_call>",
            Some((
                "",
                &[("get_weather", "{\"city\": \"Paris\", \"unit\": \"c\"}")],
            )),
        );
        // Text before the first call is content; two calls in order; string arguments as given.
        check(
            "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": \"{\\\"x\\\": 1}\"}\n</tool_call>",
            Some(("Let me check.\n", &[("a", "{}"), ("b", "{\"x\": 1}")])),
        );
        // Non-ASCII stays as written.
        check(
            "<tool_call>{\"name\": \"f\", \"arguments\": {\"q\": \"é\"}}</tool_call>",
            Some(("", &[("f", "{\"q\": \"é\"}")])),
        );
        // An unterminated block whose JSON is whole still counts.
        check(
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": 2}}\n",
            Some(("", &[("f", "{\"n\": 2}")])),
        );
        // Any undecodable block leaves the whole turn as content.
        check("<tool_call>\n{\"name\": \"f\", \"argu", None);
        check("<tool_call>{\"name\": \"f\"}</tool_call>", None);
        check(
            "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call><tool_call>not json</tool_call>",
            None,
        );
        check(
            "<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>",
            None,
        );
    }

    #[test]
    fn issue_44_calls_in_openai_layout() {
        let call = FunctionCall {
            id: "call_1".into(),
            name: "f".into(),
            arguments: "{\"x\": 1}".into(),
        };
        let json = |index| serde_json::to_value(call.to_wire(index)).unwrap();
        assert_eq!(
            json(None),
            serde_json::json!({"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}})
        );
        assert_eq!(json(Some(2))["index"], 2);
    }
}
