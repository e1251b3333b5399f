"""Shared helpers of the rstar_agent tests (run by `cargo xtask ci` after `cargo xtask wheel`).

The tests import the installed wheel, never the source tree, so they test what ships.
"""

import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]


def shared_dir() -> pathlib.Path:
    """The shared data folder: $RSTAR_SHARED, else <workspace>/../shared (as rstar-testdata)."""
    path = pathlib.Path(os.environ.get("RSTAR_SHARED", ROOT.parent / "shared"))
    assert path.is_dir(), f"the shared data folder is missing: {path} (set RSTAR_SHARED)"
    return path


def rstar_bin() -> pathlib.Path:
    """The `rstar` binary: $RSTAR_BIN, else the debug build, else the release build."""
    if "RSTAR_BIN" in os.environ:
        path = pathlib.Path(os.environ["RSTAR_BIN"])
        assert path.is_file(), f"RSTAR_BIN={path} does not exist"
        return path
    for profile in ("debug", "release"):
        path = ROOT / "target" / profile / "rstar"
        if path.is_file():
            return path
    pytest.fail("no rstar binary: build it (`cargo build -p rstar-cli`) or set RSTAR_BIN")


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def rstar_verify(rows, mode):
    """`rstar verify --mode MODE` on rows of {"response", "answer"}: {line index: reward} of the
    scored rows (0-based), and the set of indices it skipped."""
    text = "".join(json.dumps({"response": r, "answer": a}) + "\n" for r, a in rows)
    out = subprocess.run(
        [str(rstar_bin()), "verify", "--mode", mode],
        input=text.encode(),
        capture_output=True,
        check=False,
    )
    assert out.returncode in (0, 2), out.stderr.decode()
    scored = {}
    for line in out.stdout.decode().splitlines():
        v = json.loads(line)
        scored[v["line"] - 1] = float(v["reward"])
    skipped = set(range(len(rows))) - set(scored)
    return scored, skipped
