//! Prompt templates: how a problem, tool calls and tool responses are written as text.
//!
//! [`TemplateFormat::ChatMl`] is the reference rStar2-Agent layout (the paper's Fig. 3 prompt,
//! Qwen's ChatML with the tool schema in the system turn, Hermes tool calls, `<reason>` opening
//! every assistant turn, the final answer as `<answer> … \boxed{N} … </answer>`).
//! [`TemplateFormat::Compact`] has the same semantics in a few characters, for tiny
//! character-level models whose whole sequence is a few hundred characters:
//!
//! ```text
//! Q:What is 123 * 456?          ← prompt (ends with "\nA:")
//! A:Multiply.<c>print(123*456)</c>
//! O:56088                       ← tool response (masked out of the loss)
//! A:<answer>\boxed{56088}</answer>
//! ```

use serde::{Deserialize, Serialize};

use crate::toolcall::{
    self, COMPACT_CLOSE, COMPACT_OPEN, OutcomeKind, ParsedCall, ToolCall, ToolName, ToolOutcome,
};

/// Which markup a [`Template`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TemplateFormat {
    /// The reference ChatML layout with Hermes JSON tool calls.
    ChatMl,
    /// The short layout for character-level models: `Q:`/`A:`/`O:` lines, `<c>code</c>` calls.
    Compact,
}

impl TemplateFormat {
    /// The tags that open and close a tool call in an assistant turn: `<tool_call>` and
    /// `</tool_call>` in ChatML, `<c>` and `</c>` in the compact layout.
    ///
    /// ```
    /// use rstar_episode::template::TemplateFormat;
    /// assert_eq!(TemplateFormat::Compact.call_tags(), ("<c>", "</c>"));
    /// ```
    pub fn call_tags(self) -> (&'static str, &'static str) {
        match self {
            TemplateFormat::ChatMl => ("<tool_call>", "</tool_call>"),
            TemplateFormat::Compact => (COMPACT_OPEN, COMPACT_CLOSE),
        }
    }
}

/// The system prompt of the paper's Fig. 3, before the tool list.
const SYSTEM_PREAMBLE: &str = "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The Assistant first thinks about the reasoning process in the mind and then provides the user with the answer. The reasoning process and answer are enclosed within <reason> </reason> and <answer> </answer> tags, respectively, i.e., <reason> reasoning process here </reason><answer> answer here </answer>.";

/// The user-turn instruction of the paper's Fig. 3, before the problem.
const USER_PREAMBLE: &str = "You must put your answer inside <answer> </answer> tags, i.e., <answer> answer here </answer>. And your final answer will be extracted automatically by the \\boxed{} tag.\nThis is the problem:\n";

const PYTHON_SCHEMA: &str = r#"{"type": "function", "function": {"name": "python_code_with_standard_io", "description": "Execute Python code with standard input and capture standard output. This function takes a Python code string and an input string, provides the input string through standard input (stdin) to the code, and captures and returns any output produced through standard output (stdout). If the executed code raises an exception, the error message will be captured and returned instead.", "parameters": {"type": "object", "properties": {"code": {"type": "string", "description": "A string containing Python code to be executed. The code can read from standard input using the input() function."}, "input": {"type": "string", "description": "A string that will be provided as standard input to the code when it calls input()."}}, "required": ["code", "input"]}}}"#;

const JUPYTER_SCHEMA: &str = r#"{"type": "function", "function": {"name": "jupyter_code", "description": "Execute Python code in a stateful Jupyter-like session: the code of earlier calls is re-run first, so variables persist, and the value of the last expression is shown as in IPython. If the executed code raises an exception, the error message will be captured and returned instead.", "parameters": {"type": "object", "properties": {"code": {"type": "string", "description": "A string containing Python code to be executed."}}, "required": ["code"]}}}"#;

/// Marks an assistant turn's end in ChatML (the EOS token of Qwen chat models).
const IM_END: &str = "<|im_end|>";

/// A prompt template: a [`TemplateFormat`] and the tools it advertises.
///
/// ```
/// use rstar_episode::template::Template;
///
/// let t = Template::chatml();
/// let prompt = t.render_prompt("What is 2 + 2?");
/// assert!(prompt.starts_with("<|im_start|>system\n"));
/// assert!(prompt.ends_with("<|im_start|>assistant\n<reason>"));
/// assert!(prompt.contains("<tools>\n{\"type\": \"function\""));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Template {
    /// The markup.
    pub format: TemplateFormat,
    /// The tools listed in the ChatML system turn (the compact format has one implicit tool).
    #[serde(default = "default_tools")]
    pub tools: Vec<ToolName>,
}

fn default_tools() -> Vec<ToolName> {
    vec![ToolName::PythonCodeWithStandardIo]
}

impl Default for Template {
    fn default() -> Self {
        Template::chatml()
    }
}

impl Template {
    /// The reference layout, advertising `python_code_with_standard_io` as the reference
    /// training example does.
    pub fn chatml() -> Self {
        Template {
            format: TemplateFormat::ChatMl,
            tools: default_tools(),
        }
    }

    /// The compact layout for character-level models.
    pub fn compact() -> Self {
        Template {
            format: TemplateFormat::Compact,
            tools: default_tools(),
        }
    }

    /// A template of the given format with the default tools.
    pub fn of(format: TemplateFormat) -> Self {
        match format {
            TemplateFormat::ChatMl => Template::chatml(),
            TemplateFormat::Compact => Template::compact(),
        }
    }

    /// The prompt for a problem, ending where the policy starts writing its first turn
    /// (`…<|im_start|>assistant\n<reason>` or `…\nA:`).
    pub fn render_prompt(&self, problem: &str) -> String {
        match self.format {
            TemplateFormat::ChatMl => {
                let tools: Vec<&str> = self
                    .tools
                    .iter()
                    .map(|t| match t {
                        ToolName::PythonCodeWithStandardIo => PYTHON_SCHEMA,
                        ToolName::JupyterCode => JUPYTER_SCHEMA,
                    })
                    .collect();
                format!(
                    "<|im_start|>system\n{SYSTEM_PREAMBLE}\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n</tool_call>{IM_END}\n<|im_start|>user\n{USER_PREAMBLE}{problem}{IM_END}\n<|im_start|>assistant\n<reason>",
                    tools.join("\n")
                )
            }
            TemplateFormat::Compact => format!("Q:{problem}\nA:"),
        }
    }

    /// Strings at which an engine should stop generating a turn. The stop string is part of
    /// the turn (it is generated, so it is trained on).
    pub fn stop_strings(&self) -> &'static [&'static str] {
        match self.format {
            TemplateFormat::ChatMl => &[IM_END],
            TemplateFormat::Compact => &[COMPACT_CLOSE, "</answer>"],
        }
    }

    /// Whether an assistant turn ended on a stop string (rather than being cut).
    pub fn turn_is_finished(&self, turn: &str) -> bool {
        self.stop_strings().iter().any(|s| turn.ends_with(s))
    }

    /// Every tool call of an assistant turn, decoded or not, in order.
    pub fn parse_tool_calls(&self, turn: &str) -> Vec<ParsedCall> {
        match self.format {
            TemplateFormat::ChatMl => toolcall::parse_hermes(turn),
            TemplateFormat::Compact => toolcall::parse_compact(turn),
        }
    }

    /// A tool call as the policy should write it.
    pub fn render_tool_call(&self, call: &ToolCall) -> String {
        match self.format {
            TemplateFormat::ChatMl => {
                format!("<tool_call>\n{}\n</tool_call>", call.to_hermes_json())
            }
            TemplateFormat::Compact => format!("{COMPACT_OPEN}{}{COMPACT_CLOSE}", call.code),
        }
    }

    /// The body of one tool response as this template shows it, before budget truncation.
    ///
    /// ChatML shows the environment's text unchanged. Compact shortens it to what a small model
    /// can use: the printed output, `(no output)`, the error's headline (the last stderr line
    /// that names an exception, e.g. `NameError: …`, else the first stderr line), `timeout`,
    /// or the parse-failure text.
    pub fn tool_response_body(&self, outcome: &ToolOutcome) -> String {
        match self.format {
            TemplateFormat::ChatMl => outcome.text.clone(),
            TemplateFormat::Compact => compact_body(outcome),
        }
    }

    /// The text that follows a finished assistant turn when tools were called: the user turn
    /// (right after the assistant's `<|im_end|>`, with no newline between them, as in the
    /// reference agent loop) with one `<tool_response>` block per outcome (each body cut to
    /// `budget` characters, see [`toolcall::truncate_middle`]), then the opening of the next
    /// assistant turn.
    ///
    /// ChatML: `<|im_start|>user\n<tool_response>\n…\n</tool_response><|im_end|>\n<|im_start|>assistant\n<reason>`.
    /// Compact: `\nO:…\nA:` (several outcomes are joined with ` | `).
    pub fn render_tool_turn(&self, outcomes: &[ToolOutcome], budget: Option<usize>) -> String {
        let bodies = outcomes.iter().map(|o| {
            let body = self.tool_response_body(o);
            match budget {
                Some(b) => toolcall::truncate_middle(&body, b),
                None => body,
            }
        });
        match self.format {
            TemplateFormat::ChatMl => {
                let blocks: Vec<String> = bodies
                    .map(|b| format!("<tool_response>\n{b}\n</tool_response>"))
                    .collect();
                format!(
                    "<|im_start|>user\n{}{IM_END}\n<|im_start|>assistant\n<reason>",
                    blocks.join("\n")
                )
            }
            TemplateFormat::Compact => {
                let bodies: Vec<String> = bodies.collect();
                format!("\nO:{}\nA:", bodies.join(" | "))
            }
        }
    }

    /// An assistant turn that reasons and then calls a tool (used to write demonstrations).
    pub fn render_call_turn(&self, reasoning: &str, call: &ToolCall) -> String {
        match self.format {
            TemplateFormat::ChatMl => format!(
                "{reasoning}</reason>\n{}{IM_END}",
                self.render_tool_call(call)
            ),
            TemplateFormat::Compact => format!("{reasoning}{}", self.render_tool_call(call)),
        }
    }

    /// An assistant turn that reasons and then gives the final answer in `\boxed{}`.
    pub fn render_answer_turn(&self, reasoning: &str, answer: &str) -> String {
        match self.format {
            TemplateFormat::ChatMl => format!(
                "{reasoning}</reason>\n<answer>\nThe answer is \\boxed{{{answer}}}.\n</answer>{IM_END}"
            ),
            TemplateFormat::Compact => format!("{reasoning}<answer>\\boxed{{{answer}}}</answer>"),
        }
    }
}

fn compact_body(outcome: &ToolOutcome) -> String {
    match outcome.kind {
        OutcomeKind::Output => outcome
            .stdout()
            .unwrap_or(&outcome.text)
            .trim_end()
            .to_string(),
        OutcomeKind::NoOutput => "(no output)".to_string(),
        OutcomeKind::Timeout => "timeout".to_string(),
        OutcomeKind::ParseFailure => outcome.text.clone(),
        OutcomeKind::Error => {
            let stderr = outcome.stderr().unwrap_or("");
            let mut lines = stderr.lines().map(str::trim).filter(|l| !l.is_empty());
            // The last `SomeError: …` line (a traceback or a syntax error report ends with
            // it; code-judge's `SomeError at line n: …` starts with it), else the first line.
            match stderr.lines().map(str::trim).rfind(|l| is_headline(l)) {
                Some(line) => line.to_string(),
                None => lines.next().unwrap_or("error").to_string(),
            }
        }
    }
}

/// Whether a stderr line names a Python exception: `NameError: …`, `a.b.CustomException …`.
fn is_headline(line: &str) -> bool {
    let word = line.split([':', ' ']).next().unwrap_or("");
    let name = word.rsplit('.').next().unwrap_or(word);
    name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && ["Error", "Exception", "Interrupt", "Exit"]
            .iter()
            .any(|s| name.ends_with(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_tags_are_the_ones_the_parsers_read() {
        let call = ToolCall::python("print(1)");
        for format in [TemplateFormat::ChatMl, TemplateFormat::Compact] {
            let (open, close) = format.call_tags();
            let turn = Template::of(format).render_call_turn("x", &call);
            let at = turn.find(open).expect("the open tag");
            assert!(turn[at..].contains(close), "{format:?}: {turn}");
        }
        assert_eq!(
            TemplateFormat::ChatMl.call_tags(),
            ("<tool_call>", "</tool_call>")
        );
    }

    #[test]
    fn chatml_prompt_is_the_reference_layout() {
        let p = Template::chatml().render_prompt("Find 1+1.");
        let expected_tail = "</tool_call><|im_end|>\n<|im_start|>user\nYou must put your answer inside <answer> </answer> tags, i.e., <answer> answer here </answer>. And your final answer will be extracted automatically by the \\boxed{} tag.\nThis is the problem:\nFind 1+1.<|im_end|>\n<|im_start|>assistant\n<reason>";
        assert!(p.ends_with(expected_tail), "{p}");
        assert!(p.starts_with("<|im_start|>system\nA conversation between User and Assistant."));
        // The tool list is one JSON object per line, as Qwen's template writes it.
        let tools = p
            .split("<tools>\n")
            .nth(1)
            .unwrap()
            .split("\n</tools>")
            .next()
            .unwrap();
        let schemas: Vec<serde_json::Value> = tools
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(schemas.len(), 1);
        assert_eq!(
            schemas[0]["function"]["name"],
            "python_code_with_standard_io"
        );
        assert_eq!(
            schemas[0]["function"]["parameters"]["required"],
            serde_json::json!(["code", "input"])
        );
        let both = Template {
            format: TemplateFormat::ChatMl,
            tools: vec![ToolName::PythonCodeWithStandardIo, ToolName::JupyterCode],
        }
        .render_prompt("x");
        let tools = both
            .split("<tools>\n")
            .nth(1)
            .unwrap()
            .split("\n</tools>")
            .next()
            .unwrap();
        let names: Vec<String> = tools
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["function"]["name"]
                    .to_string()
            })
            .collect();
        assert_eq!(
            names,
            ["\"python_code_with_standard_io\"", "\"jupyter_code\""]
        );
    }

    #[test]
    fn chatml_tool_turn_is_the_reference_wrapper() {
        let t = Template::chatml();
        let ok = ToolOutcome::code_judge(true, "", "4", "", 0.01);
        assert_eq!(
            t.render_tool_turn(std::slice::from_ref(&ok), None),
            "<|im_start|>user\n<tool_response>\nTool call success\nstdout: 4\nexecution time: 0.01s\n</tool_response><|im_end|>\n<|im_start|>assistant\n<reason>"
        );
        let two = t.render_tool_turn(&[ok.clone(), ok], Some(10));
        assert_eq!(
            two,
            "<|im_start|>user\n<tool_response>\nTool ...(truncated)...0.01s\n</tool_response>\n<tool_response>\nTool ...(truncated)...0.01s\n</tool_response><|im_end|>\n<|im_start|>assistant\n<reason>"
        );
    }

    #[test]
    fn compact_bodies() {
        let t = Template::compact();
        let body = |o: &ToolOutcome| t.tool_response_body(o);
        assert_eq!(
            body(&ToolOutcome::code_judge(true, "", "56088\n", "", 0.1)),
            "56088"
        );
        assert_eq!(
            body(&ToolOutcome::code_judge(true, "", "", "", 0.1)),
            "(no output)"
        );
        assert_eq!(
            body(&ToolOutcome::code_judge(
                false,
                "",
                "",
                "NameError at line 1: name 'prnt' is not defined\n  prnt(1)",
                0.1
            )),
            "NameError at line 1: name 'prnt' is not defined"
        );
        assert_eq!(
            body(&ToolOutcome::code_judge(
                false,
                "",
                "",
                "Traceback (most recent call last):\n  File \"<string>\", line 1\nZeroDivisionError: division by zero\n",
                0.1
            )),
            "ZeroDivisionError: division by zero"
        );
        assert_eq!(
            body(&ToolOutcome::code_judge(false, "", "", "", 0.1)),
            "error"
        );
        assert_eq!(
            body(&ToolOutcome::code_judge(
                false,
                "",
                "",
                "  File \"<string>\", line 1\n    print(1\n         ^\nSyntaxError: '(' was never closed\n",
                0.1
            )),
            "SyntaxError: '(' was never closed"
        );
        assert_eq!(
            body(&ToolOutcome::code_judge(false, "", "", "Killed\n", 0.1)),
            "Killed"
        );
        assert_eq!(
            body(&ToolOutcome::code_judge(
                false,
                "worker_timeout",
                "Suicide from timeout.",
                "",
                4.0
            )),
            "timeout"
        );
        assert_eq!(
            t.render_tool_turn(
                &[ToolOutcome::code_judge(true, "", "7\n", "", 0.1)],
                Some(100)
            ),
            "\nO:7\nA:"
        );
    }

    #[test]
    fn compact_round_trip() {
        let t = Template::compact();
        assert_eq!(t.render_prompt("What is 2*3?"), "Q:What is 2*3?\nA:");
        let call = ToolCall::python("print(2*3)");
        let turn = t.render_call_turn("Multiply.", &call);
        assert_eq!(turn, "Multiply.<c>print(2*3)</c>");
        assert!(t.turn_is_finished(&turn));
        assert_eq!(t.parse_tool_calls(&turn), vec![Ok(call)]);
        let answer = t.render_answer_turn("", "6");
        assert_eq!(answer, "<answer>\\boxed{6}</answer>");
        assert!(t.turn_is_finished(&answer));
        assert!(t.parse_tool_calls(&answer).is_empty());
        assert!(!t.turn_is_finished("<answer>\\boxed{6"));
    }

    #[test]
    fn chatml_turns_parse_back() {
        let t = Template::chatml();
        let call = ToolCall::python("print(2*3)");
        let turn = t.render_call_turn("I multiply.", &call);
        assert_eq!(
            turn,
            "I multiply.</reason>\n<tool_call>\n{\"name\": \"python_code_with_standard_io\", \"arguments\": {\"code\": \"print(2*3)\", \"input\": \"\"}}\n</tool_call><|im_end|>"
        );
        assert!(t.turn_is_finished(&turn));
        assert_eq!(t.parse_tool_calls(&turn), vec![Ok(call)]);
        let answer = t.render_answer_turn("It printed 6.", "6");
        assert_eq!(
            answer,
            "It printed 6.</reason>\n<answer>\nThe answer is \\boxed{6}.\n</answer><|im_end|>"
        );
        assert!(t.parse_tool_calls(&answer).is_empty());
    }

    #[test]
    fn serde_names() {
        let json = serde_json::to_string(&Template::compact()).unwrap();
        assert_eq!(
            json,
            r#"{"format":"compact","tools":["python_code_with_standard_io"]}"#
        );
        let t: Template = serde_json::from_str(r#"{"format":"chat_ml"}"#).unwrap();
        assert_eq!(t, Template::chatml());
    }
}
