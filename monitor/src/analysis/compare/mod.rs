//! `montrace compare`: decides whether a candidate run used more than a baseline.
//!
//! Pure core, thin edge: [`decide`] is the gate's decision for one metric (Welch's t-test plus a
//! minimum effect size, or the effect size alone with fewer than 2 samples a side),
//! [`build_report`] applies it to every metric of two loaded sides, and the `render_*`
//! functions turn a [`Report`] into text, Markdown, JSON or Bencher Metric Format. Only the
//! loaders touch the file system (and `commands::compare`, which prints the report).
//!
//! Every metric is "lower is better": a regression is an increase.
use std::{
    collections::BTreeMap,
    fmt::Write as _,
    fs, io,
    path::{Path, PathBuf},
};

use crate::units::{format_bytes_signif as format_bytes, md_code};
use serde::Serialize;

use crate::{
    cli::{CompareArgs, CompareFormat},
    store::summary_json::{Stats, Summary, METRICS, SUMMARY_FILE, SUMMARY_VERSION},
};

use crate::exit_code::{EXIT_INCONCLUSIVE, EXIT_REGRESSED};

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
