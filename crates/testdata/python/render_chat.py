"""The independent reference of rstar's chat rendering: a chat template rendered with Jinja the
way transformers' `apply_chat_template(messages, tools=tools, tokenize=False)` does (a sandboxed
environment with trim_blocks, lstrip_blocks and the loop-controls extension; `tojson` as
transformers defines it: json.dumps with ensure_ascii=False). Rows (JSONL, the OpenAI / HF chat
layout) on stdin; a JSON list of rendered texts on stdout. `tools` given as a JSON string are
parsed, and `null` message content is read as "" as rstar reads it (Jinja cannot concatenate
None).

TEMPLATE is a model's tokenizer_config.json (its `chat_template`) or a file of Jinja text.
--generation-prompt renders with add_generation_prompt=True.

Usage: python render_chat.py TEMPLATE [--generation-prompt] < rows.jsonl
"""
import json
import sys

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise ValueError(message)


def template_text(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".json"):
        return json.loads(text)["chat_template"]
    return text


def render_rows(text, rows, generation_prompt=False):
    """Renders each row (a dict with `messages` and maybe `tools`) with the Jinja text."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    template = env.from_string(text)
    out = []
    for row in rows:
        tools = row.get("tools")
        if isinstance(tools, str):
            tools = json.loads(tools)
        messages = row["messages"]
        for m in messages:
            if m.get("content") is None:
                m["content"] = ""
        out.append(template.render(messages=messages, tools=tools or None, add_generation_prompt=generation_prompt))
    return out


def main():
    args = sys.argv[1:]
    generation_prompt = "--generation-prompt" in args
    paths = [a for a in args if a != "--generation-prompt"]
    if len(paths) != 1:
        sys.exit("usage: render_chat.py TEMPLATE [--generation-prompt] < rows.jsonl")
    rows = [json.loads(line) for line in sys.stdin if line.strip()]
    json.dump(render_rows(template_text(paths[0]), rows, generation_prompt), sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
