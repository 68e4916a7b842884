//! `montrace compare BASELINE CANDIDATE`: prints the report on stdout; 0 when nothing
//! regressed, 1 when a metric did, 3 when the data cannot tell yet ([`crate::analysis::compare`]
//! decides); an unusable side or `--max` is a usage error.
use std::io::Write as _;

use anyhow::Context as _;

use super::{CommandError, Exit};
use crate::{
    analysis::compare::{prepare, render, CompareError},
    cli::CompareArgs,
};

pub fn compare(args: CompareArgs) -> Exit {
    let report = match prepare(&args) {
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
