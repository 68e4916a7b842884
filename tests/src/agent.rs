//! `montrace agent` for the tests: root starts it on a socket of its own (issue 33's agent tests,
//! the Slurm tests' node agent).
use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crate::{montrace_bin, require_root, run_timeout};

/// `montrace agent` as root on a socket of its own, stopped (SIGTERM) when dropped.
pub struct Agent {
    child: Option<Child>,
    dir: PathBuf,
    pub socket: PathBuf,
}

impl Agent {
    pub fn start() -> Agent {
        Agent::start_with(&[])
    }

    pub fn start_with(args: &[&str]) -> Agent {
        require_root();
        let dir = PathBuf::from(format!("/tmp/montrace-agent-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let socket = dir.join("agent.sock");
        let child = Command::new(montrace_bin())
            .arg("agent")
            .arg("--socket")
            .arg(&socket)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting montrace agent");
        let deadline = Instant::now() + run_timeout();
        while !socket.exists() {
            assert!(Instant::now() < deadline, "the agent made no socket");
            std::thread::sleep(Duration::from_millis(20));
        }
        Agent {
            child: Some(child),
            dir,
            socket,
        }
    }

    /// The agent's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the agent runs").id()
    }

    /// Kills the agent outright (SIGKILL): no flush, no clean-up.
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("the agent runs");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// Stops the agent (SIGTERM) and returns what it printed and its exit status.
    pub fn stop(&mut self) -> std::process::Output {
        let child = self.child.take().expect("the agent runs");
        // SAFETY: plain kill(2) of the agent, our child.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        child.wait_with_output().expect("waiting for the agent")
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.stop();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
