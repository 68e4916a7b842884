//! Writes a synthetic run directory (a make-like tree through the real Parquet writer) for
//! `cargo xtask bench` to time `montrace report` on:
//! `synthetic_run DIR [PROCESSES] [SECONDS] [INTERVAL_MS]` (defaults: 5000, 600, 200).
use std::time::Duration;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(dir) = args.first() else {
        anyhow::bail!("usage: synthetic_run DIR [PROCESSES] [SECONDS] [INTERVAL_MS]");
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
    monitor::report::synthetic_run(
        dir,
        number(1, 5000)? as usize,
        Duration::from_secs(number(2, 600)?),
        Duration::from_millis(number(3, 200)?),
    )
}
