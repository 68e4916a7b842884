//! `montrace compare`: decides whether a candidate run used more than a baseline.
//!
//! Pure core, thin edge: [`decide`] is the gate's decision for one metric (Welch's interval of
//! the change plus a minimum effect size: pass, regressed, improved or inconclusive; the effect
//! size alone with fewer than 2 samples a side),
//! [`build_report`] applies it to every metric of two loaded sides (the same runs on both sides
//! are one sample, not two: they pass without a test, see [`overlap`]), and the `render_*`
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

use crate::store::summary_json::{Stats, Summary, METRICS, SUMMARY_FILE, SUMMARY_VERSION};

use crate::exit_code::{EXIT_INCONCLUSIVE, EXIT_REGRESSED};

mod gate;
mod load;
mod paired;
mod render;
mod stats;
#[cfg(test)]
mod tests;
mod unpaired;

pub use gate::*;
pub use load::*;
pub use paired::*;
pub use render::*;
pub use stats::*;
pub use unpaired::*;

// ---------------------------------------------------------------------------------------------
// The edge
// ---------------------------------------------------------------------------------------------

/// What `montrace compare` compares and how, as the analysis takes it (`commands::compare`
/// makes it from the command line: `--max` parsed, the sides resolved).
#[derive(Clone, Debug)]
pub struct CompareOptions {
    pub baseline: PathBuf,
    pub candidate: PathBuf,
    /// Each metric's limit (see [`parse_max`]).
    pub limits: BTreeMap<&'static str, f64>,
    pub confidence: f64,
    pub allow_different_commands: bool,
    /// A dataset baseline: only its runs with these labels, its newest `last`, from any host
    /// or only the candidate's kind.
    pub conditions: Vec<(String, String)>,
    pub last: u32,
    pub any_host: bool,
}

/// Everything up to the report: both sides, their commands, the decisions.
pub fn prepare(options: &CompareOptions) -> Result<Report, CompareError> {
    let (baseline, candidate) = (&options.baseline, &options.candidate);
    let candidate = load_side(candidate).map_err(|e| e.of_side("candidate"))?;
    let baseline = if crate::fleet::dataset::is_dataset(baseline) {
        load_dataset_side(options, baseline, &candidate).map_err(|e| e.of_side("baseline"))?
    } else if !options.conditions.is_empty() || options.any_host {
        return Err(CompareError::Usage(format!(
            "--where and --any-host choose runs of a dataset written by `montrace publish`, and \
             {} is not one (it has no runs/ folder)",
            baseline.display()
        )));
    } else {
        load_side(baseline).map_err(|e| e.of_side("baseline"))?
    };
    check_commands(&baseline, &candidate, options.allow_different_commands)?;
    Ok(build_report(
        &baseline,
        &candidate,
        &options.limits,
        options.confidence,
    ))
}
