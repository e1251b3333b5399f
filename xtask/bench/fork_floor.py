"""The fork floor of `cargo xtask bench toolserver` (#46): what one `print(1)` call costs with
nothing of ours around it, in this process.

  bare    fork a process that has numpy and sympy imported, print(1) into a pipe, wait.
  layers  the zygote's own per-call path (`run_call` of rstar-toolenv's zygote.py, loaded
          here): call directory, four pipes, fork, setsid, rlimits, Landlock, capabilities
          dropped, no_new_privs, print(1), wait, sweep, clean-up. Not here: the pool's seccomp
          filter and network namespace (set before the interpreter starts), the frame protocol
          and everything in Rust.

Usage: fork_floor.py ZYGOTE_PY CALLS. Prints one JSON line: the latencies in milliseconds.
"""
import gc
import json
import os
import sys
import tempfile
import time


def bare(n):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            os.dup2(w, 1)
            print(1)
            sys.stdout.flush()
            os._exit(0)
        os.close(w)
        data = b""
        while True:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            data += chunk
        os.close(r)
        os.waitpid(pid, 0)
        assert data == b"1\n", data
        out.append((time.perf_counter() - t) * 1e3)
    return out


def layered(zygote, n):
    g = {"__name__": "rstar_fork_floor"}
    exec(compile(open(zygote).read(), zygote, "exec"), g)
    base = tempfile.mkdtemp(prefix="rstar-fork-floor-")
    state, ready = g["setup"]({"base_dir": base, "preload": ["numpy", "sympy"], "landlock": True, "uid": None, "read_paths": []})
    req = {"id": 0, "code": "print(1)", "input": "", "history": [], "timeout": 10.0, "cpu": 10,
           "mem": 4 << 30, "fsize": 64 << 20, "nofile": 256, "nproc": 64, "nproc_user": 64 * 4 + 16,
           "max_output": 1 << 20}
    out = []
    for seq in range(1, n + 1):
        t = time.perf_counter()
        r = g["run_call"](req, state, seq)
        out.append((time.perf_counter() - t) * 1e3)
        assert r["status"] == "exited" and r["stdout"] == "1\n", r
    return out, ready["layers"]


def main():
    zygote, n = sys.argv[1], int(sys.argv[2])
    # Loading the zygote points fds 0 and 1 at /dev/null (its frames use copies): keep ours.
    report = os.fdopen(os.dup(1), "w")
    import numpy  # noqa: F401
    import sympy  # noqa: F401
    gc.collect()
    gc.freeze()
    b = bare(n)
    # Last: `setup` applies Landlock to this process.
    l, layers = layered(zygote, n)
    report.write(json.dumps({"bare_ms": b, "layers_ms": l, "layers": layers}) + "\n")
    report.flush()


main()
