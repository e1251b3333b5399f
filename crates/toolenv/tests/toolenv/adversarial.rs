//! Hostile snippets: each ends in the expected outcome, leaves nothing
//! behind, and the pool answers the next call.

use std::io::Read;
use std::net::TcpListener;

use std::time::Duration;

use rstar_toolenv::{Outcome, ToolCall};

use super::common::{run_hostile, run_hostile_call, run_hostile_short};

#[test]
fn infinite_loop_times_out() {
    let r = run_hostile_short("while True:\n    pass");
    assert_eq!(r.outcome, Outcome::Timeout, "{r:?}");
    assert_eq!(r.reason(), "worker_timeout");
}

#[test]
fn busy_loop_in_c_times_out() {
    let r = run_hostile_short("print(sum(range(10**12)))");
    assert_eq!(r.outcome, Outcome::Timeout, "{r:?}");
}

#[test]
fn memory_bomb_is_an_error() {
    // A generous wall clock: the bomb must end on the memory limit, not the
    // timeout, even on a loaded machine.
    let call = ToolCall::python(
        "chunks = []\nwhile True:\n    chunks.append(b'x' * (64 * 2**20))",
        "",
    )
    .with_timeout(Duration::from_secs(20));
    let r = run_hostile_call(call);
    assert_eq!(r.outcome, Outcome::Error, "{r:?}");
    assert!(r.stderr.contains("MemoryError"), "{}", r.stderr);
}

#[test]
fn fork_bomb_is_contained() {
    let code =
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass";
    let r = run_hostile_short(code);
    assert_eq!(r.outcome, Outcome::Timeout, "{r:?}");
}

#[test]
fn writes_outside_the_call_directory_fail() {
    let outside = std::env::temp_dir().join(format!("rstar-toolenv-escape-{}", std::process::id()));
    let code = format!(
        "import os, sys\n\
         for path in [{outside:?}, os.path.join(os.path.dirname(os.__file__), 'pwned.py'), '/root/pwned', '/etc/pwned']:\n    \
             try:\n        open(path, 'w').write('x')\n        print('WROTE', path)\n    \
             except OSError as e:\n        print('denied', type(e).__name__)\n\
         open('inside.txt', 'w').write('ok')\nprint(open('inside.txt').read())",
        outside = outside.display().to_string()
    );
    let r = run_hostile(&code, "");
    assert_eq!(r.outcome, Outcome::Output, "{r:?}");
    assert!(!r.stdout.contains("WROTE"), "{}", r.stdout);
    assert_eq!(
        r.stdout.matches("denied PermissionError").count(),
        4,
        "{}",
        r.stdout
    );
    assert!(r.stdout.ends_with("ok\n"));
    assert!(!outside.exists());
}

#[test]
fn parent_environment_and_secrets_are_unreadable() {
    let code = format!(
        "import os\n\
         print('CARGO' in ''.join(os.environ), sorted(os.environ))\n\
         for path in ['/proc/{pid}/environ', '/proc/%d/environ' % os.getppid(), '/proc/1/environ', '/etc/shadow', '/proc/self/environ']:\n    \
             try:\n        open(path, 'rb').read()\n        print('LEAKED', path)\n    \
             except OSError as e:\n        print('denied', type(e).__name__)",
        pid = std::process::id()
    );
    let r = run_hostile(&code, "");
    assert_eq!(r.outcome, Outcome::Output, "{r:?}");
    assert!(r.stdout.starts_with("False "), "{}", r.stdout);
    assert!(!r.stdout.contains("LEAKED"), "{}", r.stdout);
    assert_eq!(r.stdout.matches("denied").count(), 5, "{}", r.stdout);
}

#[test]
fn tcp_to_a_local_listener_is_refused() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let code = format!(
        "import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=1)\ns.sendall(b'leak')\nprint('connected')"
    );
    let r = run_hostile(&code, "");
    assert_eq!(r.outcome, Outcome::Error, "{r:?}");
    assert!(!r.stdout.contains("connected"));
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        Ok((mut s, _)) => {
            let mut buf = Vec::new();
            let _ = s.read_to_end(&mut buf);
            panic!("the sandbox connected to the listener and sent {buf:?}");
        }
        Err(e) => panic!("accept failed: {e}"),
    }
}

#[test]
fn hundred_megabytes_of_stdout_are_capped() {
    let r = run_hostile(
        "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * 10**6)",
        "",
    );
    assert_eq!(
        (r.outcome, r.reason()),
        (Outcome::Error, "output_limit_exceeded"),
        "{:?}",
        r.outcome
    );
    assert_eq!(r.stdout.len(), 256 << 10);
}

#[test]
fn killing_the_parent_or_the_supervisor_is_refused() {
    let code = format!(
        "import os, signal\n\
         for pid in [os.getppid(), {pid}]:\n    \
             try:\n        os.kill(pid, 0 if pid == {pid} else signal.SIGKILL)\n        print('SIGNALLED', pid)\n    \
             except PermissionError:\n        print('denied')",
        pid = std::process::id()
    );
    let r = run_hostile(&code, "");
    assert_eq!(r.outcome, Outcome::Output, "{r:?}");
    assert_eq!(r.stdout, "denied\ndenied\n");
}

/// The state letter of `/proc/<pid>/stat` (`T` when stopped).
fn proc_state(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    stat.rsplit(')')
        .next()
        .unwrap()
        .trim_start()
        .chars()
        .next()
        .unwrap()
}

#[test]
fn kill_minus_one_reaches_nothing_outside() {
    // kill(-1, sig) signals every process the caller may signal (and returns 0
    // even when each one refused). A stopped sentinel of ours must stay
    // stopped when the sandbox sends SIGCONT to "everyone".
    let mut sentinel = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let pid = sentinel.id();
    // SAFETY: signalling our own child.
    #[allow(unsafe_code)] // reason: stopping a sentinel child with kill(2)
    unsafe {
        libc::kill(pid as i32, libc::SIGSTOP);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while proc_state(pid) != 'T' && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(proc_state(pid), 'T');
    let r = run_hostile(
        "import os, signal\nos.kill(-1, signal.SIGCONT)\nprint('sent')",
        "",
    );
    std::thread::sleep(Duration::from_millis(100));
    let state = proc_state(pid);
    sentinel.kill().unwrap();
    sentinel.wait().unwrap();
    assert_eq!(r.stdout, "sent\n", "{r:?}");
    assert_eq!(state, 'T', "the sandbox resumed a process outside it");
}

#[test]
fn setsid_escapee_is_killed() {
    let code = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        os.chdir('/')\n        time.sleep(60)\n    os._exit(0)\nprint('parent done')";
    let r = run_hostile(code, "");
    assert_eq!(
        (r.outcome, r.stdout.as_str()),
        (Outcome::Output, "parent done\n"),
        "{r:?}"
    );
}

#[test]
fn segfault_through_ctypes_is_an_error() {
    let r = run_hostile(
        "import ctypes\nprint('before', flush=True)\nctypes.string_at(0)",
        "",
    );
    assert_eq!(r.outcome, Outcome::Error, "{r:?}");
    assert_eq!(r.signal, Some(libc::SIGSEGV));
    assert_eq!(r.stdout, "before\n");
}

#[test]
fn deep_recursion_is_an_error() {
    // With the limit lifted, Python 3.11 keeps frames on the heap: the call
    // ends in a crash, a MemoryError or the time limit, whichever comes first.
    let r = run_hostile_short(
        "import sys\nsys.setrecursionlimit(10**7)\ndef f(n):\n    return f(n + 1) + 1\nf(0)",
    );
    assert!(
        matches!(r.outcome, Outcome::Error | Outcome::Timeout),
        "{r:?}"
    );
    let r = run_hostile("def f(n):\n    return f(n + 1)\nf(0)", "");
    assert_eq!(r.outcome, Outcome::Error, "{r:?}");
    assert!(r.stderr.starts_with("RecursionError"), "{}", r.stderr);
}

#[test]
fn sys_exit_zero_mid_output_keeps_what_was_printed() {
    let r = run_hostile("print('a')\nimport sys\nsys.exit(0)\nprint('b')", "");
    assert_eq!(
        (r.outcome, r.stdout.as_str(), r.exit_code),
        (Outcome::Output, "a\n", Some(0))
    );
    let r = run_hostile("print('a')\nimport sys\nsys.exit(3)", "");
    assert_eq!(
        (r.outcome, r.stdout.as_str(), r.exit_code),
        (Outcome::Error, "a\n", Some(3))
    );
}

#[test]
fn closing_stdout_is_handled() {
    let r = run_hostile("import os\nos.close(1)\nprint('lost')", "");
    assert_ne!(r.outcome, Outcome::Internal, "{r:?}");
    assert_eq!(r.stdout, "");
    let r = run_hostile_short("import os\nos.close(1)\nos.close(2)\nwhile True:\n    pass");
    assert_eq!(r.outcome, Outcome::Timeout, "{r:?}");
}

#[test]
fn interpreter_files_are_not_modified() {
    let code = "import os, sys\n\
        files = [os.__file__, sys.executable]\n\
        try:\n    import numpy\n    files.append(numpy.__file__)\nexcept ImportError:\n    pass\n\
        for p in files:\n\
        \x20   for name, act in [('append', lambda: open(p, 'a')), ('chmod', lambda: os.chmod(p, 0o777)),\n\
        \x20                     ('utime', lambda: os.utime(p)), ('rename', lambda: os.rename(p, p + '.x')),\n\
        \x20                     ('truncate', lambda: os.truncate(p, 0)),\n\
        \x20                     ('hardlink', lambda: (os.link(p, 'h'), open('h', 'a'))),\n\
        \x20                     ('symlink', lambda: (os.symlink(p, 's%d' % len(p)), open('s%d' % len(p), 'a')))]:\n\
        \x20       try:\n            act()\n            print('CHANGED', name, p)\n\
        \x20       except OSError:\n            print('denied')";
    let r = run_hostile(code, "");
    assert_eq!(r.outcome, Outcome::Output, "{r:?}");
    assert!(!r.stdout.contains("CHANGED"), "{}", r.stdout);
    assert!(r.stdout.matches("denied").count() >= 14, "{}", r.stdout);
}

#[test]
fn unix_sockets_are_refused() {
    let code = "import socket\nfor fam in (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK):\n    try:\n        socket.socket(fam)\n        print('OPENED', fam)\n    except OSError as e:\n        print('denied', e.errno)\na, b = socket.socketpair()\na.send(b'ok')\nprint(b.recv(2))";
    let r = run_hostile(code, "");
    assert_eq!(r.outcome, Outcome::Output, "{r:?}");
    assert_eq!(r.stdout, "denied 1\ndenied 1\ndenied 1\ndenied 1\nb'ok'\n");
}

/// Writes 4 MiB files until the disk refuses; prints how many fit and the errno.
const FILL_THE_DISK: &str = "n = 0\ntry:\n    for i in range(1000):\n        open('f%d' % i, 'wb').write(b'x' * (4 << 20))\n        n += 1\nexcept OSError as e:\n    print(n, e.errno)";

/// Writes one file 1 MiB at a time until the write is refused; prints the bytes the file
/// holds and the errno. (Python ignores `SIGXFSZ`, so a write past `RLIMIT_FSIZE` fails with
/// `EFBIG` instead of killing the interpreter.)
const GROW_ONE_FILE: &str = "import os\nf = open('big', 'wb', buffering=0)\ntry:\n    for i in range(1000):\n        f.write(b'x' * (1 << 20))\nexcept OSError as e:\n    print(os.path.getsize('big'), e.errno)";

/// The bound the degraded disk layer promises (call directories on disk): `RLIMIT_FSIZE`
/// stops each file at the configured size, to the byte.
fn assert_one_file_stops_at(r: &rstar_toolenv::ToolResult, file_size: u64) {
    assert_eq!(r.outcome, Outcome::Output, "{r:?}");
    let (size, errno) = r.stdout.trim().split_once(' ').expect("size and errno");
    assert_eq!(errno, libc::EFBIG.to_string(), "{r:?}");
    assert_eq!(size.parse::<u64>().unwrap(), file_size, "{r:?}");
}

/// Wherever the disk layer is active (a private tmpfs per worker), the scratch's size bounds
/// all the files together; where it is degraded, the test checks the bound that mode promises
/// instead (each file at `RLIMIT_FSIZE`), so it checks something in every mode. The layers
/// found are printed; `cargo xtask ci` also prints `rstar tools doctor` before the tests.
#[test]
fn filling_the_disk_stops_at_the_scratch_size() {
    let report = super::common::pool().pool().report().expect("report");
    for layer in &report.layers {
        eprintln!(
            "sandbox layer {:<12} {:?}: {}",
            layer.name, layer.state, layer.detail
        );
    }
    let disk = report.layer("disk").expect("disk layer");
    if disk.state != rstar_toolenv::LayerState::Active {
        // The documented degraded mode: call directories on disk, each file bounded.
        assert_eq!(disk.state, rstar_toolenv::LayerState::Degraded, "{disk:?}");
        assert_one_file_stops_at(&run_hostile(GROW_ONE_FILE, ""), 64 << 20);
        return;
    }
    let r = run_hostile(FILL_THE_DISK, "");
    assert_eq!(r.outcome, Outcome::Output, "{r:?}");
    let (n, errno) = r.stdout.trim().split_once(' ').expect("count and errno");
    assert_eq!(errno, libc::ENOSPC.to_string());
    assert!(
        n.parse::<u32>().unwrap() < 17,
        "{n} files of 4 MiB fit in a 64 MiB scratch"
    );
}

/// The degraded disk layer, chosen (no scratch), on every machine: it says it is degraded, and
/// a file stops at `RLIMIT_FSIZE` (4 MiB here), to the byte.
#[test]
fn without_a_scratch_each_file_stops_at_the_file_size() {
    let pool = rstar_toolenv::BlockingPool::new(
        super::common::builder()
            .workers(1)
            .scratch_size(None)
            .file_size(4 << 20),
    )
    .expect("a pool without a scratch starts");
    let report = pool.pool().report().expect("report");
    let disk = report.layer("disk").expect("disk layer");
    assert_eq!(disk.state, rstar_toolenv::LayerState::Degraded, "{disk:?}");
    assert!(disk.detail.contains("RLIMIT_FSIZE"), "{disk:?}");
    let r = pool.run(rstar_toolenv::ToolCall::python(GROW_ONE_FILE, ""));
    assert_one_file_stops_at(&r, 4 << 20);
    super::common::assert_clean(&pool);
}

#[test]
fn user_code_does_not_run_as_root() {
    let report = super::common::pool().pool().report().expect("report");
    let privileges = report.layer("privileges").expect("privileges layer");
    let code = "import os\nprint(os.getuid(), os.geteuid(), os.getgid(), os.getgroups())\n\
                try:\n    os.setuid(1)\n    print('SETUID')\nexcept PermissionError:\n    print('no setuid')";
    let r = run_hostile(code, "");
    assert_eq!(r.outcome, Outcome::Output, "{r:?}");
    if privileges.state == rstar_toolenv::LayerState::Active {
        assert_eq!(r.stdout, "65534 65534 65534 []\nno setuid\n");
    } else {
        // The documented fallback: uid 0 with every capability dropped.
        assert_eq!(
            privileges.state,
            rstar_toolenv::LayerState::Degraded,
            "{privileges:?}"
        );
        assert!(r.stdout.ends_with("no setuid\n"), "{}", r.stdout);
    }
}
