//! `montrace compare`: decides whether a candidate run used more than a baseline.
//!
//! Pure core, thin edge: [`decide`] is the gate's decision for one metric (Welch's t-test plus a
//! minimum effect size, or the effect size alone with fewer than 2 samples a side),
//! [`build_report`] applies it to every metric of two loaded sides, and the `render_*`
//! functions turn a [`Report`] into text, Markdown, JSON or Bencher Metric Format. Only
//! [`compare_main`] and the loaders touch the file system.
//!
//! Every metric is "lower is better": a regression is an increase.
use std::{
    collections::BTreeMap,
    fmt::Write as _,
    fs,
    io::{self, Write as _},
    path::{Path, PathBuf},
};

use anyhow::Context as _;

use crate::units::{format_bytes_signif as format_bytes, md_code};
use serde::Serialize;

use crate::{
    cli::{CompareArgs, CompareFormat},
    store::summary_json::{Stats, Summary, METRICS, SUMMARY_FILE, SUMMARY_VERSION},
};

use crate::exit_code::{EXIT_INCONCLUSIVE, EXIT_REGRESSED, EXIT_USAGE};

mod gate;
mod load;
mod paired;
mod render;
mod stats;
#[cfg(test)]
mod tests;

pub use gate::*;
pub use load::*;
pub use paired::*;
pub use render::*;
pub use stats::*;

// ---------------------------------------------------------------------------------------------
// The edge
// ---------------------------------------------------------------------------------------------

/// `montrace compare`: prints the report on stdout; returns 0 when nothing regressed, 1 when a
/// metric did, 2 for usage errors (printed on stderr).
pub fn compare_main(args: CompareArgs) -> anyhow::Result<i32> {
    let report = match prepare(&args) {
        Ok(report) => report,
        Err(CompareError::Usage(message)) => {
            crate::say!("montrace: error: {message}");
            return Ok(EXIT_USAGE);
        }
        Err(io) => return Err(io.into()),
    };
    let out = render(&report, args.gate.format);
    let mut stdout = io::stdout().lock();
    stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
        .context("cannot write the comparison to stdout")?;
    Ok(report.exit_code())
}

/// Everything up to the report: `--max`, both sides, their commands, the decisions.
pub fn prepare(args: &CompareArgs) -> Result<Report, CompareError> {
    let limits = parse_max(&args.gate.max).map_err(CompareError::Usage)?;
    let (baseline, candidate) = args.sides().map_err(CompareError::Usage)?;
    let candidate = load_side(candidate).map_err(|e| e.of_side("candidate"))?;
    let baseline = if crate::fleet::dataset::is_dataset(baseline) {
        load_dataset_side(args, baseline, &candidate).map_err(|e| e.of_side("baseline"))?
    } else if !args.conditions.is_empty() || args.any_host {
        return Err(CompareError::Usage(format!(
            "--where and --any-host choose runs of a dataset written by `montrace publish`, and \
             {} is not one (it has no runs/ folder)",
            baseline.display()
        )));
    } else {
        load_side(baseline).map_err(|e| e.of_side("baseline"))?
    };
    check_commands(&baseline, &candidate, args.allow_different_commands)?;
    Ok(build_report(
        &baseline,
        &candidate,
        &limits,
        args.gate.confidence,
    ))
}
