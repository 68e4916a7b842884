//! Small helpers around `std::process::Command` and the workspace layout.

use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

/// The workspace root (the parent of this crate's directory).
pub fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
}

/// Cargo's target directory: `$CARGO_TARGET_DIR` (relative to the current directory, as cargo reads it)
/// or `<workspace>/target`. Always absolute.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir
            } else {
                std::env::current_dir().unwrap_or_default().join(dir)
            }
        }
        None => workspace_root().join("target"),
    }
}

/// A `cargo` command (the cargo that runs this xtask) started in the workspace root.
pub fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(workspace_root());
    cmd
}

/// `$CARGO_HOME`, or `~/.cargo`.
pub fn cargo_home() -> Option<PathBuf> {
    std::env::var_os("CARGO_HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
}

/// Appends `$CARGO_HOME/bin` to `PATH` when it is missing there, so that tools installed by
/// `cargo install` (bpf-linker) are found by us and by the builds we start.
pub fn ensure_cargo_bin_on_path() {
    let Some(bin) = cargo_home().map(|h| h.join("bin")) else {
        return;
    };
    if !bin.is_dir() {
        return;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&path).any(|p| p == bin) {
        return;
    }
    let joined = std::env::join_paths(std::env::split_paths(&path).chain([bin]));
    if let Ok(joined) = joined {
        std::env::set_var("PATH", joined);
    }
}

/// Whether this process runs with effective uid 0.
pub fn is_root() -> bool {
    // Second field of the `Uid:` line of /proc/self/status is the effective uid.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

/// `program` as root: itself when we are root, else through `sudo` (with `sudo_flags`, e.g. `-E`).
pub fn as_root(program: impl Into<OsString>, sudo_flags: &[&str]) -> Command {
    let program = program.into();
    if is_root() {
        Command::new(program)
    } else {
        let mut cmd = Command::new("sudo");
        cmd.args(sudo_flags).arg(program);
        cmd
    }
}

/// The command line of `cmd` (with the environment it sets) for messages.
pub fn describe(cmd: &Command) -> String {
    let mut parts: Vec<String> = cmd
        .get_envs()
        .filter_map(|(k, v)| Some(format!("{}={}", k.to_string_lossy(), v?.to_string_lossy())))
        .collect();
    parts.push(cmd.get_program().to_string_lossy().into_owned());
    parts.extend(cmd.get_args().map(|a| {
        let a = a.to_string_lossy();
        if a.is_empty() || a.contains(char::is_whitespace) {
            format!("'{a}'")
        } else {
            a.into_owned()
        }
    }));
    parts.join(" ")
}

/// Runs `cmd` with inherited stdio; fails when it cannot start or exits unsuccessfully.
pub fn check(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("could not start `{}`", describe(cmd)))?;
    ensure_success(cmd, status)
}

/// Runs `cmd`; with `verbose` its output streams through, otherwise it is kept and shown
/// (the last lines of it) only when the command fails.
pub fn check_quietly(cmd: &mut Command, verbose: bool) -> Result<()> {
    if verbose {
        return check(cmd);
    }
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("could not start `{}`", describe(cmd)))?;
    if !out.status.success() {
        const TAIL: usize = 40;
        for (name, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
            let text = String::from_utf8_lossy(bytes);
            let lines: Vec<&str> = text.lines().collect();
            if lines.is_empty() {
                continue;
            }
            eprintln!(
                "---- {name} of `{}` (last {TAIL} lines) ----",
                describe(cmd)
            );
            for line in &lines[lines.len().saturating_sub(TAIL)..] {
                eprintln!("{line}");
            }
        }
    }
    ensure_success(cmd, out.status)
}

/// Runs `cmd` silently and returns its stdout when it succeeds; `None` when it cannot start or fails.
pub fn stdout_of(cmd: &mut Command) -> Option<String> {
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn ensure_success(cmd: &Command, status: ExitStatus) -> Result<()> {
    if status.success() {
        return Ok(());
    }
    match (status.code(), status.signal()) {
        (Some(code), _) => bail!("`{}` exited with status {code}", describe(cmd)),
        (_, Some(sig)) => bail!("`{}` was killed by signal {sig}", describe(cmd)),
        _ => bail!("`{}` failed ({status})", describe(cmd)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_quotes_arguments_with_spaces() {
        let mut cmd = Command::new("sh");
        cmd.env("A", "1").args(["-c", "echo hi"]);
        assert_eq!(describe(&cmd), "A=1 sh -c 'echo hi'");
    }

    #[test]
    fn check_reports_the_failing_command() {
        let err = check_quietly(Command::new("false").arg("x"), false).unwrap_err();
        assert!(
            err.to_string().contains("`false x` exited with status 1"),
            "{err}"
        );
        check_quietly(&mut Command::new("true"), false).unwrap();
    }

    #[test]
    fn workspace_root_holds_the_workspace_manifest() {
        assert!(workspace_root().join("Cargo.toml").is_file());
        assert!(workspace_root().join("rust-toolchain.toml").is_file());
    }
}
