//! `montrace export RUN_DIR --format perfetto|csv|bmf [--out PATH]`: writes the run in another
//! tool's format ([`crate::analysis::export`]) and says where it went.
use std::path::Path;

use anyhow::Context as _;

use super::{CommandError, Exit};
use crate::{
    analysis::export::{write_csv, write_perfetto},
    analysis::report::load,
    cli::{ExportArgs, ExportFormat},
};

pub fn export(args: ExportArgs) -> Exit {
    if args.format == ExportFormat::Bmf {
        // From summary.json alone: a run of repetitions too.
        return export_bmf(&args.run_dir, args.out.as_deref());
    }
    load::check_run_dir(&args.run_dir).map_err(CommandError::usage)?;
    match args.format {
        ExportFormat::Perfetto => {
            let out = args.out.unwrap_or_else(|| args.run_dir.join("trace.json"));
            write_perfetto(&args.run_dir, &out)?;
            crate::say_out!("{}", out.display());
            crate::say!("montrace: open it in https://ui.perfetto.dev (Open trace file)");
        }
        ExportFormat::Csv => {
            let out = args.out.unwrap_or_else(|| args.run_dir.join("csv"));
            let written = write_csv(&args.run_dir, &out)?;
            for file in &written {
                crate::say_out!("{}", file.path.display());
                for warning in &file.skipped_columns {
                    crate::say!("montrace: warning: {}: {warning}", file.path.display());
                }
            }
        }
        ExportFormat::Bmf => unreachable!("handled above"),
    }
    Ok(0)
}

/// `--format bmf`: the run's summary.json in Bencher Metric Format, on stdout or to `out`.
fn export_bmf(run_dir: &Path, out: Option<&Path>) -> Exit {
    let path = run_dir.join(crate::store::summary_json::SUMMARY_FILE);
    let summary = crate::store::summary_json::read(&path).map_err(|err| {
        CommandError::usage(format!(
            "{}: {err}; BMF is made from a finished run's summary.json",
            path.display()
        ))
    })?;
    let text = crate::analysis::compare::render_bmf_of(&summary);
    match out {
        Some(out) => {
            crate::store::userfs::write_atomic(out, text.as_bytes())
                .with_context(|| format!("cannot write {}", out.display()))?;
            crate::say_out!("{}", out.display());
        }
        None => crate::say_out!("{}", text.trim_end()),
    }
    Ok(0)
}
