//! `cargo xtask gpu-check`: montrace's GPU figures against `nvidia-smi`'s on this machine's real
//! NVIDIA GPU. Builds the release binary, then runs `xtask/gpu-check/gpu_check.py` (python3's
//! standard library, pyarrow if present), which records a PyTorch or CuPy workload and prints
//! the table `figure | montrace | nvidia-smi | diff | verdict`. The script runs by itself on a
//! machine without a Rust toolchain, given a montrace binary:
//! `python3 xtask/gpu-check/gpu_check.py --montrace PATH --json OUT.json`.

use crate::util::{self, check};
use anyhow::{Context, Result};
use std::path::PathBuf;

/// The script, from the workspace root.
pub const SCRIPT: &str = "xtask/gpu-check/gpu_check.py";

#[derive(clap::Args, Debug)]
pub struct GpuCheckArgs {
    /// Also write the findings to this file, as JSON.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// How long the workload runs, seconds.
    #[arg(long, default_value_t = 12.0)]
    pub seconds: f64,
    /// Keep the run directories here (default: a temporary directory).
    #[arg(long, value_name = "DIR")]
    pub keep: Option<PathBuf>,
}

pub fn gpu_check(args: GpuCheckArgs) -> Result<()> {
    check(util::cargo().args(["build", "--release", "-p", "monitor"]))
        .context("building montrace (release) failed")?;
    let montrace = util::target_dir().join("release/montrace");
    // montrace run needs root for its eBPF tracking (it falls back to polling without).
    let mut cmd = util::as_root("python3", &["-E"]);
    cmd.arg(util::workspace_root().join(SCRIPT))
        .arg("--montrace")
        .arg(&montrace)
        .arg("--seconds")
        .arg(args.seconds.to_string());
    if let Some(json) = &args.json {
        cmd.arg("--json").arg(json);
    }
    if let Some(keep) = &args.keep {
        cmd.arg("--keep").arg(keep);
    }
    if !util::is_root() {
        eprintln!("xtask: montrace needs root: running the check through `sudo -E`");
    }
    check(&mut cmd).context("gpu-check found problems (see its table above)")
}
