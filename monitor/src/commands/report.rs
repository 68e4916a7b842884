//! `montrace report RUN_DIR`: writes the report ([`crate::analysis::report::write_report`]) and
//! says where it went. A missing or invalid run directory and a bad `--group-by` are usage
//! errors.
use super::{CommandError, Exit};
use crate::{
    analysis::report::{load, model::GroupBy, write_report},
    cli::ReportArgs,
};

pub fn report(args: ReportArgs) -> Exit {
    GroupBy::parse(&args.group_by).map_err(CommandError::usage)?;
    load::check_run_dir(&args.run_dir).map_err(CommandError::usage)?;
    let written = write_report(&args.run_dir, args.format, &args.group_by)?;
    for path in written
        .iter()
        .filter(|p| p.extension().is_none_or(|e| e != "svg"))
    {
        crate::say_out!("{}", path.display());
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::{cli::ReportFormat, exit_code::EXIT_USAGE};

    #[test]
    fn bad_inputs_are_usage_errors() {
        let dir = tempfile::tempdir().unwrap();
        let args = |run_dir: &Path, group_by: &str| ReportArgs {
            run_dir: run_dir.to_path_buf(),
            format: ReportFormat::Html,
            group_by: group_by.into(),
        };
        let status = |result: Exit| result.unwrap_or_else(|err| err.exit_code());
        assert_eq!(
            status(report(args(&dir.path().join("missing"), "exe"))),
            EXIT_USAGE
        );
        assert_eq!(status(report(args(dir.path(), "exe"))), EXIT_USAGE);
        // `--group-by` is checked first, before the directory.
        let err = report(args(dir.path(), "(")).unwrap_err();
        assert_eq!(err.exit_code(), EXIT_USAGE);
        assert!(
            err.line()
                .starts_with("montrace: error: --group-by \"(\" is neither"),
            "{}",
            err.line()
        );
    }
}
