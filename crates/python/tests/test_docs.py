"""docs/python.md's Python snippets: every block runs, except those whose line above gives a
reason (`<!-- snippet: why -->`), which must still compile; and the examples run."""

import pathlib
import re
import runpy
import subprocess
import sys

from conftest import ROOT

PAGE = ROOT / "docs" / "python.md"


def blocks():
    """(line, reason or None, code) of each ```python block."""
    lines = PAGE.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            above = lines[i - 1].strip() if i else ""
            m = re.fullmatch(r"<!-- snippet: (.+) -->", above)
            start = i + 1
            i += 1
            while lines[i].strip() != "```":
                i += 1
            out.append((start, m.group(1) if m else None, "\n".join(lines[start:i])))
        i += 1
    return out


def test_the_snippets_run():
    found = blocks()
    assert len([b for b in found if b[1] is None]) >= 4, found
    for line, reason, code in found:
        compiled = compile(code, f"{PAGE}:{line}", "exec")
        if reason is None:
            exec(compiled, {"__name__": "__snippet__"})


def test_the_examples_run():
    examples = ROOT / "crates" / "python" / "examples"
    out = subprocess.run(
        [sys.executable, str(examples / "rewards.py")], capture_output=True, text=True, check=True
    )
    assert "RoC keeps" in out.stdout and "-> error" in out.stdout, out.stdout
    verl = runpy.run_path(str(examples / "verl_reward.py"))
    assert verl["compute_score"]("d", "\\boxed{1}", "1") == 1.0
    assert pathlib.Path(examples / "modes.rs").is_file()
