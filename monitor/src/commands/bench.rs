//! `montrace bench`: checks the series, `--max`, the sides' directories and `--out` (a new or
//! empty directory, created here), then runs the series ([`crate::analysis::bench::run`]).
use std::path::PathBuf;

use anyhow::Context as _;

use super::{CommandError, Exit};
use crate::{
    analysis::{
        bench::{self, BenchOptions},
        compare::parse_max,
    },
    cli::BenchArgs,
    store::userfs,
};

pub fn bench(args: BenchArgs) -> Exit {
    bench::plan::series_length(args.warmup, args.repeat).map_err(CommandError::usage)?;
    let limits = parse_max(&args.gate.max).map_err(CommandError::usage)?;
    let mut dirs = [None, None];
    for (slot, (flag, dir)) in dirs.iter_mut().zip([
        ("--baseline-dir", &args.baseline_dir),
        ("--candidate-dir", &args.candidate_dir),
    ]) {
        if let Some(dir) = dir {
            if !dir.is_dir() {
                return Err(CommandError::usage(format!(
                    "{flag} {}: not a directory: give the side's checkout",
                    dir.display()
                )));
            }
            *slot = Some(std::path::absolute(dir).context("resolving the side's directory")?);
        }
    }
    let out = args.out.clone().unwrap_or_else(|| {
        let now = crate::host::realtime_ns();
        PathBuf::from("montrace-bench").join(crate::units::compact_utc(now))
    });
    if let Err(err) = userfs::create_dir_all(&out) {
        return Err(CommandError::usage(format!(
            "cannot create {}: {err}",
            out.display()
        )));
    }
    if userfs::list_dir(&out).map_or(true, |names| !names.is_empty()) {
        return Err(CommandError::usage(format!(
            "{} is not empty: give --out a new or empty directory",
            out.display()
        )));
    }
    Ok(bench::run(&options(args), &out, dirs, &limits)?)
}

/// The analysis' options from the command line.
fn options(args: BenchArgs) -> BenchOptions {
    BenchOptions {
        baseline: args.baseline,
        candidate: args.candidate,
        repeat: args.repeat,
        warmup: args.warmup,
        prepare: args.prepare,
        cleanup: args.cleanup,
        export_json: args.export_json,
        export_markdown: args.export_markdown,
        confidence: args.gate.confidence,
        format: args.gate.format,
        max_runs: args.max_runs,
        max_time: args.max_time,
        name: args.name,
        show_output: args.show_output,
        allow_no_op: args.allow_no_op,
    }
}
