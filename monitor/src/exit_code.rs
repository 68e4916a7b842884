//! Every exit status montrace gives of its own, in one place (a command's own status is passed
//! through: `run` and `attach` exit with it). A bottom-layer module: it uses nothing, and every
//! layer may use it. The Python package (python/montrace/_api.py) repeats three of them; a test
//! below holds it to these.

/// `montrace compare`: a metric regressed.
pub const EXIT_REGRESSED: i32 = 1;
/// Exit status for a usage error: bad arguments, a missing or unusable input, an `--out` that
/// already holds files.
pub const EXIT_USAGE: i32 = 2;
/// `montrace compare`/`bench`: the data cannot tell yet whether a gated metric regressed (more
/// pairs would): neither a pass nor a failure.
pub const EXIT_INCONCLUSIVE: i32 = 3;
/// `montrace bench`: a measured command (either side) failed: no verdict. Its own status is in
/// the log and on stderr, never montrace's exit status (it could read as a verdict).
pub const EXIT_BENCH_COMMAND_FAILED: i32 = 4;
/// `montrace bench`: a `--prepare` or `--cleanup` hook failed: no verdict.
pub const EXIT_BENCH_HOOK_FAILED: i32 = 5;
/// `montrace bench`: the repetitions measured a no-op (the warm-up did the work: nothing was
/// rebuilt), unless `--allow-no-op`.
pub const EXIT_BENCH_NO_OP: i32 = 6;
/// Exit status of montrace when a `--limit` stopped the run (as `timeout(1)` does).
pub const EXIT_LIMIT_BREACHED: i32 = 124;
/// Exit status of montrace when it fails itself (before or instead of the command's own).
pub const EXIT_MONTRACE_FAILED: i32 = 125;
/// The command exists but could not be executed (as in POSIX shells).
pub const EXIT_CANNOT_EXECUTE: i32 = 126;
/// The command was not found (as in POSIX shells).
pub const EXIT_NOT_FOUND: i32 = 127;

#[cfg(test)]
mod tests {
    use super::*;

    /// `NAME = VALUE` lines of the Python package's `EXIT_*` constants.
    fn python_constants(source: &str) -> Vec<(String, i32)> {
        source
            .lines()
            .filter_map(|line| {
                let (name, value) = line.split_once('=')?;
                let name = name.trim();
                if !name.starts_with("EXIT_") || name.contains(' ') {
                    return None;
                }
                let value = value.split('#').next()?.trim().parse().ok()?;
                Some((name.to_string(), value))
            })
            .collect()
    }

    #[test]
    fn the_python_package_gives_the_same_exit_statuses() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../python/montrace/_api.py");
        let source = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let python = python_constants(&source);
        let ours = |name: &str| match name {
            "EXIT_REGRESSED" => Some(EXIT_REGRESSED),
            "EXIT_USAGE" => Some(EXIT_USAGE),
            "EXIT_INCONCLUSIVE" => Some(EXIT_INCONCLUSIVE),
            "EXIT_BENCH_COMMAND_FAILED" => Some(EXIT_BENCH_COMMAND_FAILED),
            "EXIT_BENCH_HOOK_FAILED" => Some(EXIT_BENCH_HOOK_FAILED),
            "EXIT_BENCH_NO_OP" => Some(EXIT_BENCH_NO_OP),
            "EXIT_LIMIT_BREACHED" => Some(EXIT_LIMIT_BREACHED),
            "EXIT_MONTRACE_FAILED" => Some(EXIT_MONTRACE_FAILED),
            "EXIT_CANNOT_EXECUTE" => Some(EXIT_CANNOT_EXECUTE),
            "EXIT_NOT_FOUND" => Some(EXIT_NOT_FOUND),
            _ => None,
        };
        // The three it uses today, at least: a rename on either side must not pass unseen.
        for name in ["EXIT_LIMIT_BREACHED", "EXIT_MONTRACE_FAILED", "EXIT_USAGE"] {
            assert!(
                python.iter().any(|(n, _)| n == name),
                "{path} has no {name}: {python:?}"
            );
        }
        for (name, value) in &python {
            assert_eq!(
                ours(name),
                Some(*value),
                "{path}: {name} = {value}, monitor/src/exit_code.rs says {:?}",
                ours(name)
            );
        }
    }

    #[test]
    fn python_constants_are_read_from_assignments_only() {
        let source =
            "#: statuses\nEXIT_USAGE = 2\nEXIT_X = 7  # note\nif EXIT_USAGE == 2:\n    pass\n";
        assert_eq!(
            python_constants(source),
            [("EXIT_USAGE".to_string(), 2), ("EXIT_X".to_string(), 7)]
        );
    }
}
