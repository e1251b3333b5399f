"""Calls `rstar serve` with the real `openai` client; prints what came back as one JSON object.

Usage: python openai_client.py BASE_URL MODEL PROMPT_IDS_JSON
"""

import json
import sys

import openai

base, model, ids = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
out = {}

r = client.completions.create(
    model=model, prompt="Q:2+2?\nA:", max_tokens=12, temperature=0, logprobs=1, stop=["</c>"]
)
out["text"] = r.model_dump()

r = client.completions.create(
    model=model, prompt=ids, max_tokens=8, temperature=1.0, seed=5, n=2, logprobs=1
)
out["ids"] = r.model_dump()

r = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "2+2?"}],
    max_tokens=10,
    temperature=0,
    logprobs=True,
)
out["chat"] = r.model_dump()

out["models"] = [m.model_dump() for m in client.models.list()]

try:
    client.completions.create(model=model, prompt="", max_tokens=4)
    out["bad"] = None
except openai.BadRequestError as e:
    out["bad"] = {"status": e.status_code, "body": e.body}

print(json.dumps(out))
