//! The live status line: shown while stderr is a terminal (here a pseudo-terminal made by
//! util-linux `script`), never when stderr is a pipe.
use std::process::Command;

use tests::{montrace_bin, require_root, run_montrace, run_with_timeout, TIMEOUT};

#[test]
fn live_line_shows_on_a_terminal_and_not_on_a_pipe() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    // `script` runs the command with its stdin, stdout and stderr on a new pty, and copies what
    // the pty shows to its own stdout.
    let command = format!(
        "{} run --no-report --out {} -- sh -c 'sleep 1.3; echo done'",
        montrace_bin().display(),
        out.display()
    );
    let on_tty = run_with_timeout(
        Command::new("script")
            .args(["-q", "-e", "-c", &command, "/dev/null"])
            .env_remove("SUDO_UID")
            .env_remove("SUDO_GID"),
        TIMEOUT,
    );
    assert_eq!(on_tty.code(), 0, "{on_tty:?}");
    // About twice a second over 1.3 s: at least two updates, each rewriting the line in place.
    let updates = on_tty.stdout.matches("] live ").count();
    assert!(
        updates >= 2,
        "expected the live line on a terminal: {on_tty:?}"
    );
    assert!(on_tty.stdout.contains("\r\x1b[K[montrace "), "{on_tty:?}");
    assert!(on_tty.stdout.contains("done"), "{on_tty:?}");

    let piped = run_montrace(&["--no-report"], &["sh", "-c", "sleep 1.3"]);
    piped.assert_code(0);
    assert!(
        !piped.stderr.contains("] live "),
        "no live line when stderr is a pipe: {piped:?}"
    );
    assert!(
        piped.stderr.contains("wall time"),
        "the summary still comes: {piped:?}"
    );
}
