"""A code-judge client written from code-judge's protocol (stdlib only).

Usage: python code_judge_client.py URL N. Checks /ping, /status, /run,
/run/batch and /run/long-batch field by field, then sends N concurrent /run
requests with distinct sub_ids and checks that each comes back exactly once
with its own output. Prints a JSON summary line; exits non-zero on a mismatch.
"""
import json
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor

URL = sys.argv[1].rstrip("/")
N = int(sys.argv[2])
RESULT_FIELDS = {"sub_id", "success", "run_success", "cost", "stdout", "stderr", "reason"}
REASONS = {"", "worker_timeout", "queue_timeout", "internal_error", "invalid_input"}


def call(path, payload=None):
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(URL + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as resp:
        assert resp.status == 200, resp.status
        return json.loads(resp.read())


def check_result(r, sub_id, stdout, success=True):
    assert set(r) == RESULT_FIELDS, r
    assert r["sub_id"] == sub_id and r["stdout"] == stdout and r["success"] is success, r
    assert r["run_success"] is success and r["reason"] in REASONS and isinstance(r["cost"], (int, float)), r


assert call("/ping") == "pong"
status = call("/status")
assert isinstance(status["queue"], int) and status["num_workers"] >= 1, status
check_result(call("/run", {"sub_id": "one", "type": "python", "solution": "print(input())", "input": "hi"}), "one", "hi\n")
r = call("/run", {"sub_id": "exp", "type": "python", "solution": "print(2)", "expected_output": "3"})
assert r["success"] is False and r["run_success"] is True and r["reason"] == "", r
r = call("/run", {"sub_id": "err", "type": "python", "solution": "1/0"})
assert r["run_success"] is False and "ZeroDivisionError" in r["stderr"], r
for path in ("/run/batch", "/run/long-batch"):
    subs = [{"sub_id": f"b{i}", "type": "python", "solution": f"print({i})"} for i in range(10)]
    batch = call(path, {"sub_id": "batch", "type": "batch", "submissions": subs})
    assert batch["sub_id"] == "batch" and len(batch["results"]) == 10, batch
    for i, res in enumerate(batch["results"]):
        check_result(res, f"b{i}", f"{i}\n")


def one(i):
    return call("/run", {"sub_id": f"load-{i}", "type": "python", "solution": f"print({i} * 7)"})


with ThreadPoolExecutor(max_workers=100) as pool:
    results = list(pool.map(one, range(N)))
seen = {}
for i, r in enumerate(results):
    check_result(r, f"load-{i}", f"{i * 7}\n")
    seen[r["sub_id"]] = seen.get(r["sub_id"], 0) + 1
assert len(seen) == N and all(c == 1 for c in seen.values())
print(json.dumps({"answered": len(results), "distinct": len(seen)}))
