//! montrace's own failures: each has its exit status, says what to do next, and leaves no run
//! directory behind when nothing was recorded.
use std::os::unix::fs::PermissionsExt as _;

use tests::{montrace_command, require_root, run_montrace, run_with_timeout, Finished, TIMEOUT};

/// `montrace run --out <tmp>/run ARGS -- CMD`, and the directory that must not appear.
fn montrace_fails(args: &[&str], cmd: &[&str]) -> (Finished, tempfile::TempDir) {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let finished = run_with_timeout(
        &mut montrace_command(&tmp.path().join("run"), args, cmd),
        TIMEOUT,
    );
    (finished, tmp)
}

#[test]
fn not_found_command_exits_127() {
    for program in ["/nonexistent-cmd-xyz", "nonexistent-cmd-xyz"] {
        let (run, tmp) = montrace_fails(&[], &[program, "arg"]);
        assert_eq!(run.code(), 127, "{run:?}");
        assert!(run.stderr.contains("not found"), "{run:?}");
        assert!(
            run.stderr.contains(program),
            "the message names the command: {run:?}"
        );
        assert!(
            !tmp.path().join("run").exists(),
            "no run directory for a command that never ran"
        );
    }
}

#[test]
fn cannot_execute_exits_126() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("not-executable");
    std::fs::write(&script, "#!/bin/sh\ntouch ran\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let run = run_montrace(&[], &[script.to_str().unwrap()]);
    run.assert_code(126);
    assert!(
        run.stderr.contains("cannot execute") && run.stderr.contains("Permission denied"),
        "{run:?}"
    );
    // The attempt is recorded: the forked child exited 126 without a successful exec.
    let json = run.run_json();
    assert_eq!(json["exit_code"], 126, "{json}");
    let rows = run.processes();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0].exit_code, rows[0].exec_count),
        (Some(126), 0),
        "{:?}",
        rows[0]
    );
    assert_eq!(rows[0].filename, None, "no exec was seen: {:?}", rows[0]);
}

#[test]
fn unwritable_out_fails_before_running() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let marker = tmp.path().join("the-command-ran");
    let touch = format!("touch {}", marker.display());
    let out = std::path::Path::new("/proc/montrace-test");
    let run = run_with_timeout(
        &mut montrace_command(out, &[], &["sh", "-c", &touch]),
        TIMEOUT,
    );
    assert_eq!(run.code(), 125, "{run:?}");
    assert!(
        run.stderr
            .contains("cannot create the run directory /proc/montrace-test"),
        "{run:?}"
    );
    assert!(
        run.stderr.contains("--out"),
        "the message suggests --out: {run:?}"
    );
    assert!(
        !marker.exists(),
        "the command must not run when its record cannot be written"
    );
}

#[test]
fn gpu_memory_limit_without_gpu_monitoring_fails_before_running() {
    // `--gpu off` makes it the same on a machine with a GPU as on one without.
    let marker = tempfile::tempdir().unwrap();
    let touch = format!("touch {}", marker.path().join("ran").display());
    let (run, tmp) = montrace_fails(
        &["--gpu", "off", "--limit", "gpu-mem=2GiB"],
        &["sh", "-c", &touch],
    );
    assert_eq!(run.code(), 125, "{run:?}");
    assert!(
        run.stderr.contains("--limit gpu-mem=2.0 GiB")
            && run.stderr.contains("--gpu off")
            && run.stderr.contains("drop the limit"),
        "the error names the limit, why no GPU is watched and what to do: {run:?}"
    );
    assert!(
        !marker.path().join("ran").exists(),
        "a limit that cannot be enforced must not let the command run: {run:?}"
    );
    assert!(!tmp.path().join("run").exists(), "{run:?}");
}

#[test]
fn malformed_flag_is_a_usage_error() {
    let (run, tmp) = montrace_fails(&["--linger", "soon"], &["true"]);
    assert_eq!(run.code(), 2, "{run:?}");
    assert!(
        run.stderr.contains("--linger") && run.stderr.contains("soon"),
        "the error names the flag and the value: {run:?}"
    );
    assert!(run.stderr.contains("--help"), "{run:?}");
    assert!(!tmp.path().join("run").exists());
}

#[test]
fn unknown_flag_is_a_usage_error() {
    // A misspelt flag before `--` must not become the command to run.
    let (run, tmp) = montrace_fails(&["--quite"], &["true"]);
    assert_eq!(
        run.code(),
        2,
        "`montrace run --quite -- true` should be a usage error naming `--quite`: {run:?}"
    );
    assert!(run.stderr.contains("--quite"), "{run:?}");
    assert!(run.stderr.contains("Usage:"), "{run:?}");
    assert!(!tmp.path().join("run").exists());
}

/// `montrace run` as the unprivileged user `nobody`, with `args`.
fn run_as_nobody(tmp: &std::path::Path, args: &[&str], cmd: &[&str]) -> tests::Finished {
    std::fs::set_permissions(tmp, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut command = tests::montrace_command_as_nobody(&tmp.join("run"), args, cmd);
    command.current_dir(tmp);
    run_with_timeout(&mut command, TIMEOUT)
}

#[test]
fn non_root_with_require_ebpf_gets_a_clear_error() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let run = run_as_nobody(tmp.path(), &["--require-ebpf"], &["true"]);
    assert_eq!(run.code(), 125, "{run:?}");
    assert!(
        run.stderr.contains("sudo"),
        "the message says to use sudo: {run:?}"
    );
    assert!(
        !tmp.path().join("run").exists(),
        "no run directory when montrace cannot trace"
    );
}

#[test]
fn non_root_falls_back_to_polling_and_says_so() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let run = run_as_nobody(
        tmp.path(),
        &["--interval", "20ms"],
        &["sh", "-c", "sleep 0.3 & sleep 0.2; wait; exit 4"],
    );
    assert_eq!(run.code(), 4, "{run:?}");
    assert!(
        run.stderr.contains("polling") && run.stderr.contains("sudo"),
        "warns once about the mode and how to get eBPF: {run:?}"
    );
    let run_json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("run/run.json")).unwrap())
            .unwrap();
    assert_eq!(run_json["tracking_mode"], "polling", "{run_json}");
    // The root and both sleeps (each lives far longer than the 20 ms interval). Guarantee: each
    // sleep lives at least 200 ms (nanosleep never returns early), and polling sweeps every 20 ms
    // late, never skipped: a sweep finds each unless montrace gets no CPU for 200 ms.
    assert_eq!(run_json["processes_started"], 3, "{run_json}");
    assert_eq!(run_json["exit_code"], 4, "{run_json}");
}
