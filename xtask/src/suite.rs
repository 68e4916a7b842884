//! `cargo xtask test`: set-up, then the unit tests, the real-GPU tests (where NVML finds a GPU),
//! the Python package's tests (the wheel in a fresh virtual environment), then the root
//! end-to-end tests, which take the GPU path end to end through the NVML driver double
//! (tests/tests/gpu.rs, tests/nvml-double) on every machine.

use crate::util::{self, check};
use anyhow::{Context, Result};
use std::process::{Command, Stdio};

/// Which tiers of the suite to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tiers {
    pub unit: bool,
    pub python: bool,
    pub e2e: bool,
    pub kernels: bool,
}

impl Tiers {
    /// `--unit` / `--python` / `--e2e` / `--kernels` pick tiers; none means all.
    pub fn from_flags(unit: bool, python: bool, e2e: bool, kernels: bool) -> Self {
        if unit || python || e2e || kernels {
            Tiers {
                unit,
                python,
                e2e,
                kernels,
            }
        } else {
            Tiers {
                unit: true,
                python: true,
                e2e: true,
                kernels: true,
            }
        }
    }
}

/// `cargo xtask test --kernel NAME`: set-up, then the kernel tier on that kernel only.
pub fn kernel(verbose: bool, name: &str) -> Result<()> {
    crate::setup::setup(verbose)?;
    header(&format!("kernel tier: {name} in a VM"));
    crate::kernels::test(Some(name))
}

pub fn test(verbose: bool, tiers: Tiers) -> Result<()> {
    header("set-up: what this machine lacks (cargo xtask setup)");
    crate::setup::setup(verbose)?;

    if tiers.unit {
        // Plain `cargo test` covers the workspace's default members (monitor, monitor-common, xtask).
        // Not `--workspace`: that would take in monitor-ebpf (it cannot be built for the host)
        // and the root-only `tests` crate.
        header("unit tests: cargo test (default members)");
        check(util::cargo().arg("test")).context("unit tests failed")?;
        // The few unit tests that touch the kernel as root (a real run cgroup) are #[ignore]d in
        // a plain `cargo test`, which must pass for an ordinary user; they run here, as root.
        header("root unit tests: cargo test -p monitor --lib -- --ignored live_ (as root)");
        let mut root_units = util::cargo();
        root_units.args(["test", "-p", "monitor", "--lib", "--", "--ignored", "live_"]);
        if !util::is_root() {
            root_units.env(runner_var(), "sudo -E");
        }
        check(&mut root_units).context("root unit tests failed")?;
    }

    // The real-GPU tier goes with the unit tier: NVML needs no root.
    let no_real_gpu = if tiers.unit { gpu_tests()? } else { None };

    if tiers.python {
        header("python tests: the wheel in a fresh virtual environment, pytest python/tests");
        crate::python::test(verbose)?;
    }

    if tiers.e2e {
        header("end-to-end tests: cargo build -p monitor, then cargo test -p tests (as root)");
        check(util::cargo().args(["build", "-p", "monitor"]))
            .context("building montrace (debug) failed")?;
        build_dist(verbose)?;
        check(&mut e2e_command(true)).context("end-to-end tests failed")?;
    }

    if tiers.kernels {
        header("kernel tier: each kernel of xtask/src/kernels.rs in a VM (as root)");
        crate::kernels::test(None)?;
    }

    header("done");
    eprintln!(
        "xtask: all tests passed{}",
        gpu_outcome(tiers, no_real_gpu.as_deref())
    );
    Ok(())
}

/// What the closing line says of the GPU path: through the driver double (the e2e tier, on
/// every machine) and on a real GPU (the unit tier, where there is one).
fn gpu_outcome(tiers: Tiers, no_real_gpu: Option<&str>) -> String {
    let mut ran = Vec::new();
    if tiers.e2e {
        ran.push("through the NVML driver double".to_owned());
    }
    match (tiers.unit, no_real_gpu) {
        (true, None) => ran.push("on this machine's NVIDIA GPU".to_owned()),
        (true, Some(reason)) => ran.push(format!(
            "no real GPU here ({reason}; `cargo xtask gpu-check` where there is one)"
        )),
        (false, _) => {}
    }
    if ran.is_empty() {
        String::new()
    } else {
        format!("; GPU path: {}", ran.join(", "))
    }
}

/// The release tarball that tests/tests/dist.rs installs (`$MONTRACE_DIST`).
pub(crate) fn build_dist(verbose: bool) -> Result<()> {
    header("release tarball: cargo xtask dist (a static montrace, for tests/tests/dist.rs)");
    let tarball = crate::dist::build_tarball(verbose)?;
    eprintln!("xtask: built {}", tarball.display());
    Ok(())
}

/// `cargo test -p tests` (the root end-to-end suite) against target/debug/montrace, through
/// `sudo -E` when not root; stopping at the first failing test file when `fail_fast`.
pub(crate) fn e2e_command(fail_fast: bool) -> Command {
    let montrace = util::target_dir().join("debug/montrace");
    let mut cmd = util::cargo();
    cmd.args(["test", "-p", "tests"]);
    if !fail_fast {
        cmd.arg("--no-fail-fast");
    }
    cmd.args(["--", "--test-threads=1"])
        .env("MONTRACE_BIN", &montrace)
        .env(
            "MONTRACE_DIST",
            util::target_dir().join("dist").join(crate::dist::TARBALL),
        );
    if !util::is_root() {
        eprintln!("xtask: not root: the end-to-end test binaries run through `sudo -E`");
        cmd.env(runner_var(), "sudo -E");
    }
    cmd
}

/// The tests that use the real NVML (`#[ignore]`d in `cargo test`), where there is an NVIDIA
/// GPU. Returns why there is none, when there is none: the GPU path then runs through the
/// driver double only (the end-to-end tier).
fn gpu_tests() -> Result<Option<String>> {
    header("real-GPU tests: cargo test -p monitor gpu:: -- --ignored (the real NVML)");
    let ldconfig = util::stdout_of(Command::new("ldconfig").arg("-p"))
        .or_else(|| util::stdout_of(Command::new("/sbin/ldconfig").arg("-p")));
    match gpu_presence(&nvidia_smi(), ldconfig.as_deref()) {
        Ok(()) => {
            check(util::cargo().args(["test", "-p", "monitor", "gpu::", "--", "--ignored"]))
                .context("GPU tests failed")?;
            Ok(None)
        }
        Err(why) => {
            let reason = format!("no NVIDIA driver/device: {why}");
            eprintln!(
                "xtask: no real GPU here ({reason}): the GPU path runs through the NVML driver \
                 double in the end-to-end tier (tests/tests/gpu.rs)"
            );
            Ok(Some(reason))
        }
    }
}

/// What `nvidia-smi -L` said.
#[derive(Debug)]
enum NvidiaSmi {
    Missing,
    /// It ran and failed: the first line it printed (it explains, e.g. no driver loaded).
    Failed(String),
    Listed(String),
}

fn nvidia_smi() -> NvidiaSmi {
    match Command::new("nvidia-smi")
        .arg("-L")
        .stdin(Stdio::null())
        .output()
    {
        Err(_) => NvidiaSmi::Missing,
        Ok(out) if out.status.success() => {
            NvidiaSmi::Listed(String::from_utf8_lossy(&out.stdout).into_owned())
        }
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            let first = text.lines().map(str::trim).find(|l| !l.is_empty());
            NvidiaSmi::Failed(first.unwrap_or("no output").to_owned())
        }
    }
}

/// Ok when NVML should find a GPU: `nvidia-smi -L` lists one or, without nvidia-smi, the driver
/// library is in the linker cache (`ldconfig -p`). Err: why not.
fn gpu_presence(smi: &NvidiaSmi, ldconfig: Option<&str>) -> Result<(), String> {
    match smi {
        NvidiaSmi::Listed(out) if out.lines().any(|l| l.starts_with("GPU ")) => Ok(()),
        NvidiaSmi::Listed(_) => Err("`nvidia-smi -L` lists no GPU".into()),
        NvidiaSmi::Failed(first) => Err(format!("`nvidia-smi -L` failed: {first}")),
        NvidiaSmi::Missing if ldconfig.is_some_and(|c| c.contains("libnvidia-ml.so")) => Ok(()),
        NvidiaSmi::Missing => {
            Err("no nvidia-smi, and no libnvidia-ml.so in the linker cache (`ldconfig -p`)".into())
        }
    }
}

/// A tier's banner, with the time since the first banner: a CI log then shows where the
/// suite's time went.
pub(crate) fn header(title: &str) {
    static FIRST: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let since = FIRST
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs();
    eprintln!(
        "\n==== {title} ==== [{}:{:02} since the first tier]",
        since / 60,
        since % 60
    );
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
    fn no_flag_means_every_tier() {
        let all = Tiers {
            unit: true,
            python: true,
            e2e: true,
            kernels: true,
        };
        assert_eq!(Tiers::from_flags(false, false, false, false), all);
        let only = |unit, python, e2e, kernels| Tiers {
            unit,
            python,
            e2e,
            kernels,
        };
        assert_eq!(
            Tiers::from_flags(true, false, false, false),
            only(true, false, false, false)
        );
        assert_eq!(
            Tiers::from_flags(false, true, false, false),
            only(false, true, false, false)
        );
        assert_eq!(
            Tiers::from_flags(false, false, true, false),
            only(false, false, true, false)
        );
        assert_eq!(
            Tiers::from_flags(false, false, false, true),
            only(false, false, false, true)
        );
    }

    #[test]
    fn runner_variable_names_the_host_triple() {
        #[cfg(target_arch = "x86_64")]
        assert_eq!(runner_var(), "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER");
    }

    #[test]
    fn the_gpu_path_is_never_reported_skipped() {
        let all = Tiers::from_flags(false, false, false, false);
        let line = gpu_outcome(all, Some("no nvidia-smi"));
        assert_eq!(
            line,
            "; GPU path: through the NVML driver double, no real GPU here (no nvidia-smi; \
             `cargo xtask gpu-check` where there is one)"
        );
        assert!(!line.contains("SKIPPED"));
        assert_eq!(
            gpu_outcome(all, None),
            "; GPU path: through the NVML driver double, on this machine's NVIDIA GPU"
        );
        let e2e = Tiers::from_flags(false, false, true, false);
        assert_eq!(
            gpu_outcome(e2e, None),
            "; GPU path: through the NVML driver double"
        );
        assert_eq!(
            gpu_outcome(Tiers::from_flags(false, true, false, false), None),
            ""
        );
    }

    #[test]
    fn gpu_tier_runs_only_where_a_gpu_is_listed() {
        let h100 = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5b4c...)\n";
        assert_eq!(gpu_presence(&NvidiaSmi::Listed(h100.into()), None), Ok(()));
        assert!(gpu_presence(&NvidiaSmi::Listed(String::new()), None)
            .unwrap_err()
            .contains("lists no GPU"));
        let failed = NvidiaSmi::Failed(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.".into(),
        );
        let why = gpu_presence(
            &failed,
            Some("libnvidia-ml.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"),
        )
        .unwrap_err();
        assert!(why.contains("couldn't communicate"), "{why}");
        let cache =
            "\tlibnvidia-ml.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1\n";
        assert_eq!(gpu_presence(&NvidiaSmi::Missing, Some(cache)), Ok(()));
        assert!(gpu_presence(
            &NvidiaSmi::Missing,
            Some("\tlibc.so.6 (libc6,x86-64) => /lib/libc.so.6\n")
        )
        .unwrap_err()
        .contains("ldconfig -p"));
        assert!(gpu_presence(&NvidiaSmi::Missing, None).is_err());
    }
}
