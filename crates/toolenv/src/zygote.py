# rstar-toolenv worker ("zygote"): a Python parent that preloads modules once
# and forks one sandboxed child per call. Driven by the Rust supervisor over
# stdin/stdout with length-prefixed JSON frames. Standard library only.
#
# Protocol: 4-byte big-endian length, then UTF-8 JSON.
#   supervisor -> worker: init {base_dir, preload, landlock, uid, read_paths, once}
#   worker -> supervisor: ready {ready, preloaded, failed_preload, landlock_abi, layers}
#   supervisor -> worker: call {id, code, input, history, timeout, cpu, mem, fsize,
#                               nofile, nproc, max_output}
#   worker -> supervisor: result {id, status, exit_code, signal, stdout, stderr, elapsed, cpu}
import ast
import builtins
import ctypes
import errno
import io
import json
import os
import select
import shutil
import signal
import struct
import sys
import time
import traceback

PROTO_IN = os.fdopen(os.dup(0), "rb", buffering=0)
PROTO_OUT = os.fdopen(os.dup(1), "wb", buffering=0)
# Nothing of ours may write to the protocol pipe by accident.
_null = os.open("/dev/null", os.O_RDWR)
os.dup2(_null, 0)
os.dup2(_null, 1)
os.close(_null)
sys.stdout = open(1, "w", closefd=False)

LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.syscall.restype = ctypes.c_long
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446

# Landlock filesystem rights (uapi/linux/landlock.h).
LL_EXECUTE = 1 << 0
LL_WRITE_FILE = 1 << 1
LL_READ_FILE = 1 << 2
LL_READ_DIR = 1 << 3
LL_REMOVE_DIR = 1 << 4
LL_REMOVE_FILE = 1 << 5
LL_MAKE_ALL = sum(1 << b for b in range(6, 13))
LL_REFER = 1 << 13
LL_TRUNCATE = 1 << 14
LL_FILE_RIGHTS = LL_EXECUTE | LL_WRITE_FILE | LL_READ_FILE | LL_TRUNCATE
LL_READ = LL_EXECUTE | LL_READ_FILE | LL_READ_DIR
LL_NET_BIND_TCP = 1 << 0
LL_NET_CONNECT_TCP = 1 << 1
LL_SCOPE_ABSTRACT_UNIX = 1 << 0
LL_SCOPE_SIGNAL = 1 << 1

# /etc entries that hold secrets; everything else in /etc stays readable.
ETC_DENY = {
    "shadow", "shadow-", "gshadow", "gshadow-", "sudoers", "sudoers.d", "ssh", "ssl",
    "security", "credstore", "credstore.encrypted", "krb5.keytab", "pki", "wireguard",
}


LAZY_SUBMODULES = {"numpy": ["numpy.random", "numpy.linalg", "numpy.fft", "numpy.polynomial"]}

# Exercised once per worker after a preload: both libraries import much of
# themselves lazily (sympy's first factor/solve/integrate imports ~40 modules,
# about 300 ms), which every forked child would otherwise pay again.
WARM_UP = {
    "numpy": "import numpy as np\nnp.linalg.solve(np.eye(2), np.ones(2)); np.fft.fft(np.ones(4))\n"
    "np.random.default_rng(0).random(2); np.polynomial.Polynomial([1, 2])(3)",
    "sympy": "import sympy\nx, y = sympy.symbols('x y')\nsympy.factor(x**2 - 1); sympy.solve(x**2 - 2, x)\n"
    "sympy.solve([x + y - 2, x - y], [x, y]); sympy.simplify(sympy.sin(x)**2 + sympy.cos(x)**2)\n"
    "sympy.integrate(x**2, x); sympy.diff(sympy.exp(x) * x, x); sympy.expand((x + 1)**3)\n"
    "sympy.limit(sympy.sin(x) / x, x, 0); sympy.series(sympy.exp(x), x, 0, 3); sympy.Matrix([[1, 2], [3, 4]]).det()\n"
    "sympy.nsimplify(0.5); sympy.N(sympy.pi, 20); sympy.factorint(360); sympy.isprime(97); sympy.binomial(10, 3)\n"
    "sympy.summation(x, (x, 1, 10)); sympy.Rational(1, 3) + sympy.Rational(1, 6); sympy.sqrt(8); sympy.latex(x**2)\n"
    "sympy.gcd(12, 18); sympy.totient(10); sympy.divisors(12); sympy.nextprime(10); sympy.mod_inverse(3, 7)",
}


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [("eff", ctypes.c_uint32), ("perm", ctypes.c_uint32), ("inh", ctypes.c_uint32)]


class RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("fd", ctypes.c_int32)]


def read_msg():
    head = b""
    while len(head) < 4:
        chunk = PROTO_IN.read(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (n,) = struct.unpack(">I", head)
    body = b""
    while len(body) < n:
        chunk = PROTO_IN.read(n - len(body))
        if not chunk:
            return None
        body += chunk
    return json.loads(body)


def write_msg(obj):
    body = json.dumps(obj).encode()
    PROTO_OUT.write(struct.pack(">I", len(body)) + body)


def landlock_abi():
    abi = LIBC.syscall(SYS_LANDLOCK_CREATE_RULESET, None, 0, 1)
    return abi if abi > 0 else 0


def fs_rights(abi):
    rights = LL_READ | LL_WRITE_FILE | LL_REMOVE_DIR | LL_REMOVE_FILE | LL_MAKE_ALL
    if abi >= 2:
        rights |= LL_REFER
    if abi >= 3:
        rights |= LL_TRUNCATE
    return rights


def landlock_ruleset(abi, handled_fs, rules, scoped):
    """Creates a ruleset; rules are (path, rights). Returns the fd."""
    attr = RulesetAttr(handled_fs, 0, 0)
    size = 8
    if abi >= 4:
        attr.net = LL_NET_BIND_TCP | LL_NET_CONNECT_TCP
        size = 16
    if abi >= 6 and scoped:
        attr.scoped = LL_SCOPE_ABSTRACT_UNIX | LL_SCOPE_SIGNAL
        size = 24
    fd = LIBC.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    for path, rights in rules:
        try:
            pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if not os.path.isdir(path):
                rights &= LL_FILE_RIGHTS
            rights &= handled_fs
            if not rights:
                continue
            beneath = PathBeneath(rights, pfd)
            if LIBC.syscall(SYS_LANDLOCK_ADD_RULE, fd, 1, ctypes.byref(beneath), 0) < 0:
                raise OSError(ctypes.get_errno(), "landlock_add_rule " + path)
        finally:
            os.close(pfd)
    return fd


def landlock_restrict(fd):
    if LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    if LIBC.syscall(SYS_LANDLOCK_RESTRICT_SELF, fd, 0) < 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    os.close(fd)


def python_paths():
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths.add(os.path.dirname(os.path.realpath(sys.executable)))
    paths.add(os.path.dirname(sys.executable))
    for p in sys.path:
        if p and os.path.exists(p):
            paths.add(p)
    out = set()
    for p in paths:
        out.add(p)
        out.add(os.path.realpath(p))
    return sorted(out)


def read_paths(extra):
    paths = ["/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin", "/opt"]
    try:
        paths += ["/etc/" + e for e in os.listdir("/etc") if e not in ETC_DENY]
    except OSError:
        pass
    paths += ["/dev/urandom", "/dev/random"]
    paths += python_paths()
    paths += list(extra)
    real = []
    for p in paths:
        real.append(p)
        rp = os.path.realpath(p)
        if rp != p:
            real.append(rp)
    return real


def uid_can_read(uid, paths):
    """Whether `uid` (not the owner) can traverse to every path, by mode bits."""
    for p in paths:
        p = os.path.realpath(p)
        while True:
            try:
                st = os.stat(p)
            except OSError:
                break
            if st.st_uid != uid and not (st.st_mode & 0o001 if os.path.isdir(p) else st.st_mode & 0o004):
                return False, p
            parent = os.path.dirname(p)
            if parent == p:
                break
            p = parent
    return True, None


def drop_capabilities():
    """Empties the bounding, inheritable, permitted and effective sets (uid stays)."""
    for cap in range(0, 64):
        if LIBC.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:
            break
    # SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP(_LOCKED) | KEEP_CAPS_LOCKED
    LIBC.prctl(PR_SET_SECUREBITS, 0x1 | 0x2 | 0x4 | 0x8 | 0x20, 0, 0, 0)
    header = CapHeader(0x20080522, 0)
    data = (CapData * 2)()
    if LIBC.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


# --- the cell executor (reproduces the reference's PersistentExecutor semantics) ---


class CellError(Exception):
    def __init__(self, original, code, line_offset=0):
        if hasattr(original, "lineno"):
            lineno = original.lineno
        else:
            tb = original.__traceback__
            if tb is not None:
                while tb.tb_next:
                    tb = tb.tb_next
                lineno = tb.tb_lineno
            else:
                lineno = -1
        if lineno is None:
            lineno = -1
        if lineno != -1:
            lineno += line_offset
        kind = type(original).__name__
        lines = code.splitlines()
        if lineno != -1 and 0 <= lineno - 1 < len(lines):
            super().__init__(f"{kind} at line {lineno}: {original}\n  {lines[lineno - 1]}")
        else:
            super().__init__(f"{kind}: {original}")


class _Sink(io.StringIO):
    pass


def split_cell(code):
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        raise CellError(e, code)
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return code, None
    last = tree.body[-1]
    start = last.lineno
    end = getattr(last, "end_lineno", None) or start
    lines = code.splitlines()
    return "\n".join(lines[: start - 1]), "\n".join(lines[start - 1 : end])


def run_cell(code, env, replay):
    import contextlib

    try:
        main, last = split_cell(code)
        if replay:
            out_ctx, err_ctx = contextlib.redirect_stdout(_Sink()), contextlib.redirect_stderr(_Sink())
        else:
            out_ctx, err_ctx = contextlib.redirect_stdout(sys.stdout), contextlib.redirect_stderr(sys.stderr)
        if main:
            try:
                compiled = compile(main, "<string>", "exec")
                with out_ctx, err_ctx:
                    exec(compiled, env)
            except Exception as e:
                raise CellError(e, main)
        if last:
            try:
                compiled = compile(last, "<string>", "eval")
                with out_ctx, err_ctx:
                    value = eval(compiled, env)
                if value is not None and not replay:
                    print(repr(value), file=sys.stdout)
            except Exception:
                try:
                    compiled = compile(last, "<string>", "exec")
                    with out_ctx, err_ctx:
                        exec(compiled, env)
                except Exception as e2:
                    raise CellError(e2, last, len(main.splitlines()) if main else 0)
    except Exception as e:
        if replay:
            return
        if isinstance(e, CellError):
            print(str(e), file=sys.stderr)
        else:
            traceback.print_exc(file=sys.stderr)
        # Divergence: the reference calls os._exit(1) without flushing, which
        # can drop buffered stdout; we keep what the cell printed.
        finish(1)


def finish(code):
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


# --- the per-call child ---


def child_main(req, call_dir, in_r, out_w, err_w, status_w, state):
    os.setsid()
    LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    os.dup2(in_r, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    os.closerange(3, status_w)
    os.closerange(status_w + 1, 1 << 16)
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (req["cpu"], req["cpu"] + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (req["fsize"], req["fsize"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (req["nofile"], req["nofile"]))
    if req.get("mem"):
        resource.setrlimit(resource.RLIMIT_AS, (req["mem"], req["mem"]))
    os.chdir(call_dir)
    os.environ.clear()
    os.environ.update({
        "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": call_dir, "TMPDIR": call_dir,
        "LANG": "C.UTF-8", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
    })
    import tempfile

    tempfile.tempdir = None
    if state["landlock_abi"]:
        # A nested domain: writes only inside this call's directory, no TCP,
        # no signals or abstract sockets outside the domain.
        abi = state["landlock_abi"]
        write = fs_rights(abi) & ~LL_READ
        rules = [(call_dir, write), ("/dev/null", LL_WRITE_FILE | LL_TRUNCATE), ("/dev/zero", LL_WRITE_FILE), ("/dev/full", LL_WRITE_FILE)]
        landlock_restrict(landlock_ruleset(abi, write, rules, scoped=True))
    if state["uid"] is not None:
        os.setgroups([])
        os.setresgid(state["uid"], state["uid"], state["uid"])
        os.setresuid(state["uid"], state["uid"], state["uid"])
        os.umask(0o022)
        # Counted per user across all workers, so it is sized for all of them.
        resource.setrlimit(resource.RLIMIT_NPROC, (req["nproc_user"], req["nproc_user"]))
    else:
        drop_capabilities()
    LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    # A fresh interpreter would not share numpy's random state with its siblings.
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            np.random.seed(int.from_bytes(os.urandom(4), "little"))
        except Exception:
            pass
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False, buffering=1)
    sys.argv = ["<string>"]
    os.write(status_w, b"k")
    os.close(status_w)
    env = {"__name__": "__main__", "__file__": "<string>", "__builtins__": builtins}
    try:
        for cell in req.get("history") or []:
            run_cell(cell, env, True)
        run_cell(req["code"], env, False)
    except SystemExit as e:
        code = e.code
        if code is None:
            finish(0)
        if isinstance(code, int):
            finish(code & 0xFF)
        print(code, file=sys.stderr)
        finish(1)
    except BaseException:
        traceback.print_exc(file=sys.stderr)
        finish(1)
    finish(0)


def sweep(children_fd, pid):
    """Kills every process we are the (sub)reaper of and reaps them.

    Killed processes take a moment to die; we wait (up to 2 s) until the
    children list is empty, so the call's result is sent only when nothing of
    it is left.
    """
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    deadline = time.monotonic() + 2.0
    while True:
        while True:
            try:
                r, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                r = 0
            if r == 0:
                break
        if children_fd is None:
            return
        try:
            kids = [int(x) for x in os.pread(children_fd, 1 << 16, 0).split()]
        except OSError:
            return
        if not kids or time.monotonic() > deadline:
            return
        for k in kids:
            for kill in (os.killpg, os.kill):
                try:
                    kill(k, signal.SIGKILL)
                except OSError:
                    pass
        time.sleep(0.0005)


def run_call(req, state, seq):
    call_dir = os.path.join(state["base_dir"], "c%d" % seq)
    if state["uid"] is None:
        os.mkdir(call_dir, 0o700)
    else:
        # The unprivileged uid must write here (chown is denied by seccomp).
        old_mask = os.umask(0)
        os.mkdir(call_dir, 0o777)
        os.umask(old_mask)
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    st_r, st_w = os.pipe()
    t0 = time.monotonic()
    try:
        pid = os.fork()
    except OSError:
        for fd in (in_r, in_w, out_r, out_w, err_r, err_w, st_r, st_w):
            os.close(fd)
        shutil.rmtree(call_dir, ignore_errors=True)
        raise
    if pid == 0:
        try:
            os.close(in_w), os.close(out_r), os.close(err_r), os.close(st_r)
            child_main(req, call_dir, in_r, out_w, err_w, st_w, state)
        except BaseException as e:
            try:
                os.write(2, ("rstar-toolenv: sandbox setup failed: %r\n" % (e,)).encode())
            finally:
                os._exit(121)
        os._exit(0)
    for fd in (in_r, out_w, err_w, st_w):
        os.close(fd)
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None  # Python < 3.9 or Linux < 5.3: poll for the exit instead
    reaped = None
    data = (req.get("input") or "").encode()
    if not data:
        os.close(in_w)
        in_w = None
    else:
        os.set_blocking(in_w, False)
    bufs = {out_r: bytearray(), err_r: bytearray()}
    status_bytes = bytearray()
    open_fds = {out_r, err_r, st_r}
    limit = req["max_output"]
    deadline = t0 + req["timeout"]
    status = None
    exited = False
    exited_at = 0.0
    poller = select.poll()
    for fd in open_fds:
        poller.register(fd, select.POLLIN)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    if in_w is not None:
        poller.register(in_w, select.POLLOUT)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            status = "timeout"
            break
        if exited and (not open_fds or time.monotonic() > exited_at + 0.1):
            break  # descendants that keep the pipes open are not waited for
        if pidfd is None and not exited:
            r, wstatus, usage = os.wait4(pid, os.WNOHANG)
            if r == pid:
                reaped = (wstatus, usage)
                exited = True
                exited_at = time.monotonic()
        wait_ms = max(1, int(left * 1000)) if pidfd is not None else min(10, max(1, int(left * 1000)))
        events = poller.poll(wait_ms if not exited else 0)
        if exited and not events:
            break
        for fd, ev in events:
            if fd == pidfd:
                exited = True
                exited_at = time.monotonic()
                poller.unregister(pidfd)
            elif fd == in_w:
                try:
                    n = os.write(in_w, data[:65536])
                    data = data[n:]
                except OSError:
                    data = b""
                if not data:
                    poller.unregister(in_w)
                    os.close(in_w)
                    in_w = None
            else:
                chunk = os.read(fd, 65536)
                if not chunk:
                    poller.unregister(fd)
                    open_fds.discard(fd)
                    os.close(fd)
                elif fd == st_r:
                    status_bytes += chunk
                else:
                    bufs[fd] += chunk
                    if len(bufs[fd]) > limit:
                        del bufs[fd][limit:]
                        status = "output_limit"
        if status:
            break
    elapsed = time.monotonic() - t0
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    if reaped is None:
        _, wstatus, usage = os.wait4(pid, 0)
    else:
        wstatus, usage = reaped
    sweep(state["children_fd"], pid)
    for fd in list(open_fds) + ([in_w] if in_w is not None else []) + ([pidfd] if pidfd is not None else []):
        try:
            os.close(fd)
        except OSError:
            pass
    cpu = usage.ru_utime + usage.ru_stime
    exit_code = os.WEXITSTATUS(wstatus) if os.WIFEXITED(wstatus) else None
    sig = os.WTERMSIG(wstatus) if os.WIFSIGNALED(wstatus) else None
    if status is None:
        if not status_bytes:
            status = "setup_failed"
        elif sig in (signal.SIGXCPU,) or (sig == signal.SIGKILL and cpu >= req["cpu"] - 0.05):
            status = "timeout"
        else:
            status = "signaled" if sig is not None else "exited"
    import shutil

    shutil.rmtree(call_dir, ignore_errors=True)
    for leftover in os.listdir(state["base_dir"]):
        shutil.rmtree(os.path.join(state["base_dir"], leftover), ignore_errors=True)
    return {
        "id": req.get("id"), "status": status, "exit_code": exit_code, "signal": sig,
        "stdout": bufs[out_r].decode("utf-8", "replace"), "stderr": bufs[err_r].decode("utf-8", "replace"),
        "elapsed": elapsed, "cpu": cpu,
    }


def setup(init):
    """Preloads, freezes the heap and applies the zygote's own sandbox layers as `init`
    asks; returns the per-call state and the ready message. `run_call(req, state, seq)` then
    runs one call (the bench's fork floor calls both in-process, without the frame protocol)."""
    state = {"base_dir": init["base_dir"], "children_fd": None, "uid": None, "landlock_abi": 0}
    layers = {}
    preloaded, failed = [], []
    for name in init.get("preload", []):
        try:
            __import__(name)
            preloaded.append(name)
        except Exception as e:
            failed.append("%s: %s" % (name, e))
            continue
        # numpy imports these lazily; a child touching them would pay the import.
        for sub in LAZY_SUBMODULES.get(name, []):
            try:
                __import__(sub)
            except Exception:
                pass
        if name in WARM_UP:
            try:
                exec(compile(WARM_UP[name], "<warm-up>", "exec"), {"__name__": "__warmup__"})
            except Exception as e:
                failed.append("%s warm-up: %s" % (name, e))
    # Modules the per-call child needs, imported once here rather than per call.
    import contextlib, resource, shutil, tempfile  # noqa: F401

    # Move everything imported so far out of the collector's sight: a child's
    # first collection would otherwise touch every object's header and
    # copy-on-write the whole preloaded heap (tens of milliseconds per call).
    import gc

    gc.collect()
    gc.freeze()
    if LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0:
        try:
            state["children_fd"] = os.open("/proc/self/task/%d/children" % os.getpid(), os.O_RDONLY | os.O_CLOEXEC)
            layers["reaper"] = "active: subreaper, descendants killed after each call"
        except OSError as e:
            layers["reaper"] = "partial: subreaper without /proc children list (%s)" % e
    else:
        layers["reaper"] = "missing: PR_SET_CHILD_SUBREAPER failed"
    paths = read_paths(init.get("read_paths", []))
    uid = init.get("uid")
    if uid is not None and os.geteuid() == 0:
        ok, blocker = uid_can_read(uid, python_paths())
        if ok:
            state["uid"] = uid
            layers["privileges"] = "active: user code runs as uid %d with no capabilities" % uid
        else:
            layers["privileges"] = (
                "degraded: uid %d cannot read %s, so user code keeps uid 0 with every capability "
                "dropped, no_new_privs, and Landlock hiding /etc secrets, /proc and /root" % (uid, blocker)
            )
    elif os.geteuid() != 0:
        layers["privileges"] = "active: running as uid %d" % os.geteuid()
    else:
        layers["privileges"] = "degraded: uid 0 with every capability dropped (no unprivileged uid configured)"
    abi = landlock_abi() if init.get("landlock", True) else 0
    if abi:
        try:
            rights = fs_rights(abi)
            rules = [(p, LL_READ) for p in paths]
            rules += [(state["base_dir"], rights), ("/dev/null", LL_READ_FILE | LL_WRITE_FILE | LL_TRUNCATE)]
            rules += [("/dev/zero", LL_READ_FILE | LL_WRITE_FILE), ("/dev/full", LL_READ_FILE | LL_WRITE_FILE)]
            landlock_restrict(landlock_ruleset(abi, rights, rules, scoped=False))
            state["landlock_abi"] = abi
            extra = "" if abi >= 6 else " (ABI < 6: signals outside the sandbox are not scoped)"
            layers["filesystem"] = "active: Landlock ABI %d, writes only in the call directory%s" % (abi, extra)
        except OSError as e:
            layers["filesystem"] = "missing: Landlock failed: %s" % e
    else:
        layers["filesystem"] = "missing: Landlock unavailable or disabled"
    return state, {
        "ready": True, "preloaded": preloaded, "failed_preload": failed, "landlock_abi": state["landlock_abi"],
        "layers": layers, "python": sys.version.split()[0], "pid": os.getpid(),
    }


def main():
    init = read_msg()
    if init is None:
        return
    state, ready = setup(init)
    write_msg(ready)
    seq = 0
    while True:
        req = read_msg()
        if req is None:
            return
        seq += 1
        try:
            resp = run_call(req, state, seq)
        except Exception as e:
            resp = {"id": req.get("id"), "status": "failed", "error": "%s: %s" % (type(e).__name__, e)}
        write_msg(resp)
        if init.get("once"):
            return


if __name__ == "__main__":
    main()
