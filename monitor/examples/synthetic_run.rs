//! Writes a synthetic run directory (a make-like tree through the real Parquet writer) for
//! `cargo xtask bench` to time `montrace report` on:
//! `synthetic_run DIR [PROCESSES] [SECONDS] [INTERVAL_MS] [GPUS]` (defaults: 5000, 600, 200, 0).
//! With GPUS > 0 the run also gets gpu.parquet and gpu_processes.parquet (`make` and each `cc1`
//! holding GPU memory on GPUs 0 and 1), to see the report's GPU plots without a GPU.
use std::time::Duration;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(dir) = args.first() else {
        anyhow::bail!("usage: synthetic_run DIR [PROCESSES] [SECONDS] [INTERVAL_MS] [GPUS]");
    };
    let number = |i: usize, default: u64| -> anyhow::Result<u64> {
        Ok(args
            .get(i)
            .map(|a| a.parse())
            .transpose()?
            .unwrap_or(default))
    };
    let dir = std::path::Path::new(dir);
    std::fs::create_dir_all(dir)?;
    let processes = number(1, 5000)? as usize;
    let duration = Duration::from_secs(number(2, 600)?);
    let interval = Duration::from_millis(number(3, 200)?);
    monitor::analysis::report::synthetic_run(dir, processes, duration, interval)?;
    let gpus = u32::try_from(number(4, 0)?)?;
    if gpus > 0 {
        monitor::analysis::report::add_synthetic_gpu(dir, duration, interval, gpus)?;
        monitor::analysis::report::add_synthetic_gpu_processes(dir, processes, duration, interval)?;
    }
    Ok(())
}
