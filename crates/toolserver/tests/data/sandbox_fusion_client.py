"""Drives `/run_code` with the real `sandbox-fusion` client from PyPI.

Usage: python sandbox_fusion_client.py URL. Prints one JSON line per case
(the parsed `RunCodeResponse` plus the client's own summary) and exits 0.
"""
import json
import sys

from sandbox_fusion import (RunCodeRequest, SummaryMapping, run_code, run_code_async, set_endpoint,
                            summary_run_code_result)

set_endpoint(sys.argv[1])
mapping = SummaryMapping(RunFailed="RunFailed", RunTimeout="RunTimeout")
cases = {
    "sum": RunCodeRequest(code="print(1 + 2)", language="python"),
    "stdin": RunCodeRequest(code="print(input()[::-1])", language="python", stdin="abc\n"),
    "exit3": RunCodeRequest(code="import sys\nprint('x')\nsys.exit(3)", language="python"),
    "timeout": RunCodeRequest(code="while True: pass", language="python", run_timeout=0.5),
}
for name, request in cases.items():
    response = run_code(request, max_attempts=1, client_timeout=30)
    out = response.dict() if hasattr(response, "dict") else response.model_dump()
    out["case"] = name
    out["summary"] = summary_run_code_result(response, mapping)
    print(json.dumps(out, default=str), flush=True)

# The async client, and the client's own error for an unsupported language.
import asyncio  # noqa: E402

async_response = asyncio.run(run_code_async(RunCodeRequest(code="print(7)", language="python"), max_attempts=1))
print(json.dumps({"case": "async", "stdout": async_response.run_result.stdout}), flush=True)
try:
    run_code(RunCodeRequest(code="int main(){}", language="cpp"), max_attempts=1)
    print(json.dumps({"case": "cpp", "error": None}))
except Exception as e:  # the client raises on any non-200 status
    print(json.dumps({"case": "cpp", "error": str(e)}))
