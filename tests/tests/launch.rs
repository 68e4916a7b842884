//! How montrace starts the command: as the invoking sudo user (SUDO_UID/SUDO_GID) unless
//! `--as-root`, with the run directory handed to that user, and in the state a shell would give
//! it.
use std::os::unix::fs::MetadataExt as _;

use tests::{run_montrace, run_montrace_env};

const NOBODY: &str = "65534";
const WHO: &str = "id -u; id -g; echo $USER";

#[test]
fn runs_as_the_invoking_sudo_user() {
    let sudo = [
        ("SUDO_UID", NOBODY),
        ("SUDO_GID", NOBODY),
        ("SUDO_USER", "nobody"),
    ];
    let run = run_montrace_env(&[], &["/bin/sh", "-c", WHO], &sudo);
    run.assert_code(0);
    assert_eq!(run.stdout, "65534\n65534\nnobody\n", "{run:?}");
    let json = run.run_json();
    assert_eq!(
        (&json["uid"], &json["gid"]),
        (&65534.into(), &65534.into()),
        "{json}"
    );
    for path in [
        run.dir.clone(),
        run.dir.join("processes.parquet"),
        run.dir.join("events.parquet"),
        run.dir.join("run.json"),
    ] {
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid()),
            (65534, 65534),
            "{} belongs to the invoking user",
            path.display()
        );
    }

    // Under sudo, --as-root would make montrace a root shell for whoever sudoers lets run it:
    // refused unless the site allows it (tests/tests/hardening.rs runs the allowed case).
    let run = run_montrace_env(&["--as-root"], &["/bin/sh", "-c", WHO], &sudo);
    run.assert_code(2);
    assert!(run.stdout.is_empty(), "the command ran: {run:?}");
    assert!(run.stderr.contains("allow-sudo-as-root"), "{run:?}");
    assert!(!run.dir.exists());
}

#[test]
fn pipelines_end_by_sigpipe_as_in_a_shell() {
    // Outside montrace, `yes` dies of SIGPIPE (silently) once `head` has exited. montrace is a
    // Rust program, whose runtime ignores SIGPIPE; the command must not inherit that.
    let run = run_montrace(&[], &["sh", "-c", "yes | head -n1"]);
    run.assert_code(0);
    assert_eq!(run.stdout, "y\n", "{run:?}");
    let rows = run.processes();
    let yes: Vec<_> = rows.iter().filter(|p| p.comm == "yes").collect();
    assert_eq!(yes.len(), 1, "{rows:?}");
    assert_eq!(
        (yes[0].exit_code, yes[0].exit_signal),
        (None, Some(libc::SIGPIPE)),
        "`yes` should be killed by SIGPIPE as in a shell, not see EPIPE: {:?}\n{run:?}",
        yes[0]
    );
    assert!(!run.stderr.contains("Broken pipe"), "{run:?}");
}

#[test]
fn the_command_keeps_the_open_files_limit_montrace_was_given() {
    // montrace raises its own soft RLIMIT_NOFILE to the hard limit (it keeps /proc files of the
    // live processes open); the command must start with the limit montrace was started with.
    tests::require_root();
    let tmp = tempfile::tempdir().unwrap();
    let mut command = tests::montrace_command(
        &tmp.path().join("run"),
        &[],
        &[
            "sh",
            "-c",
            "ulimit -Sn; grep 'Max open files' /proc/$PPID/limits",
        ],
    );
    // SAFETY: the hook only calls getrlimit and setrlimit, which are async-signal-safe.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, || {
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
            limit.rlim_cur = 1000.min(limit.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
            Ok(())
        })
    };
    let run = tests::run_with_timeout(&mut command, tests::TIMEOUT);
    assert_eq!(run.code(), 0, "{run:?}");
    let mut lines = run.stdout.lines();
    let own = lines.next().unwrap_or_default();
    let hard = {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one struct rlimit.
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
        limit.rlim_max
    };
    assert_eq!(own, 1000.min(hard).to_string(), "{run:?}");
    // The command's parent is montrace: its soft limit is the hard one.
    let montrace: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        montrace.get(3..5),
        Some(&[hard.to_string().as_str(), hard.to_string().as_str()][..]),
        "montrace's own soft and hard limits: {run:?}"
    );
}
