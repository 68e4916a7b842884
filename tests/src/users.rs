//! Ordinary users for the tests that run montrace the way a user does (under `sudo`, or without
//! privilege), and a copy of the binary such a user can reach.
//!
//! The workspace may sit under a directory only root can enter (a clone in /root, CI's own
//! checkout): `target/debug/montrace` is then out of another user's reach. [`reachable_montrace`]
//! copies it to a fresh directory under /tmp that every user can traverse.
use std::{
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use crate::{montrace_bin, require_root};

/// A copy of the montrace binary under test in a directory every user can enter and run from
/// (`/tmp/montrace-bin-<size>-<mtime>/montrace`, mode 0755), made once per build of the binary
/// and shared by the test processes (each used to make its own: 300 MB of /tmp per process, never
/// removed).
pub fn reachable_montrace() -> PathBuf {
    static COPY: OnceLock<PathBuf> = OnceLock::new();
    COPY.get_or_init(|| {
        use std::os::unix::fs::MetadataExt as _;
        let meta = std::fs::metadata(montrace_bin())
            .unwrap_or_else(|e| panic!("{}: {e}", montrace_bin().display()));
        let dir = PathBuf::from(format!(
            "/tmp/montrace-bin-{}-{}.{}",
            meta.size(),
            meta.mtime(),
            meta.mtime_nsec()
        ));
        let copy = dir.join("montrace");
        if !copy.is_file() {
            // Made whole under a name of this process's, then renamed into place: another test
            // process finds either no directory or a complete copy.
            let staging = PathBuf::from(format!("{}.{}", dir.display(), std::process::id()));
            let _ = std::fs::remove_dir_all(&staging);
            std::fs::create_dir(&staging).expect("creating the directory for the binary's copy");
            std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::fs::copy(montrace_bin(), staging.join("montrace")).unwrap_or_else(|e| {
                panic!(
                    "copying {} to {} so another user can run it: {e}",
                    montrace_bin().display(),
                    staging.display()
                )
            });
            std::fs::set_permissions(
                staging.join("montrace"),
                std::fs::Permissions::from_mode(0o755),
            )
            .unwrap();
            if std::fs::rename(&staging, &dir).is_err() {
                // Another process put its copy there first.
                let _ = std::fs::remove_dir_all(&staging);
            }
        }
        assert!(copy.is_file(), "no copy at {}", copy.display());
        assert_reachable(&copy);
        copy
    })
    .clone()
}

/// Fails with a clear message when `path` is not reachable by every user: each directory above
/// it must be searchable by others.
pub fn assert_reachable(path: &Path) {
    for dir in path.ancestors().skip(1) {
        if dir.as_os_str().is_empty() {
            continue;
        }
        let mode = std::fs::metadata(dir)
            .unwrap_or_else(|e| panic!("stat {}: {e}", dir.display()))
            .permissions()
            .mode();
        assert!(
            mode & 0o001 != 0,
            "{} is not searchable by other users (mode {mode:o}), so they cannot reach {}",
            dir.display(),
            path.display()
        );
    }
}

/// An ordinary user made for a test (`useradd`), with a home directory; removed with its home
/// when dropped.
pub struct TestUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

impl TestUser {
    /// Creates user `mt<tag><pid>` (names stay under 32 characters).
    pub fn create(tag: &str) -> TestUser {
        require_root();
        let name = format!("mt{tag}{}", std::process::id());
        let _ = Command::new("userdel").args(["-r", &name]).output();
        let out = Command::new("useradd")
            .args(["--create-home", "--shell", "/bin/sh", "--user-group", &name])
            .output()
            .expect("running useradd");
        assert!(
            out.status.success(),
            "useradd {name} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let id = |flag: &str| -> u32 {
            let out = Command::new("id").args([flag, &name]).output().unwrap();
            String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
        };
        let home = PathBuf::from(format!("/home/{name}"));
        assert!(home.is_dir(), "useradd made no home {}", home.display());
        TestUser {
            uid: id("-u"),
            gid: id("-g"),
            name,
            home,
        }
    }

    /// `montrace ARGS` as root with the `SUDO_*` variables of this user, as `sudo montrace` from
    /// the user's shell would start it (sudo itself may not be installed), in `cwd`.
    pub fn sudo_montrace(&self, cwd: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new(reachable_montrace());
        cmd.current_dir(cwd)
            .args(args)
            .env("SUDO_UID", self.uid.to_string())
            .env("SUDO_GID", self.gid.to_string())
            .env("SUDO_USER", &self.name)
            .env("SUDO_COMMAND", "montrace");
        cmd
    }

    /// A plain copy (no capabilities) of montrace in this user's home, theirs to run.
    pub fn plain_montrace(&self) -> PathBuf {
        let bin = self.home.join("montrace");
        std::fs::copy(montrace_bin(), &bin).unwrap();
        std::os::unix::fs::chown(&bin, Some(self.uid), Some(self.gid)).unwrap();
        bin
    }

    /// `program` run as this user from their home, with only HOME, a plain PATH and
    /// `MONTRACE_AGENT_SOCKET` (the agent at `socket`) in its environment: a client of the agent.
    pub fn agent_client(&self, program: impl AsRef<std::ffi::OsStr>, socket: &Path) -> Command {
        let mut cmd = self.command(program);
        cmd.current_dir(&self.home)
            .env_clear()
            .env("HOME", &self.home)
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("MONTRACE_AGENT_SOCKET", socket);
        cmd
    }

    /// A command run as this user (real and effective ids, no supplementary groups).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        use std::os::unix::process::CommandExt as _;
        let mut cmd = Command::new(program);
        // std drops the supplementary groups when it switches from root to another uid.
        cmd.uid(self.uid).gid(self.gid);
        cmd.env("HOME", &self.home).env("USER", &self.name);
        cmd
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        // Processes the user left (a test that failed half-way) would block userdel.
        let _ = Command::new("pkill")
            .args(["-9", "-u", &self.name])
            .output();
        let _ = Command::new("userdel").args(["-r", &self.name]).output();
    }
}

/// A cgroup v2 subtree delegated to a user, as systemd gives a user session: root makes a
/// directory in the cgroup2 hierarchy (at its top, or in `parent`), hands it the controllers its
/// parent gives (as `Delegate=yes` does), and gives the directory and its files to the user; the
/// user's montrace starts in its leaf `session`. Removed on drop, with the run cgroups montrace
/// left in it.
pub struct Delegated {
    pub dir: PathBuf,
}

impl Delegated {
    /// At the top of the cgroup2 hierarchy.
    pub fn new(user: &TestUser) -> Delegated {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let mount = mountinfo
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let sep = f.iter().position(|x| *x == "-")?;
                (f.get(sep + 1) == Some(&"cgroup2")).then(|| PathBuf::from(f[4]))
            })
            .expect("this host has no cgroup2 mount to delegate from");
        Delegated::within(&mount, user)
    }

    /// In `parent`, a cgroup2 directory of root's.
    pub fn within(parent: &Path, user: &TestUser) -> Delegated {
        let dir = parent.join(format!("montrace-test-delegated-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        std::fs::create_dir(dir.join("session")).unwrap();
        let offered = std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap();
        for c in offered.split_whitespace() {
            let _ = std::fs::write(dir.join("cgroup.subtree_control"), format!("+{c}"));
        }
        let chown = Command::new("chown")
            .arg("-R")
            .arg(format!("{}:{}", user.uid, user.gid))
            .arg(&dir)
            .status()
            .unwrap();
        assert!(chown.success());
        Delegated { dir }
    }

    /// The leaf the user's montrace starts in.
    pub fn session(&self) -> PathBuf {
        self.dir.join("session")
    }

    /// `BIN run --no-report -q ARGS --out OUT -- sh -c SCRIPT` as `user`, started in the leaf
    /// `session`.
    pub fn run(
        &self,
        bin: &Path,
        user: &TestUser,
        out: &Path,
        args: &[&str],
        script: &str,
    ) -> crate::Finished {
        let go = user.home.join("go");
        let _ = std::fs::remove_file(&go);
        // The user's shell waits until root has moved it into the delegated leaf, then becomes
        // montrace.
        let mut cmd = user.command("sh");
        cmd.current_dir(&user.home)
            .arg("-c")
            .arg("while [ ! -e \"$GO\" ]; do sleep 0.01; done; exec \"$@\"")
            .arg("sh")
            .arg(bin)
            .args(["run", "--no-report", "-q"])
            .args(args)
            .arg("--out")
            .arg(out)
            .args(["--", "sh", "-c", script])
            .env("GO", &go);
        let session = self.session().join("cgroup.procs");
        crate::run_with_timeout_and(&mut cmd, crate::run_timeout(), |pid| {
            std::fs::write(&session, pid.to_string()).unwrap();
            std::fs::write(&go, "").unwrap();
        })
    }
}

impl Drop for Delegated {
    fn drop(&mut self) {
        let montrace = self.dir.join("montrace");
        if let Ok(entries) = std::fs::read_dir(&montrace) {
            for e in entries.flatten().filter(|e| e.path().is_dir()) {
                let _ = std::fs::remove_dir(e.path());
            }
        }
        for d in [montrace, self.session(), self.dir.clone()] {
            let _ = std::fs::remove_dir(d);
        }
    }
}
