"""The Jinja oracle of `rstar serve`'s chat prompts: each request of render_cases.json put the way
serve documents it reads a request, then rendered by Jinja (rstar-testdata's render_chat.py) with
add_generation_prompt=True.

- chat_ml: Qwen3's own template (its tokenizer_config.json from the shared fixtures) with the two
  edits that make it the ChatML layout (rstar_episode::chat::ChatFormat::ChatMl): assistant turns
  as written (no `<think>` block, `</think>` not split off), and the tool-call name written by
  `tojson`. When the request has no system message, serve's system turn comes first: the paper's
  system prompt with its tool (DEFAULT_SYSTEM, DEFAULT_TOOL) when the request has no tools, else
  "You are a helpful assistant." as Qwen2.5's template has it.
- compact: compact.jinja, the compact layout written out from its documentation.

Serve reads a request as: `developer` is a system message, text content parts are joined, a
tool call's arguments are a string as given, any other JSON as itself, none as "{}".

Usage: python chat_oracle.py TESTDATA_PYTHON_DIR QWEN3_TOKENIZER_CONFIG CASES DEFAULT_SYSTEM DEFAULT_TOOL
Writes a JSON list: the prompt of each case, or null for a compact case with `tool_calls`
(serve refuses those).
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# Each edit: the text of Qwen3's template and what the ChatML layout has instead.
CHATML_EDITS = [
    ("{%- if '</think>' in message.content %}", "{%- if false %}"),
    ("{%- if loop.index0 > ns.last_query_index %}", "{%- if false %}"),
    (
        "{{- '<tool_call>\\n{\"name\": \"' }}\n                {{- tool_call.name }}\n                {{- '\", \"arguments\": ' }}",
        "{{- '<tool_call>\\n{\"name\": ' }}\n                {{- tool_call.name | tojson }}\n                {{- ', \"arguments\": ' }}",
    ),
]


def chatml_template(qwen3):
    for old, new in CHATML_EDITS:
        assert qwen3.count(old) == 1, f"Qwen3's template has changed: {old!r} is not there once"
        qwen3 = qwen3.replace(old, new)
    return qwen3


def read_request(request, default_system, default_tool):
    messages = []
    for m in request.get("messages") or []:
        m = dict(m)
        if m["role"] == "developer":
            m["role"] = "system"
        if isinstance(m.get("content"), list):
            m["content"] = "".join(p["text"] for p in m["content"])
        calls = []
        for call in m.get("tool_calls") or []:
            function = dict(call["function"])
            if function.get("arguments") is None:
                function["arguments"] = "{}"
            calls.append({"type": "function", "function": function})
        if calls:
            m["tool_calls"] = calls
        else:
            m.pop("tool_calls", None)
        messages.append(m)
    tools = request.get("tools") or []
    return messages, tools


def main():
    testdata, qwen3_config, cases_path, default_system, default_tool = sys.argv[1:]
    sys.path.insert(0, testdata)
    from render_chat import render_rows, template_text

    chatml = chatml_template(template_text(qwen3_config))
    with open(os.path.join(HERE, "compact.jinja"), encoding="utf-8") as f:
        compact = f.read()
    with open(cases_path, encoding="utf-8") as f:
        cases = json.load(f)
    out = []
    for case in cases:
        messages, tools = read_request(json.loads(case["request"]), default_system, default_tool)
        if case["template"] == "compact":
            if any(m.get("tool_calls") for m in messages):
                out.append(None)
                continue
            out.append(render_rows(compact, [{"messages": messages}], True)[0])
            continue
        if not messages or messages[0]["role"] != "system":
            if tools:
                messages.insert(0, {"role": "system", "content": "You are a helpful assistant."})
            else:
                messages.insert(0, {"role": "system", "content": default_system})
                tools = [json.loads(default_tool)]
        out.append(render_rows(chatml, [{"messages": messages, "tools": tools}], True)[0])
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
