"""The sandbox from Python: the four outcomes in-process (`Sandbox`) and through an
`rstar tools serve` (`ToolClient`)."""

import re
import subprocess
import sys
import threading

import pytest
import rstar_agent as ra

from conftest import rstar_bin

FOUR = [
    ("print(int(input()) * 2)", "21", "output"),
    ("x = 6 * 7", "", "no_output"),
    ("raise ValueError('boom')", "", "error"),
    ("while True: pass", "", "timeout"),
]


@pytest.fixture(scope="module")
def sandbox():
    with ra.Sandbox(workers=2, timeout=2.0, preload=[]) as sb:
        yield sb


def test_the_four_outcomes(sandbox):
    for code, stdin, outcome in FOUR:
        r = sandbox.run(code, stdin, timeout=1.0)
        assert r.outcome == outcome, (code, r)
    r = sandbox.run("print(int(input()) * 2)", "21")
    assert (r.stdout, r.exit_code, r.success) == ("42\n", 0, True)
    assert r.text.startswith("Tool call success\nstdout: 42\n")
    r = sandbox.run("raise ValueError('boom')")
    assert "ValueError" in r.stderr and "boom" in r.stderr and not r.success
    assert r.text.startswith("Tool call failure")
    r = sandbox.run("while True: pass", timeout=0.5)
    assert "reason: worker_timeout" in r.text


def test_batch_and_threads(sandbox):
    results = sandbox.run_batch([(c, s) for c, s, _ in FOUR], timeout=1.0)
    assert [r.outcome for r in results] == [o for _, _, o in FOUR]
    out = [None] * 4

    def work(k):
        out[k] = sandbox.run(f"print({k} ** 2)").stdout

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == [f"{k * k}\n" for k in range(4)]


def test_isolation(sandbox):
    r = sandbox.run(
        "import socket\ns = socket.socket()\ns.settimeout(1)\ns.connect(('1.1.1.1', 53))",
        timeout=2.0,
    )
    assert r.outcome == "error", r


def test_bad_input_and_close():
    with pytest.raises(ValueError, match="NUL"):
        ra.Sandbox.run(ra.Sandbox(workers=1, preload=[]), "print(1)\x00")
    with pytest.raises(ValueError, match="backend"):
        ra.Sandbox(backend="docker")
    with pytest.raises(ValueError, match="timeout"):
        ra.Sandbox(timeout=0)
    sb = ra.Sandbox(workers=1, preload=[])
    with pytest.raises(TypeError):
        sb.run(b"print(1)")
    with pytest.raises(ValueError, match="timeout"):
        sb.run("print(1)", timeout=-1)
    with pytest.raises(TypeError):
        sb.run_batch([1])
    sb.close()
    sb.close()
    with pytest.raises(RuntimeError, match="closed"):
        sb.run("print(1)")


@pytest.fixture(scope="module")
def tool_server():
    proc = subprocess.Popen(
        [
            str(rstar_bin()),
            "tools",
            "serve",
            "--port",
            "0",
            "--workers",
            "2",
            "--preload=",
            "--timeout",
            "2",
            "--token",
            "t0k",
            "--python",
            sys.executable,
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    url = None
    for line in proc.stderr:
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            url = m.group(1)
            break
    assert url, "rstar tools serve did not start"
    yield url
    proc.terminate()
    proc.wait(timeout=60)


def test_tool_client_gives_the_same_outcomes(tool_server):
    client = ra.ToolClient(tool_server, token="t0k")
    r = client.run("print(int(input()) * 2)", "21")
    assert (r.outcome, r.stdout, r.success) == ("output", "42\n", True)
    results = client.run_batch([(c, s) for c, s, _ in FOUR])
    assert [r.outcome for r in results] == [o for _, _, o in FOUR]
    assert results[3].text.startswith("Tool call failure\nreason: worker_timeout")
    wrong = ra.ToolClient([tool_server], token="nope", max_retries=0)
    assert wrong.run("print(1)").outcome == "internal"
    with pytest.raises(ValueError):
        ra.ToolClient([])
