//! A process that gets a pid of the test's choosing, to play the stranger that takes a pid the
//! run knew (root only).
//!
//! clone3's `set_tid` (Linux 5.5; `libc::clone_args` is the 5.7 layout, with `cgroup`) hands
//! out exactly the pid asked for, or fails with `EEXIST` while another process holds it. The
//! old way, writing `pid - 1` to `ns_last_pid` and forking, raced with every fork and thread of
//! the machine: on a fresh CI machine busy with its own start-up, 100 tries in a row lost the
//! pid.
use std::{ffi::CString, io};

/// A child of this process running `argv` under the pid it was asked to have. Dropping it kills
/// and reaps it.
#[derive(Debug)]
pub struct PinnedChild {
    pid: u32,
    reaped: bool,
}

/// Starts `argv` (`argv[0]` an absolute path) as a child with exactly `pid`. Fails while another
/// process holds the pid, or without root.
pub fn spawn_with_pid(pid: u32, argv: &[&str]) -> io::Result<PinnedChild> {
    let args: Vec<CString> = argv.iter().map(|a| CString::new(*a).unwrap()).collect();
    // Built before the clone: the child of a multi-threaded process may only exec or exit.
    let mut pointers: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    pointers.push(std::ptr::null());
    let tid = [pid as libc::pid_t];
    // SAFETY: clone_args is plain integers; all zero is "no option".
    let mut clone_args: libc::clone_args = unsafe { std::mem::zeroed() };
    clone_args.exit_signal = libc::SIGCHLD as u64;
    clone_args.set_tid = tid.as_ptr() as u64;
    clone_args.set_tid_size = 1;
    // SAFETY: clone3 without CLONE_VM copies this process; the child only calls execv and _exit
    // on memory prepared above.
    let got = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut clone_args as *mut libc::clone_args,
            std::mem::size_of::<libc::clone_args>(),
        )
    };
    match got {
        0 => unsafe {
            libc::execv(pointers[0], pointers.as_ptr());
            libc::_exit(127)
        },
        -1 => Err(io::Error::last_os_error()),
        got => {
            assert_eq!(got, pid as libc::c_long, "clone3 ignored set_tid");
            Ok(PinnedChild { pid, reaped: false })
        }
    }
}

impl PinnedChild {
    pub fn id(&self) -> u32 {
        self.pid
    }

    /// Whether it is still running (not exited, or exited but not reaped: the kernel still holds
    /// the pid).
    pub fn is_running(&mut self) -> bool {
        if self.reaped {
            return false;
        }
        let mut status = 0;
        // SAFETY: waits for this process's own child.
        let got = unsafe { libc::waitpid(self.pid as libc::pid_t, &mut status, libc::WNOHANG) };
        if got == self.pid as libc::pid_t {
            self.reaped = true;
        }
        got == 0
    }
}

impl Drop for PinnedChild {
    fn drop(&mut self) {
        if self.reaped {
            return;
        }
        // SAFETY: signals and reaps this process's own unreaped child (its pid cannot be reused
        // before the reap).
        unsafe {
            libc::kill(self.pid as libc::pid_t, libc::SIGKILL);
            libc::waitpid(self.pid as libc::pid_t, std::ptr::null_mut(), 0);
        }
    }
}
