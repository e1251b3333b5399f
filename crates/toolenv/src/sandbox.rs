//! Isolation layers applied to each worker before it runs any Python, their
//! detection at start-up, and the report `rstar tools doctor` prints.
//!
//! What the Rust side does (in the forked child, before `exec`): a new
//! session, a new network namespace (no interface but a downed loopback), a
//! private mount namespace with a size-limited tmpfs on the worker's
//! directory, a seccomp filter, and a clean environment. A pids cgroup (v1) per worker
//! bounds forks and lets the supervisor kill every process a call left. The
//! rest (Landlock, rlimits, capabilities, uid) is applied by the Python worker
//! itself, per call, in the child it forks (see `zygote.py`).
#![allow(unsafe_code)] // reason: pre_exec hooks, prctl/seccomp/unshare and kill need libc calls

use std::ffi::CString;
use std::fmt;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// Whether a layer is in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LayerState {
    /// Fully in force.
    Active,
    /// In force with a weaker mechanism than intended.
    Degraded,
    /// Not in force.
    Missing,
}

impl fmt::Display for LayerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LayerState::Active => "active",
            LayerState::Degraded => "degraded",
            LayerState::Missing => "MISSING",
        })
    }
}

/// One isolation layer and why it is (not) in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Layer {
    /// Short name: `network`, `filesystem`, `environment`, `privileges`,
    /// `limits`, `processes`, `syscalls`, `output`.
    pub name: &'static str,
    /// Whether it is in force.
    pub state: LayerState,
    /// How, or why not.
    pub detail: String,
}

/// Every layer of a pool, as detected when its first worker started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SandboxReport {
    /// The layers, in a fixed order.
    pub layers: Vec<Layer>,
    /// The interpreter's version.
    pub python: String,
    /// Modules preloaded into each worker.
    pub preloaded: Vec<String>,
    /// Modules that failed to preload, with the error.
    pub failed_preload: Vec<String>,
}

impl SandboxReport {
    /// The layer called `name`, if reported.
    pub fn layer(&self, name: &str) -> Option<&Layer> {
        self.layers.iter().find(|l| l.name == name)
    }

    /// Whether every layer is active.
    pub fn all_active(&self) -> bool {
        self.layers.iter().all(|l| l.state == LayerState::Active)
    }
}

impl fmt::Display for SandboxReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "python {}; preloaded: {}",
            self.python,
            self.preloaded.join(", ")
        )?;
        for p in &self.failed_preload {
            writeln!(f, "  preload failed: {p}")?;
        }
        for l in &self.layers {
            writeln!(f, "{:<12} {:<9} {}", l.name, l.state.to_string(), l.detail)?;
        }
        Ok(())
    }
}

/// Parses a zygote's `"active: …"` / `"degraded: …"` / `"missing: …"` line.
pub(crate) fn parse_layer(name: &'static str, text: Option<&str>) -> Layer {
    let text = text.unwrap_or("missing: not reported by the worker");
    let (state, detail) = match text.split_once(": ") {
        Some(("active", d)) => (LayerState::Active, d),
        Some(("degraded" | "partial", d)) => (LayerState::Degraded, d),
        Some((_, d)) => (LayerState::Missing, d),
        None => (LayerState::Missing, text),
    };
    Layer {
        name,
        state,
        detail: detail.to_string(),
    }
}

/// Layers the Rust side applies before `exec`, chosen once per pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PreExec {
    pub netns: bool,
    pub seccomp: bool,
    /// Size in bytes of the tmpfs mounted on each worker's directory (in a
    /// private mount namespace), when enabled and available.
    pub scratch: Option<u64>,
}

/// A directory the unprivileged uid cannot traverse (such as `/root`, mode
/// 0700, holding a pyenv interpreter) and the entries of it the interpreter
/// needs. In the worker's mount namespace it is covered by an empty tmpfs
/// (mode 0755) into which only those entries are bind-mounted back: the
/// interpreter becomes readable by the unprivileged uid and everything else
/// in the directory disappears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unmask {
    pub dir: PathBuf,
    pub children: Vec<std::ffi::OsString>,
}

/// The directories among the ancestors of `paths` that `uid` cannot
/// traverse (by mode bits), outermost first, with the entries needed.
pub(crate) fn blocked_dirs(paths: &[PathBuf], uid: u32) -> Vec<Unmask> {
    use std::collections::{BTreeMap, BTreeSet};
    use std::os::unix::fs::MetadataExt;
    let mut map: BTreeMap<PathBuf, BTreeSet<std::ffi::OsString>> = BTreeMap::new();
    for p in paths {
        let Ok(p) = p.canonicalize() else { continue };
        let mut ancestor = PathBuf::from("/");
        for comp in p.components().skip(1) {
            if ancestor != Path::new("/") {
                let blocked = std::fs::metadata(&ancestor)
                    .is_ok_and(|m| m.is_dir() && m.mode() & 0o001 == 0 && m.uid() != uid);
                if blocked {
                    map.entry(ancestor.clone())
                        .or_default()
                        .insert(comp.as_os_str().to_owned());
                }
            }
            ancestor = ancestor.join(comp);
        }
    }
    // Shorter paths first, so an outer directory is re-exposed before an inner one.
    let mut out: Vec<Unmask> = map
        .into_iter()
        .map(|(dir, c)| Unmask {
            dir,
            children: c.into_iter().collect(),
        })
        .collect();
    out.sort_by_key(|u| u.dir.components().count());
    out
}

#[derive(Debug, Clone)]
struct UnmaskC {
    dir: CString,
    /// (entry inside `dir`, empty parking directory outside it)
    children: Vec<(CString, CString)>,
}

/// A tmpfs to mount on a worker's directory (target and options), and the
/// directories to re-expose for an unprivileged uid, prepared before the fork.
#[derive(Debug, Clone)]
pub(crate) struct Scratch {
    target: CString,
    data: CString,
    unmasks: Vec<UnmaskC>,
}

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other)
}

impl Scratch {
    /// `hold` is a directory under which empty parking directories for the
    /// bind mounts are created (the caller removes it after the spawn).
    pub(crate) fn new(
        target: &Path,
        bytes: u64,
        unmasks: &[Unmask],
        hold: &Path,
    ) -> io::Result<Self> {
        let data = CString::new(format!("size={bytes},nr_inodes=16384,mode=0711"))
            .map_err(io::Error::other)?;
        let mut prepared = Vec::new();
        for (i, u) in unmasks.iter().enumerate() {
            let mut children = Vec::new();
            for (j, c) in u.children.iter().enumerate() {
                let entry = u.dir.join(c);
                if !entry.is_dir() {
                    return Err(io::Error::other(format!(
                        "{} is not a directory",
                        entry.display()
                    )));
                }
                let parking = hold.join(format!("{i}-{j}"));
                std::fs::create_dir_all(&parking)?;
                children.push((cstr(&entry)?, cstr(&parking)?));
            }
            prepared.push(UnmaskC {
                dir: cstr(&u.dir)?,
                children,
            });
        }
        Ok(Self {
            target: cstr(target)?,
            data,
            unmasks: prepared,
        })
    }
}

/// Re-exposes the interpreter under directories the unprivileged uid cannot
/// traverse (see [`Unmask`]); runs in the child, in its own mount namespace,
/// with only async-signal-safe system calls on strings prepared before the fork.
fn apply_unmasks(unmasks: &[UnmaskC]) -> io::Result<()> {
    let tmpfs = c"tmpfs";
    let opts = c"mode=0755,size=65536";
    let null = std::ptr::null::<libc::c_char>();
    for u in unmasks {
        // SAFETY: mount(2)/mkdir(2) on live NUL-terminated strings.
        unsafe {
            for (entry, parking) in &u.children {
                let flags = libc::MS_BIND | libc::MS_REC;
                if libc::mount(
                    entry.as_ptr(),
                    parking.as_ptr(),
                    null,
                    flags,
                    std::ptr::null(),
                ) != 0
                {
                    return Err(io::Error::last_os_error());
                }
            }
            let flags = libc::MS_NOSUID | libc::MS_NODEV;
            if libc::mount(
                tmpfs.as_ptr(),
                u.dir.as_ptr(),
                tmpfs.as_ptr(),
                flags,
                opts.as_ptr().cast(),
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            for (entry, parking) in &u.children {
                if libc::mkdir(entry.as_ptr(), 0o755) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if libc::mount(
                    parking.as_ptr(),
                    entry.as_ptr(),
                    null,
                    libc::MS_MOVE,
                    std::ptr::null(),
                ) != 0
                {
                    return Err(io::Error::last_os_error());
                }
            }
        }
    }
    Ok(())
}

/// The fork-time set-up shared by workers and probes. Only async-signal-safe
/// system calls on data prepared before the fork.
fn child_setup(
    layers: PreExec,
    scratch: Option<&Scratch>,
    filter: &[libc::sock_filter],
) -> io::Result<()> {
    // SAFETY: plain system calls with pointers to live, NUL-terminated strings.
    unsafe {
        if layers.netns && libc::unshare(libc::CLONE_NEWNET) != 0 {
            return Err(io::Error::last_os_error());
        }
        if let Some(s) = scratch {
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return Err(io::Error::last_os_error());
            }
            let root = c"/";
            let none = c"none";
            if libc::mount(
                none.as_ptr(),
                root.as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            let tmpfs = c"tmpfs";
            let flags = libc::MS_NOSUID | libc::MS_NODEV;
            if libc::mount(
                tmpfs.as_ptr(),
                s.target.as_ptr(),
                tmpfs.as_ptr(),
                flags,
                s.data.as_ptr().cast(),
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            apply_unmasks(&s.unmasks)?;
        }
    }
    if layers.seccomp {
        apply_filter(filter)?;
    }
    Ok(())
}

/// Installs the pre-exec hook on `cmd`.
pub(crate) fn install(
    cmd: &mut tokio::process::Command,
    layers: PreExec,
    filter: &'static [libc::sock_filter],
    scratch: Option<Scratch>,
) {
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe system calls (setsid, unshare, mount, prctl) on data
    // prepared before the fork; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            child_setup(layers, scratch.as_ref(), filter)
        });
    }
}

fn apply_filter(filter: &[libc::sock_filter]) -> io::Result<()> {
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: plain prctl calls; `prog` points at a live, well-formed BPF program.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &prog as *const libc::sock_fprog,
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// System calls user code never needs and that widen the attack surface:
/// namespaces and mounts, tracing, BPF, kernel keyrings and modules,
/// io_uring (which would bypass this filter), metadata changes, and the like.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn denied_syscalls() -> Vec<libc::c_long> {
    let mut v = vec![
        libc::SYS_ptrace,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_bpf,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_perf_event_open,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_userfaultfd,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_io_uring_setup,
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        libc::SYS_fsopen,
        libc::SYS_fsmount,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_acct,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        libc::SYS_quotactl,
        libc::SYS_syslog,
        libc::SYS_vhangup,
        // Landlock does not govern metadata: without these, user code running
        // as uid 0 could chmod, chown or re-date the interpreter's files.
        libc::SYS_fchmod,
        libc::SYS_fchmodat,
        452, // fchmodat2
        libc::SYS_fchown,
        libc::SYS_fchownat,
        libc::SYS_utimensat,
        libc::SYS_setxattr,
        libc::SYS_lsetxattr,
        libc::SYS_fsetxattr,
        libc::SYS_removexattr,
        libc::SYS_lremovexattr,
        libc::SYS_fremovexattr,
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([
        libc::SYS_iopl,
        libc::SYS_ioperm,
        libc::SYS_chmod,
        libc::SYS_chown,
        libc::SYS_lchown,
        libc::SYS_utime,
        libc::SYS_utimes,
        libc::SYS_futimesat,
    ]);
    v
}

const fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

const fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// The seccomp program: wrong architecture → kill; denied calls → `EPERM`;
/// `socket` → `EPERM`; `clone` with namespace flags →
/// `EPERM`; `clone3` → `ENOSYS` (libc then falls back to `clone`, whose flags
/// we can inspect); everything else allowed. `None` on other architectures.
pub(crate) fn seccomp_filter() -> Option<Vec<libc::sock_filter>> {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        use libc::{BPF_ABS, BPF_JEQ, BPF_JMP, BPF_JSET, BPF_K, BPF_LD, BPF_RET, BPF_W};
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let allow = libc::SECCOMP_RET_ALLOW;
        let ns_flags = (libc::CLONE_NEWNS
            | libc::CLONE_NEWUSER
            | libc::CLONE_NEWNET
            | libc::CLONE_NEWPID
            | libc::CLONE_NEWIPC
            | libc::CLONE_NEWUTS
            | libc::CLONE_NEWCGROUP) as u32;
        let mut f = vec![
            stmt(BPF_LD | BPF_W | BPF_ABS, 4),
            jump(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH, 1, 0),
            stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_KILL_PROCESS),
            stmt(BPF_LD | BPF_W | BPF_ABS, 0),
        ];
        #[cfg(target_arch = "x86_64")]
        {
            // x32 system calls carry bit 30; refuse them all.
            f.push(jump(
                libc::BPF_JMP | libc::BPF_JGE | BPF_K,
                0x4000_0000,
                0,
                1,
            ));
            f.push(stmt(BPF_RET | BPF_K, eperm));
        }
        for nr in denied_syscalls() {
            f.push(jump(BPF_JMP | BPF_JEQ | BPF_K, nr as u32, 0, 1));
            f.push(stmt(BPF_RET | BPF_K, eperm));
        }
        f.push(jump(
            BPF_JMP | BPF_JEQ | BPF_K,
            libc::SYS_clone3 as u32,
            0,
            1,
        ));
        f.push(stmt(
            BPF_RET | BPF_K,
            libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        ));
        // clone: args[0] (flags) must carry no namespace flag.
        f.push(jump(
            BPF_JMP | BPF_JEQ | BPF_K,
            libc::SYS_clone as u32,
            0,
            4,
        ));
        f.push(stmt(BPF_LD | BPF_W | BPF_ABS, 16));
        f.push(jump(BPF_JMP | BPF_JSET | BPF_K, ns_flags, 0, 1));
        f.push(stmt(BPF_RET | BPF_K, eperm));
        f.push(stmt(BPF_RET | BPF_K, allow));
        // socket: every family is refused, AF_UNIX included: a pathname unix
        // socket (a daemon's control socket) is reachable across network
        // namespaces and Landlock does not govern connect(2). socketpair(2)
        // stays allowed.
        f.push(jump(
            BPF_JMP | BPF_JEQ | BPF_K,
            libc::SYS_socket as u32,
            0,
            1,
        ));
        f.push(stmt(BPF_RET | BPF_K, eperm));
        f.push(stmt(BPF_RET | BPF_K, allow));
        Some(f)
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        None
    }
}

/// Tries each pre-exec layer by starting `python -c pass` under it, so a pool
/// learns which ones this kernel and these privileges allow. The scratch
/// tmpfs is tried with the unmasks first; the last value says whether they work.
pub(crate) fn probe_pre_exec(
    python: &Path,
    want: PreExec,
    filter: &'static [libc::sock_filter],
    scratch_dir: &Path,
    unmasks: &[Unmask],
) -> (PreExec, Vec<String>, bool) {
    let mut notes = Vec::new();
    let mut unmask_ok = false;
    let mut got = PreExec {
        netns: false,
        seccomp: false,
        scratch: None,
    };
    let hold = scratch_dir.with_extension("hold");
    let try_one = |layers: PreExec, unmasks: &[Unmask]| -> io::Result<()> {
        let scratch = match layers.scratch {
            Some(bytes) => {
                std::fs::create_dir_all(scratch_dir)?;
                Some(Scratch::new(scratch_dir, bytes, unmasks, &hold)?)
            }
            None => None,
        };
        let mut cmd = std::process::Command::new(python);
        cmd.args(["-I", "-S", "-c", "pass"])
            .env_clear()
            .stdin(std::process::Stdio::null());
        cmd.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        // SAFETY: as in `install`: only async-signal-safe calls in the child.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                child_setup(layers, scratch.as_ref(), filter)
            });
        }
        let status = cmd.status();
        let _ = std::fs::remove_dir(scratch_dir);
        let _ = std::fs::remove_dir_all(&hold);
        let status = status?;
        if status.success() {
            Ok(())
        } else {
            Err(io::Error::other(format!("probe exited with {status}")))
        }
    };
    let none = PreExec {
        netns: false,
        seccomp: false,
        scratch: None,
    };
    if want.netns {
        match try_one(
            PreExec {
                netns: true,
                ..none
            },
            &[],
        ) {
            Ok(()) => got.netns = true,
            Err(e) => notes.push(format!("network namespace unavailable: {e}")),
        }
    } else {
        notes.push("network namespace disabled by configuration".into());
    }
    if let Some(bytes) = want.scratch {
        let layers = PreExec {
            scratch: Some(bytes),
            ..none
        };
        if !unmasks.is_empty() {
            match try_one(layers, unmasks) {
                Ok(()) => unmask_ok = true,
                Err(e) => notes.push(format!(
                    "cannot re-expose the interpreter to the unprivileged uid: {e}"
                )),
            }
        }
        match if unmask_ok {
            Ok(())
        } else {
            try_one(layers, &[])
        } {
            Ok(()) => got.scratch = Some(bytes),
            Err(e) => notes.push(format!(
                "tmpfs scratch unavailable (call directories stay on disk): {e}"
            )),
        }
    }
    if want.seccomp && !filter.is_empty() {
        match try_one(
            PreExec {
                seccomp: true,
                ..none
            },
            &[],
        ) {
            Ok(()) => got.seccomp = true,
            Err(e) => notes.push(format!("seccomp unavailable: {e}")),
        }
    } else if filter.is_empty() {
        notes.push("seccomp filter not built for this architecture".into());
    } else {
        notes.push("seccomp disabled by configuration".into());
    }
    (got, notes, unmask_ok)
}

/// A v1 pids cgroup for one worker: bounds the number of processes and lists
/// every process a call left behind so the supervisor can kill it.
#[derive(Debug)]
pub(crate) struct Cgroup {
    dir: PathBuf,
}

/// Where this process's v1 pids hierarchy is mounted, joined with our own
/// cgroup path in it.
pub(crate) fn pids_cgroup_root() -> io::Result<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")?;
    let mount = mounts
        .lines()
        .find_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mut r = right.split_whitespace();
            let fstype = r.next()?;
            let opts = r.nth(1)?;
            (fstype == "cgroup" && opts.split(',').any(|o| o == "pids"))
                .then(|| left.split_whitespace().nth(4).map(PathBuf::from))?
        })
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "no cgroup v1 pids hierarchy is mounted",
            )
        })?;
    let own = std::fs::read_to_string("/proc/self/cgroup")?;
    let rel = own
        .lines()
        .find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let _ = parts.next()?;
            let ctrl = parts.next()?;
            let path = parts.next()?;
            ctrl.split(',')
                .any(|c| c == "pids")
                .then(|| path.trim_start_matches('/').to_string())
        })
        .unwrap_or_default();
    Ok(mount.join(rel))
}

impl Cgroup {
    /// Creates `<root>/<name>` with `pids.max = max`.
    pub(crate) fn create(root: &Path, name: &str, max: u32) -> io::Result<Self> {
        let dir = root.join(name);
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let cg = Self { dir };
        std::fs::write(cg.dir.join("pids.max"), max.to_string())?;
        Ok(cg)
    }

    /// Moves `pid` (and later its descendants) into the cgroup.
    pub(crate) fn add(&self, pid: u32) -> io::Result<()> {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
    }

    /// Every process in the cgroup.
    pub(crate) fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// SIGKILLs every process in the cgroup except `keep`; returns how many.
    pub(crate) fn kill_all_except(&self, keep: Option<i32>) -> usize {
        let mut killed = 0;
        for _ in 0..50 {
            let pids: Vec<i32> = self
                .pids()
                .into_iter()
                .filter(|p| Some(*p) != keep)
                .collect();
            if pids.is_empty() {
                break;
            }
            for pid in pids {
                // SAFETY: kill(2) with a pid read from our own cgroup.
                if unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
                    killed += 1;
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        killed
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for _ in 0..100 {
            self.kill_all_except(None);
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        tracing::warn!(dir = %self.dir.display(), "could not remove a worker cgroup");
    }
}

/// Removes what pools of dead processes left behind: `rstar-toolenv-<pid>-<n>`
/// directories under `dir` whose `<pid>` is gone (a supervisor killed with
/// SIGKILL, or a pool held in a `static` that is never dropped). Works for
/// both the temporary root and the pids cgroup root (where a leftover
/// cgroup's worker subdirectories are removed first).
pub(crate) fn reap_stale(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("rstar-toolenv-")) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        // SAFETY: kill(2) with signal 0 only checks whether the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0
            || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if alive || pid == std::process::id() as i32 {
            continue;
        }
        let path = entry.path();
        if path.join("cgroup.procs").exists() {
            for sub in std::fs::read_dir(&path).into_iter().flatten().flatten() {
                if sub.path().is_dir() {
                    drop(Cgroup { dir: sub.path() });
                }
            }
            let _ = std::fs::remove_dir(&path);
        } else {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// Whether this process runs as root.
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// SIGKILLs a whole process group.
pub(crate) fn kill_group(pgid: i32) {
    if pgid > 1 {
        // SAFETY: kill(2) on a process group we created with setsid.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_lines_parse() {
        assert_eq!(
            parse_layer("x", Some("active: ok")).state,
            LayerState::Active
        );
        assert_eq!(parse_layer("x", Some("degraded: weaker")).detail, "weaker");
        assert_eq!(
            parse_layer("x", Some("missing: gone")).state,
            LayerState::Missing
        );
        assert_eq!(parse_layer("x", None).state, LayerState::Missing);
        assert_eq!(parse_layer("x", Some("garbage")).state, LayerState::Missing);
    }

    #[test]
    fn filter_jumps_stay_in_bounds() {
        let Some(f) = seccomp_filter() else { return };
        for (i, ins) in f.iter().enumerate() {
            if ins.code as u32 & 0x07 == libc::BPF_JMP {
                assert!(
                    i + 1 + (ins.jt.max(ins.jf) as usize) < f.len(),
                    "jump at {i} leaves the program"
                );
            }
        }
        let last = f.last().unwrap();
        assert_eq!(
            (last.code as u32, last.k),
            (libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW)
        );
    }
}
