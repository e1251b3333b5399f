"""The independent reference of `rstar sft`'s rendering: a model's own chat template
(`chat_template` of its tokenizer_config.json) rendered with Jinja the way transformers'
`apply_chat_template(messages, tools=tools, tokenize=False)` does (a sandboxed environment with
trim_blocks, lstrip_blocks and the loop-controls extension; `tojson` as transformers defines it:
json.dumps with ensure_ascii=False). Rows (JSONL, the OpenAI / HF chat layout) on stdin; a JSON
list of rendered texts on stdout. `tools` given as a JSON string are parsed, and `null` message
content is read as "" as rstar reads it (Jinja cannot concatenate None).

Usage: python render_chat.py TOKENIZER_CONFIG.json < rows.jsonl
"""
import json
import sys

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise ValueError(message)


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        template_text = json.load(f)["chat_template"]
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    template = env.from_string(template_text)
    out = []
    for line in sys.stdin:
        if not line.strip():
            continue
        row = json.loads(line)
        tools = row.get("tools")
        if isinstance(tools, str):
            tools = json.loads(tools)
        messages = row["messages"]
        for m in messages:
            if m.get("content") is None:
                m["content"] = ""
        out.append(template.render(messages=messages, tools=tools or None, add_generation_prompt=False))
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
