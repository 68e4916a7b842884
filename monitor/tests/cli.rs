//! The real `montrace` binary, driven as a user would, without root: usage errors and their exit
//! codes, and `report`, `export` and `compare` in every format over run directories written by
//! montrace's own writer (the fixture run in tests/fixtures/run-small). Outputs are compared
//! with the golden files in tests/golden/; `MONTRACE_BLESS=1 cargo test -p monitor --test cli`
//! rewrites them (then read the diff).
use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

fn montrace() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_montrace"));
    // As a user runs it: no sudo identity, whoever runs the tests.
    cmd.env_remove("SUDO_UID")
        .env_remove("SUDO_GID")
        .env_remove("MONTRACE_MARK_SOCKET");
    cmd
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("running montrace")
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("montrace ended by a signal")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A copy of the fixture run (the report and exports are written into the run directory).
fn fixture_copy(tmp: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/run-small");
    let dst = tmp.join("run-small");
    std::fs::create_dir(&dst).unwrap();
    for entry in std::fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dst.join(entry.file_name())).unwrap();
    }
    dst
}

/// Compares `actual` with tests/golden/NAME, or writes it there with MONTRACE_BLESS=1.
fn golden(name: &str, actual: &[u8]) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("MONTRACE_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (MONTRACE_BLESS=1 writes it)", path.display()));
    assert!(
        expected == actual,
        "{} differs (MONTRACE_BLESS=1 rewrites it):\n{}",
        path.display(),
        String::from_utf8_lossy(actual)
    );
}

#[test]
fn no_subcommand_or_a_bad_flag_is_a_usage_error() {
    for args in [
        &[][..],
        &["frobnicate"],
        &["run", "--no-such-flag", "--", "true"],
        &["report"],
    ] {
        let out = run(montrace().args(args));
        assert_eq!(code(&out), 2, "montrace {args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("Usage"), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn a_duration_without_a_unit_is_refused_with_a_hint() {
    let tmp = tempfile::tempdir().unwrap();
    let out =
        run(montrace()
            .current_dir(tmp.path())
            .args(["run", "--interval", "100", "--", "true"]));
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("100ms or 100s"), "{}", stderr(&out));
    assert!(
        !tmp.path().join("montrace-runs").exists(),
        "nothing was created"
    );
    let out = run(montrace().args(["run", "--interval", "99999999999999999999s", "--", "true"]));
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
}

#[test]
fn report_and_export_of_what_is_not_a_run_are_usage_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    let not_a_run = tmp.path().join("empty");
    std::fs::create_dir(&not_a_run).unwrap();
    for args in [
        vec!["report".into(), missing.display().to_string()],
        vec!["report".into(), not_a_run.display().to_string()],
        vec![
            "export".into(),
            missing.display().to_string(),
            "--format".into(),
            "csv".into(),
        ],
    ] {
        let out = run(montrace().args(&args));
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).starts_with("montrace: error:"),
            "{}",
            stderr(&out)
        );
    }
    let run_dir = fixture_copy(tmp.path());
    let out = run(montrace()
        .args(["report"])
        .arg(&run_dir)
        .args(["--group-by", "("]));
    assert_eq!(code(&out), 2, "a bad --group-by: {}", stderr(&out));
}

#[test]
fn mark_outside_a_run_says_where_it_works() {
    let out = run(montrace().args(["mark", "build"]));
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("MONTRACE_MARK_SOCKET"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn report_of_the_fixture_run_matches_its_golden_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fixture_copy(tmp.path());
    let out = run(montrace()
        .arg("report")
        .arg(&dir)
        .args(["--format", "both"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // It names what it wrote.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("report.html") && stdout.contains("report.md"),
        "{stdout}"
    );
    golden(
        "run-small/report.md",
        &std::fs::read(dir.join("report.md")).unwrap(),
    );
    golden(
        "run-small/report.html",
        &std::fs::read(dir.join("report.html")).unwrap(),
    );
    let out =
        run(montrace()
            .arg("report")
            .arg(&dir)
            .args(["--format", "md", "--group-by", "comm"]));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    golden(
        "run-small/report-by-comm.md",
        &std::fs::read(dir.join("report.md")).unwrap(),
    );
}

#[test]
fn exports_of_the_fixture_run_match_their_golden_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fixture_copy(tmp.path());
    let csv = tmp.path().join("csv");
    let out = run(montrace()
        .arg("export")
        .arg(&dir)
        .args(["--format", "csv", "--out"])
        .arg(&csv));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let mut names: Vec<String> = std::fs::read_dir(&csv)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["events.csv", "processes.csv", "samples.csv", "system.csv"],
        "one CSV per table, no temporary file left"
    );
    for name in &names {
        golden(
            &format!("run-small/{name}"),
            &std::fs::read(csv.join(name)).unwrap(),
        );
    }
    let trace = tmp.path().join("trace.json");
    let out = run(montrace()
        .arg("export")
        .arg(&dir)
        .args(["--format", "perfetto", "--out"])
        .arg(&trace));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    golden("run-small/trace.json", &std::fs::read(&trace).unwrap());
}

/// `montrace compare A B --format F` from `dir` (relative paths keep the output the same
/// wherever the test runs).
fn compare(dir: &Path, a: &str, b: &str, format: &str) -> Output {
    run(montrace()
        .current_dir(dir)
        .args(["compare", a, b, "--format", format]))
}

#[test]
fn compare_in_every_format_passes_a_run_against_itself_and_fails_twice_the_cpu() {
    let tmp = tempfile::tempdir().unwrap();
    fixture_copy(tmp.path());
    // The candidate: the same run, with twice the CPU.
    let slow = tmp.path().join("slow");
    std::fs::create_dir(&slow).unwrap();
    let mut summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tmp.path().join("run-small/summary.json")).unwrap())
            .unwrap();
    for rep in summary["repetitions"].as_array_mut().unwrap() {
        for metric in ["cpu_s", "cpu_user_s"] {
            let v = rep["metrics"][metric].as_f64().unwrap();
            rep["metrics"][metric] = serde_json::json!(v * 2.0);
        }
    }
    std::fs::write(slow.join("summary.json"), summary.to_string()).unwrap();
    for (format, ext) in [
        ("text", "txt"),
        ("md", "md"),
        ("json", "json"),
        ("bmf", "bmf.json"),
    ] {
        let same = compare(tmp.path(), "run-small", "run-small", format);
        assert_eq!(code(&same), 0, "{format}: {}", stderr(&same));
        golden(&format!("compare/same.{ext}"), &same.stdout);
        let worse = compare(tmp.path(), "run-small", "slow", format);
        assert_eq!(code(&worse), 1, "{format}: {}", stderr(&worse));
        golden(&format!("compare/twice-the-cpu.{ext}"), &worse.stdout);
    }
    let missing = compare(tmp.path(), "run-small", "nope", "text");
    assert_eq!(code(&missing), 2, "{}", stderr(&missing));
    assert!(
        stderr(&missing).contains("candidate: nope does not exist"),
        "{}",
        stderr(&missing)
    );
}

/// As an ordinary user (when the tests run as root, the same commands run again as `nobody`
/// in a directory of theirs): every file they write is theirs.
#[test]
fn report_and_export_write_files_of_the_user_who_runs_them() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let tmp = tempfile::tempdir().unwrap();
    let dir = fixture_copy(tmp.path());
    if !root {
        // Already an ordinary user: the tests above ran as one.
        let out = run(montrace().arg("report").arg(&dir));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        return;
    }
    use std::os::unix::{fs::MetadataExt as _, process::CommandExt as _};
    std::process::Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(tmp.path())
        .status()
        .unwrap();
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    // The binary may sit where nobody cannot enter: run a copy from the temporary directory.
    let bin = tmp.path().join("montrace");
    std::fs::copy(env!("CARGO_BIN_EXE_montrace"), &bin).unwrap();
    for args in [vec!["report"], vec!["export", "--format", "csv"]] {
        let mut cmd = Command::new(&bin);
        cmd.args(&args).arg(&dir).uid(65534).gid(65534);
        let out = run(&mut cmd);
        assert_eq!(code(&out), 0, "{args:?} as nobody: {}", stderr(&out));
    }
    for name in ["report.html", "report.md", "csv/processes.csv"] {
        let meta = std::fs::metadata(dir.join(name)).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (65534, 65534), "{name}");
    }
}

#[test]
fn completions_and_the_man_page_come_from_the_cli() {
    let bash = run(montrace().args(["completions", "bash"]));
    assert_eq!(code(&bash), 0, "{}", stderr(&bash));
    let text = String::from_utf8_lossy(&bash.stdout);
    for word in [
        "_montrace",
        "--interval",
        "--prepare",
        "bench",
        "completions",
    ] {
        assert!(text.contains(word), "bash completions lack {word}");
    }
    for shell in ["zsh", "fish"] {
        let out = run(montrace().args(["completions", shell]));
        assert_eq!(code(&out), 0, "{shell}: {}", stderr(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains("montrace"));
    }
    let man = run(montrace().arg("man"));
    assert_eq!(code(&man), 0, "{}", stderr(&man));
    let page = String::from_utf8_lossy(&man.stdout);
    assert!(
        page.starts_with(".ie") && page.contains(".TH montrace 1"),
        "{page}"
    );
    assert_eq!(code(&run(montrace().args(["completions", "tcsh"]))), 2);
    // Every subcommand, from the CLI's own definition, in each.
    use clap::CommandFactory as _;
    let command = monitor::cli::Cli::command();
    let names: Vec<&str> = command.get_subcommands().map(|c| c.get_name()).collect();
    assert!(names.len() >= 12, "{names:?}");
    let fish = run(montrace().args(["completions", "fish"]));
    let fish = String::from_utf8_lossy(&fish.stdout);
    for name in &names {
        assert!(
            text.contains(&format!("montrace,{name})")),
            "bash completions lack `{name}`"
        );
        assert!(
            fish.contains(&format!("-a \"{name}\"")),
            "fish completions lack `{name}`"
        );
        assert!(
            page.contains(&format!("montrace\\-{name}(1)")),
            "the man page lacks `{name}`:\n{page}"
        );
    }
}
