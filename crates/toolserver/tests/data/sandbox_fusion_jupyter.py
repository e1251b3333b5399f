"""Drives `/run_jupyter` with the real `sandbox-fusion` client from PyPI.

Usage: python sandbox_fusion_jupyter.py URL. Prints one JSON line per case
(the parsed `RunJupyterResponse`) and exits 0.
"""
import asyncio
import json
import sys

from sandbox_fusion import RunJupyterRequest, run_jupyter, run_jupyter_async, set_endpoint

set_endpoint(sys.argv[1])
cases = {
    # State carries from cell to cell; a last expression's value is printed.
    "state": RunJupyterRequest(cells=["a = 123\nprint('set')", "print(a + 1)", "a * 2"]),
    # A cell that raises reports its exception; the next cell still sees earlier state.
    "error": RunJupyterRequest(cells=["x = 7", "raise ValueError('bad value')", "print(x)"]),
    "timeout": RunJupyterRequest(cells=["y = 1", "while True: pass"], cell_timeout=0.5),
}
for name, request in cases.items():
    response = run_jupyter(request, max_attempts=1, client_timeout=60)
    out = response.dict() if hasattr(response, "dict") else response.model_dump()
    out["case"] = name
    print(json.dumps(out, default=str), flush=True)

response = asyncio.run(run_jupyter_async(RunJupyterRequest(cells=["n = 6", "n * 7"]), max_attempts=1))
print(json.dumps({"case": "async", "stdout": [c.stdout for c in response.cells]}), flush=True)
