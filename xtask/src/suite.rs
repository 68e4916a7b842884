//! `cargo xtask test`: set-up, then the unit tests, then the root end-to-end tests.

use crate::util::{self, check};
use anyhow::{Context, Result};

/// Which tiers of the suite to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tiers {
    pub unit: bool,
    pub e2e: bool,
}

impl Tiers {
    /// `--unit` / `--e2e` pick one tier; neither means both.
    pub fn from_flags(unit: bool, e2e: bool) -> Self {
        if unit || e2e {
            Tiers { unit, e2e }
        } else {
            Tiers {
                unit: true,
                e2e: true,
            }
        }
    }
}

pub fn test(verbose: bool, tiers: Tiers) -> Result<()> {
    crate::setup::setup(verbose)?;

    if tiers.unit {
        // Plain `cargo test` covers the workspace's default members (monitor, monitor-common, xtask).
        // Not `--workspace`: that would take in monitor-ebpf (it cannot be built for the host)
        // and the root-only `tests` crate.
        header("unit tests: cargo test (default members)");
        check(util::cargo().arg("test")).context("unit tests failed")?;
    }

    if tiers.e2e {
        header("end-to-end tests: cargo build -p monitor, then cargo test -p tests (as root)");
        check(util::cargo().args(["build", "-p", "monitor"]))
            .context("building montrace (debug) failed")?;
        let montrace = util::target_dir().join("debug/montrace");
        let mut cmd = util::cargo();
        cmd.args(["test", "-p", "tests", "--", "--test-threads=1"])
            .env("MONTRACE_BIN", &montrace);
        if !util::is_root() {
            eprintln!("xtask: not root: the end-to-end test binaries run through `sudo -E`");
            cmd.env(runner_var(), "sudo -E");
        }
        check(&mut cmd).context("end-to-end tests failed")?;
    }

    eprintln!("\nxtask: all tests passed");
    Ok(())
}

fn header(title: &str) {
    eprintln!("\n==== {title} ====");
}

/// `CARGO_TARGET_<HOST TRIPLE>_RUNNER` for the host this xtask was built for.
fn runner_var() -> String {
    format!(
        "CARGO_TARGET_{}_UNKNOWN_LINUX_GNU_RUNNER",
        std::env::consts::ARCH.to_uppercase()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_flag_means_both_tiers() {
        assert_eq!(
            Tiers::from_flags(false, false),
            Tiers {
                unit: true,
                e2e: true
            }
        );
        assert_eq!(
            Tiers::from_flags(true, false),
            Tiers {
                unit: true,
                e2e: false
            }
        );
        assert_eq!(
            Tiers::from_flags(false, true),
            Tiers {
                unit: false,
                e2e: true
            }
        );
    }

    #[test]
    fn runner_variable_names_the_host_triple() {
        #[cfg(target_arch = "x86_64")]
        assert_eq!(runner_var(), "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER");
    }
}
