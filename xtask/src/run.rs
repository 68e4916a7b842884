//! `cargo xtask run [-- CMD ARGS...]`: set-up, release build, then `montrace run -- CMD ARGS...`.

use crate::util::{self, check};
use anyhow::{Context, Result};
use std::os::unix::process::CommandExt;

/// The demo workload, run by `sh` when no command is given: a few seconds that exercise
/// what montrace records (many short processes, a memory peak, a daemon, CPU time).
pub const DEMO_SCRIPT: &str = r#"set -e
echo "demo: 200 short-lived processes"
for i in $(seq 200); do /bin/true; done
echo "demo: a ~150 MiB memory peak held for 0.5 s (python3)"
python3 -c "b=bytearray(150*1024*1024); import time; time.sleep(0.5)"
echo "demo: a little CPU work (sha256sum of 64 MiB from /dev/urandom)"
head -c 64M /dev/urandom | sha256sum >/dev/null
echo "demo: a double-forked daemon that outlives this script by ~1 s"
( setsid sh -c 'sleep 1' </dev/null >/dev/null 2>&1 & )
echo "demo: done"
"#;

pub fn run(verbose: bool, cmd: &[String]) -> Result<()> {
    crate::setup::setup(verbose)?;
    check(util::cargo().args(["build", "--release", "-p", "monitor"]))
        .context("building montrace (release) failed")?;

    let montrace = util::target_dir().join("release/montrace");
    let mut montrace_cmd = util::as_root(&montrace, &["-E"]);
    montrace_cmd.args(["run", "--"]);
    if cmd.is_empty() {
        // From a file rather than `sh -c`, so that montrace's summary names it in one line.
        let script = util::target_dir().join("xtask/montrace-demo.sh");
        std::fs::create_dir_all(script.parent().unwrap_or(&script))
            .and_then(|()| std::fs::write(&script, DEMO_SCRIPT))
            .with_context(|| format!("writing the demo workload to {}", script.display()))?;
        eprintln!(
            "xtask: no command given: monitoring the demo workload ({})",
            script.display()
        );
        montrace_cmd.arg("sh").arg(&script);
    } else {
        montrace_cmd.args(cmd);
    }
    if !util::is_root() {
        eprintln!("xtask: montrace needs root: running it through `sudo -E`");
    }
    // Replace this process: montrace's exit code and signals (Ctrl-C) then need no relaying.
    // It runs in the caller's directory, so relative paths in CMD (and montrace's --out) mean what they say.
    let err = montrace_cmd.exec();
    Err(err).with_context(|| format!("could not start `{}`", util::describe(&montrace_cmd)))
}

/// Where `cargo xtask setcap` installs montrace by default.
pub const INSTALL_PATH: &str = "/usr/local/bin/montrace";

/// `cargo xtask setcap [--to PATH]`: release build, install as root (owner root, mode 0755),
/// then the install-time grant, `montrace setcap PATH` (CAP_BPF + CAP_PERFMON). Every user of
/// the machine then gets exact tracking without sudo.
pub fn setcap(verbose: bool, to: &std::path::Path) -> Result<()> {
    crate::setup::setup(verbose)?;
    check(util::cargo().args(["build", "--release", "-p", "monitor"]))
        .context("building montrace (release) failed")?;
    let built = util::target_dir().join("release/montrace");
    if !util::is_root() {
        eprintln!(
            "xtask: installing {} and granting it needs root: through `sudo`",
            to.display()
        );
    }
    let mut install = util::as_root("install", &[]);
    install
        .args(["-o", "root", "-g", "root", "-m", "0755"])
        .arg(&built)
        .arg(to);
    check(&mut install).with_context(|| format!("installing montrace to {}", to.display()))?;
    let mut grant = util::as_root(to, &[]);
    grant.arg("setcap").arg(to);
    check(&mut grant).context("granting the capabilities failed")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn demo_script_is_valid_sh() {
        let status = Command::new("sh")
            .args(["-n", "-c", DEMO_SCRIPT])
            .status()
            .unwrap();
        assert!(status.success());
    }
}
