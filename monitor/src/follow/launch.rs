//! Starting the command: resolve it, fork it held at a barrier (so montrace can track its pid
//! before its first instruction), drop to the invoking user, exec. Plus the signal edge.
//!
//! The child is forked by hand rather than with `std::process::Command` because `spawn()` only
//! returns once the child has exec'd, and the pid must be in the kernel's tracked map before that.
//! Where the run cgroup is a cgroup v2 directory, the child is made in it (`clone3` with
//! `CLONE_INTO_CGROUP`) instead of being moved there once forked: a move waits for the kernel.
use std::{
    ffi::{CString, OsStr, OsString},
    io,
    os::{
        fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
        unix::ffi::{OsStrExt, OsStringExt},
    },
    path::{Path, PathBuf},
};

use anyhow::{bail, Context as _};

/// Whom the command runs as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub user: String,
    pub home: PathBuf,
}

/// The invoking user when montrace runs under sudo (`SUDO_UID`/`SUDO_GID`), else None (the
/// command keeps montrace's own identity).
pub fn sudo_identity() -> anyhow::Result<Option<Identity>> {
    let (Some(uid), Some(gid)) = (std::env::var_os("SUDO_UID"), std::env::var_os("SUDO_GID"))
    else {
        return Ok(None);
    };
    let uid: u32 = uid
        .to_string_lossy()
        .parse()
        .context("SUDO_UID is not a number")?;
    let gid: u32 = gid
        .to_string_lossy()
        .parse()
        .context("SUDO_GID is not a number")?;
    if uid == 0 {
        return Ok(None);
    }
    let (user, home) = passwd_entry(uid)?;
    let groups = group_list(&user, gid)?;
    Ok(Some(Identity {
        uid,
        gid,
        groups,
        user,
        home,
    }))
}

/// The file by which a site lets users of `sudo montrace` run commands as root (`run
/// --as-root`): it must exist, be root's and be writable by root alone. Without it, `sudo
/// montrace run --as-root -- sh` would be a root shell for anyone whose sudoers rule allows
/// montrace (docs/security.md).
pub const AS_ROOT_SITE_FILE: &str = "/etc/montrace/allow-sudo-as-root";

/// Why `run --as-root` is refused, when it is: montrace runs under sudo for an ordinary user
/// (`SUDO_UID`) and the site has not allowed it ([`AS_ROOT_SITE_FILE`]).
pub fn as_root_refused() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let sudo_uid = std::env::var_os("SUDO_UID")?;
    if sudo_uid.to_str() == Some("0") {
        return None;
    }
    let allowed = std::fs::symlink_metadata(AS_ROOT_SITE_FILE).is_ok_and(|meta| {
        use std::os::unix::fs::MetadataExt as _;
        meta.is_file() && meta.uid() == 0 && meta.mode() & 0o022 == 0
    });
    (!allowed).then(|| {
        format!(
            "--as-root under sudo would run the command as root for the user who ran sudo \
             (uid {}): refused. Run the command as yourself (drop --as-root), or, as the \
             site's administrator, allow it for every sudo user of montrace by creating {} \
             (owned by root, mode 0644 or stricter)",
            sudo_uid.to_string_lossy(),
            AS_ROOT_SITE_FILE
        )
    })
}

fn passwd_entry(uid: u32) -> anyhow::Result<(String, PathBuf)> {
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: zeroed passwd is a valid out-parameter for getpwuid_r.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: all pointers valid for the call; buf outlives the use of pwd's string pointers.
    let rc = unsafe {
        libc::getpwuid_r(
            uid,
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() {
        bail!("no user with uid {uid} (from SUDO_UID) in the password database");
    }
    // SAFETY: getpwuid_r filled pw_name/pw_dir with NUL-terminated strings inside buf.
    let (name, dir) = unsafe {
        (
            std::ffi::CStr::from_ptr(pwd.pw_name).to_bytes().to_vec(),
            std::ffi::CStr::from_ptr(pwd.pw_dir).to_bytes().to_vec(),
        )
    };
    Ok((
        String::from_utf8_lossy(&name).into_owned(),
        PathBuf::from(OsString::from_vec(dir)),
    ))
}

fn group_list(user: &str, gid: u32) -> anyhow::Result<Vec<u32>> {
    let name = CString::new(user)?;
    let mut count: libc::c_int = 64;
    loop {
        let mut groups = vec![0 as libc::gid_t; count as usize];
        let before = count;
        // SAFETY: groups has room for `count` entries; getgrouplist updates count.
        let rc = unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut count) };
        if rc >= 0 {
            groups.truncate(count as usize);
            return Ok(groups);
        }
        if count <= before {
            count = before * 2;
        }
    }
}

/// Finds the program like a shell would: a name with a slash is a path, else a PATH search.
pub fn resolve_command(program: &OsStr, path_var: Option<&OsStr>) -> Option<PathBuf> {
    let is_executable = |p: &Path| {
        let Ok(c) = CString::new(p.as_os_str().as_bytes()) else {
            return false;
        };
        // SAFETY: valid C string.
        p.is_file() && unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0
    };
    if program.as_bytes().contains(&b'/') {
        let path = PathBuf::from(program);
        return path.exists().then_some(path);
    }
    let path_var = path_var.unwrap_or(OsStr::new("/usr/local/bin:/usr/bin:/bin"));
    std::env::split_paths(path_var)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

/// A forked child waiting at the barrier before exec. Dropped without [`HeldChild::release`]
/// (montrace failed before it could start the command), it closes the barrier, so the child
/// exits without running anything, and reaps it: nothing of the run is left in its cgroup.
pub struct HeldChild {
    pub pid: u32,
    /// The child was made in the run cgroup given to [`spawn_held`] (nothing to move).
    pub in_cgroup: bool,
    barrier: Option<OwnedFd>,
    exec_status: Option<OwnedFd>,
}

impl Drop for HeldChild {
    fn drop(&mut self) {
        if self.barrier.take().is_some() {
            // The barrier reads end-of-file now: the child exits at once.
            let _ = wait_status(self.pid);
        }
    }
}

/// Why the command could not be started once forked.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("cannot execute {path}: {source}")]
    Exec { path: PathBuf, source: io::Error },
    #[error("cannot switch to uid {uid} / gid {gid} for the command: {source}")]
    Identity {
        uid: u32,
        gid: u32,
        source: io::Error,
    },
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds has room for two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two fresh descriptors we now own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn cstring(bytes: &[u8]) -> anyhow::Result<CString> {
    CString::new(bytes).context("argument or environment entry contains a NUL byte")
}

/// Forks the command and leaves it waiting at a barrier. Everything the child needs is
/// prepared here, because between fork and exec it may only make async-signal-safe calls.
/// `cgroup`: a cgroup v2 directory the child is to start in (see [`fork_into`]); where the
/// kernel cannot make it there, it is forked where montrace is, and
/// [`HeldChild::in_cgroup`] says which.
pub fn spawn_held(
    path: &Path,
    argv: &[OsString],
    extra_env: &[(OsString, OsString)],
    identity: Option<&Identity>,
    child_sigmask: &libc::sigset_t,
    cgroup: Option<BorrowedFd<'_>>,
) -> anyhow::Result<HeldChild> {
    let c_path = cstring(path.as_os_str().as_bytes())?;
    let c_argv: Vec<CString> = argv
        .iter()
        .map(|a| cstring(a.as_bytes()))
        .collect::<Result<_, _>>()?;
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| !extra_env.iter().any(|(extra, _)| extra == k))
        .collect();
    env.extend(extra_env.iter().cloned());
    if let Some(id) = identity {
        env.retain(|(k, _)| !matches!(k.to_str(), Some("HOME" | "USER" | "LOGNAME")));
        env.push(("HOME".into(), id.home.clone().into_os_string()));
        env.push(("USER".into(), id.user.clone().into()));
        env.push(("LOGNAME".into(), id.user.clone().into()));
    }
    let c_env: Vec<CString> = env
        .iter()
        .map(|(k, v)| {
            let mut entry = k.as_bytes().to_vec();
            entry.push(b'=');
            entry.extend_from_slice(v.as_bytes());
            cstring(&entry)
        })
        .collect::<Result<_, _>>()?;
    let mut argv_ptrs: Vec<*const libc::c_char> = c_argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut env_ptrs: Vec<*const libc::c_char> = c_env.iter().map(|e| e.as_ptr()).collect();
    env_ptrs.push(std::ptr::null());
    let ids = identity.map(|id| (id.uid, id.gid, id.groups.clone()));
    let open_files_limit = crate::host::original_open_files_limit();

    let (barrier_r, barrier_w) = pipe().context("creating the start barrier")?;
    let (status_r, status_w) = pipe().context("creating the exec status pipe")?;

    // SAFETY: after fork the child only calls async-signal-safe functions (read, write,
    // sigprocmask, setrlimit, the setgroups, setgid and setuid syscalls, execve, _exit, close) on
    // data prepared above.
    let (pid, in_cgroup) = unsafe { fork_into(cgroup) };
    if pid < 0 {
        return Err(io::Error::last_os_error()).context("fork failed");
    }
    if pid == 0 {
        // SAFETY: see above; this branch never returns.
        unsafe {
            child_after_fork(
                barrier_r.as_raw_fd(),
                barrier_w.as_raw_fd(),
                status_w.as_raw_fd(),
                child_sigmask,
                open_files_limit.as_ref(),
                ids.as_ref(),
                &c_path,
                &argv_ptrs,
                &env_ptrs,
            )
        }
    }
    drop(barrier_r);
    drop(status_w);
    Ok(HeldChild {
        pid: pid as u32,
        in_cgroup,
        barrier: Some(barrier_w),
        exec_status: Some(status_r),
    })
}

/// linux/sched.h: the child starts in the cgroup `clone_args.cgroup` names.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// fork(2), or, with `cgroup` (a cgroup v2 directory), clone3(2) with `CLONE_INTO_CGROUP`, which
/// makes the child in that cgroup: no move afterwards, whose wait for the kernel (for the
/// threadgroup lock's RCU grace period, 10 to 25 ms seen here and on a 16-core host) was most of
/// a start-up. Returns the pid (-1 on failure, errno set; 0 in the child) and whether the child
/// is in `cgroup`. Where clone3 fails (a kernel before 5.7, a seccomp filter that refuses it as
/// Docker's does, a cgroup this user may not enter), it falls back to fork.
///
/// clone3 is made as a raw syscall, past glibc, which does not learn that the process forked.
/// The child copes: it only makes plain syscalls, and makes setgroups, setgid and setuid as raw
/// syscalls too (glibc's wrappers would signal the parent's threads, which it believes its own).
///
/// # Safety
/// As fork in a multi-threaded process: the child may only make async-signal-safe calls.
unsafe fn fork_into(cgroup: Option<BorrowedFd<'_>>) -> (libc::pid_t, bool) {
    if let Some(cgroup) = cgroup {
        // SAFETY: clone_args is plain integers; all zero is "no option".
        let mut args: libc::clone_args = std::mem::zeroed();
        args.flags = CLONE_INTO_CGROUP;
        args.exit_signal = libc::SIGCHLD as u64;
        args.cgroup = cgroup.as_raw_fd() as u64;
        let pid = libc::syscall(
            libc::SYS_clone3,
            &args as *const libc::clone_args,
            std::mem::size_of::<libc::clone_args>(),
        );
        if pid >= 0 {
            return (pid as libc::pid_t, true);
        }
    }
    (libc::fork(), false)
}

/// What the forked child does: wait for the go, become the user, exec. If montrace goes away
/// before the go (it failed, or was killed), the barrier reads EOF and the child exits with 125
/// without running anything. A failure is reported
/// to the parent as (stage, errno) through the close-on-exec status pipe. `open_files_limit`:
/// RLIMIT_NOFILE as montrace found it, before it raised its own.
#[allow(clippy::too_many_arguments)]
unsafe fn child_after_fork(
    barrier: libc::c_int,
    barrier_parent_end: libc::c_int,
    status: libc::c_int,
    sigmask: &libc::sigset_t,
    open_files_limit: Option<&libc::rlimit>,
    ids: Option<&(u32, u32, Vec<u32>)>,
    path: &CString,
    argv: &[*const libc::c_char],
    env: &[*const libc::c_char],
) -> ! {
    // The parent's end of the barrier, inherited through fork: while the child holds it, the
    // barrier never reads EOF, and a child whose montrace died would wait forever (holding
    // montrace's eBPF programs and ring buffer, which it inherited too, until exec closes them).
    libc::close(barrier_parent_end);
    let fail = |stage: u8, code: i32| -> ! {
        let errno = *libc::__errno_location();
        let mut msg = [0u8; 5];
        msg[0] = stage;
        msg[1..].copy_from_slice(&errno.to_ne_bytes());
        libc::write(status, msg.as_ptr().cast(), msg.len());
        libc::_exit(code)
    };
    libc::sigprocmask(libc::SIG_SETMASK, sigmask, std::ptr::null_mut());
    // Rust's runtime ignores SIGPIPE, and an ignored signal stays ignored across exec: give the
    // command the default, or `yes | head -n1` would end with an error instead of SIGPIPE.
    libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    // The command starts with the limit montrace was given, not the one it raised for itself.
    if let Some(limit) = open_files_limit {
        libc::setrlimit(libc::RLIMIT_NOFILE, limit);
    }
    let mut byte = 0u8;
    loop {
        let n = libc::read(barrier, (&mut byte as *mut u8).cast(), 1);
        if n == 1 {
            break;
        }
        if n == 0 || *libc::__errno_location() != libc::EINTR {
            // montrace went away before releasing us: do not run untracked.
            libc::_exit(crate::exit_code::EXIT_MONTRACE_FAILED);
        }
    }
    if let Some((uid, gid, groups)) = ids {
        // Raw syscalls, this thread's credentials only: the child has no other thread (see
        // `fork_into`).
        if libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) != 0
            || libc::syscall(libc::SYS_setgid, *gid) != 0
            || libc::syscall(libc::SYS_setuid, *uid) != 0
        {
            fail(1, crate::exit_code::EXIT_CANNOT_EXECUTE);
        }
    }
    if libc::geteuid() != 0 {
        // An ordinary user's montrace (the granted binary) forked this child before it loaded
        // its programs, so the child holds the capabilities montrace held then. It has run only
        // this code since: the kernel refuses the user ptrace of a process holding capabilities
        // they lack (security/commoncap.c, cap_ptrace_access_check). montrace has dropped them
        // by now; the child drops them here so that the command starts with none (its exec, of
        // a program without file capabilities, would clear an ordinary user's permitted set
        // anyway).
        crate::kernel::privilege::clear_in_child();
    }
    libc::execve(path.as_ptr(), argv.as_ptr(), env.as_ptr());
    let code = if *libc::__errno_location() == libc::ENOENT {
        crate::exit_code::EXIT_NOT_FOUND
    } else {
        crate::exit_code::EXIT_CANNOT_EXECUTE
    };
    fail(2, code)
}

impl HeldChild {
    /// Lets the child go on to exec, and waits until it has (or failed to).
    pub fn release(mut self, path: &Path, identity: Option<&Identity>) -> Result<(), ExecError> {
        let (Some(barrier), Some(exec_status)) = (self.barrier.take(), self.exec_status.take())
        else {
            unreachable!("a held child is released once");
        };
        // SAFETY: writing one byte from a valid buffer to an fd we own.
        unsafe { libc::write(barrier.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
        drop(barrier);
        let mut msg = [0u8; 5];
        let mut got = 0;
        while got < msg.len() {
            // SAFETY: reading into the unfilled tail of msg from an fd we own.
            let n = unsafe {
                libc::read(
                    exec_status.as_raw_fd(),
                    msg[got..].as_mut_ptr().cast(),
                    msg.len() - got,
                )
            };
            if n > 0 {
                got += n as usize;
            } else if n == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                break;
            }
        }
        if got < msg.len() {
            // EOF: the close-on-exec pipe closed, so execve succeeded.
            return Ok(());
        }
        let source =
            io::Error::from_raw_os_error(i32::from_ne_bytes([msg[1], msg[2], msg[3], msg[4]]));
        match (msg[0], identity) {
            (1, Some(id)) => Err(ExecError::Identity {
                uid: id.uid,
                gid: id.gid,
                source,
            }),
            _ => Err(ExecError::Exec {
                path: path.to_path_buf(),
                source,
            }),
        }
    }
}

/// Waits for the child (blocking) and returns its raw wait status.
pub fn wait_status(pid: u32) -> io::Result<i32> {
    let mut status = 0;
    loop {
        // SAFETY: status is a valid out-pointer.
        let rc = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
        if rc == pid as libc::pid_t {
            return Ok(status);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// The signals montrace forwards to the tree.
pub const FORWARDED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Blocks the forwarded signals in this thread (call before any other thread exists, so all
/// inherit it) and returns the previous mask, which the command gets back before exec.
pub fn block_forwarded_signals() -> io::Result<libc::sigset_t> {
    // SAFETY: sigset_t values are initialised by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in FORWARDED {
            libc::sigaddset(&mut set, sig);
        }
        let mut old: libc::sigset_t = std::mem::zeroed();
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(old)
    }
}

/// A signalfd for the forwarded signals (they must be blocked first).
pub fn signal_fd() -> io::Result<OwnedFd> {
    // SAFETY: as in block_forwarded_signals.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in FORWARDED {
            libc::sigaddset(&mut set, sig);
        }
        let fd = libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// A signal montrace received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    pub signal: i32,
    /// Generated by the kernel for the terminal (Ctrl-C, hang-up): the terminal already
    /// delivered it to the foreground process group, the command included.
    pub from_terminal: bool,
}

/// Reads every pending signal from a non-blocking signalfd.
pub fn read_signals(fd: &OwnedFd) -> Vec<Received> {
    let mut out = Vec::new();
    loop {
        // SAFETY: zeroed siginfo is a valid buffer; read fills at most its size.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let n = unsafe {
            libc::read(
                fd.as_raw_fd(),
                (&mut info as *mut libc::signalfd_siginfo).cast(),
                size_of::<libc::signalfd_siginfo>(),
            )
        };
        if n != size_of::<libc::signalfd_siginfo>() as isize {
            return out;
        }
        out.push(Received {
            signal: info.ssi_signo as i32,
            from_terminal: info.ssi_code == libc::SI_KERNEL,
        });
    }
}

/// `--prepare` / `--cleanup`: runs `/bin/sh -c SCRIPT` to its end, unrecorded, with the
/// identity and environment the command gets (under sudo: the invoking user's, never root's),
/// its output on montrace's. Returns its exit status (128+N when signal N killed it).
pub fn run_script(script: &str, identity: Option<&Identity>) -> io::Result<i32> {
    use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.arg("-c").arg(script).stdin(std::process::Stdio::null());
    if let Some(id) = identity {
        cmd.env("HOME", &id.home)
            .env("USER", &id.user)
            .env("LOGNAME", &id.user);
    }
    let ids = identity.map(|id| (id.uid, id.gid, id.groups.clone()));
    // SAFETY: the hook only makes async-signal-safe syscalls on data prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if let Some((uid, gid, groups)) = &ids {
                if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                    || libc::setgid(*gid) != 0
                    || libc::setuid(*uid) != 0
                {
                    return Err(io::Error::last_os_error());
                }
            }
            if libc::geteuid() != 0 {
                crate::kernel::privilege::clear_in_child();
            }
            Ok(())
        });
    }
    let status = cmd.status()?;
    Ok(status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(crate::exit_code::EXIT_MONTRACE_FAILED))
}
