//! `montrace compare BASELINE CANDIDATE`: prints the report on stdout; 0 when nothing
//! regressed, 1 when a metric did, 3 when the data cannot tell yet ([`crate::analysis::compare`]
//! decides); an unusable side or `--max` is a usage error.
use std::io::Write as _;

use anyhow::Context as _;

use super::{CommandError, Exit};
use crate::{
    analysis::compare::{parse_max, prepare, render, CompareError, CompareOptions},
    cli::CompareArgs,
};

/// The analysis' options from the command line: `--max` parsed, then the sides resolved (a
/// usage error each).
pub fn options(args: &CompareArgs) -> Result<CompareOptions, CommandError> {
    let limits = parse_max(&args.gate.max).map_err(CommandError::usage)?;
    let (baseline, candidate) = args.sides().map_err(CommandError::usage)?;
    Ok(CompareOptions {
        baseline: baseline.to_path_buf(),
        candidate: candidate.to_path_buf(),
        limits,
        confidence: args.gate.confidence,
        allow_different_commands: args.allow_different_commands,
        conditions: args.conditions.clone(),
        last: args.last,
        any_host: args.any_host,
    })
}

pub fn compare(args: CompareArgs) -> Exit {
    let report = match prepare(&options(&args)?) {
        Ok(report) => report,
        Err(CompareError::Usage(message)) => return Err(CommandError::usage(message)),
        Err(io) => return Err(anyhow::Error::from(io).into()),
    };
    let out = render(&report, args.gate.format);
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
        .context("cannot write the comparison to stdout")?;
    Ok(report.exit_code())
}
