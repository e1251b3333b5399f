"""Streams from `rstar serve` with the real `openai` client and asks for a tool call; prints what
came back as one JSON object.

Usage: python openai_stream.py BASE_URL MODEL USER_CONTENT
"""

import json
import sys

import openai

base, model, content = sys.argv[1], sys.argv[2], sys.argv[3]
client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
tools = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}]
messages = [{"role": "user", "content": content}]
out = {}


def gather(stream):
    """The chunks as dicts, and what a client puts together from them."""
    chunks = [c.model_dump() for c in stream]
    text, calls, finish, usage = "", {}, {}, None
    for c in chunks:
        if c.get("usage"):
            usage = c["usage"]
        for choice in c["choices"]:
            delta = choice.get("delta")
            if delta is None:  # a completion chunk
                text += choice["text"] or ""
            else:
                text += delta.get("content") or ""
                for call in delta.get("tool_calls") or []:
                    slot = calls.setdefault(call["index"], {"id": None, "type": None, "name": "", "arguments": ""})
                    slot["id"] = call.get("id") or slot["id"]
                    slot["type"] = call.get("type") or slot["type"]
                    function = call.get("function") or {}
                    slot["name"] += function.get("name") or ""
                    slot["arguments"] += function.get("arguments") or ""
            if choice.get("finish_reason"):
                finish[choice["index"]] = choice["finish_reason"]
    return {"chunks": chunks, "text": text, "tool_calls": [calls[k] for k in sorted(calls)],
            "finish": finish, "usage": usage}


# A streamed chat with tools and the usage chunk.
out["stream_tools"] = gather(client.chat.completions.create(
    model=model, messages=messages, tools=tools, max_tokens=100, temperature=0, stream=True,
    stream_options={"include_usage": True}))
# The same without streaming.
r = client.chat.completions.create(model=model, messages=messages, tools=tools, max_tokens=100, temperature=0)
out["tools"] = r.model_dump()
# The same with `tool_choice="none"`: the call stays text.
r = client.chat.completions.create(model=model, messages=messages, tools=tools, tool_choice="none",
                                   max_tokens=100, temperature=0)
out["no_tools"] = r.model_dump()
# A streamed chat without tools, with log-probs: the call stays text; and a streamed completion.
out["stream_plain"] = gather(client.chat.completions.create(
    model=model, messages=messages, max_tokens=100, temperature=0, logprobs=True, stream=True))
out["stream_completion"] = gather(client.completions.create(
    model=model, prompt="Q:2+2?\nA:", max_tokens=12, temperature=0, stream=True,
    stream_options={"include_usage": True}))
# The `ChatCompletionStreamState` helper behind `client.chat.completions.stream` accumulates deltas into
# a final `ChatCompletion` and checks the chunks' shape as it goes.
with client.chat.completions.stream(model=model, messages=messages, tools=tools, max_tokens=100,
                                    temperature=0) as stream:
    final = stream.get_final_completion()
out["helper"] = final.model_dump()
print(json.dumps(out))
