//! The live status line: shown while stderr is a terminal (here a pseudo-terminal made by
//! util-linux `script`) that the command does not write to, never when stderr is a pipe, and
//! never over the command's own output on a shared terminal.
use std::process::Command;

use tests::{montrace_bin, require_root, run_montrace, run_with_timeout, Finished, TIMEOUT};

/// `montrace run --no-report --out OUT -- sh -c SCRIPT` on a new pty; what the pty showed.
fn on_a_terminal(out: &std::path::Path, script: &str) -> Finished {
    // `script` runs the command with its stdin, stdout and stderr on a new pty, and copies what
    // the pty shows to its own stdout.
    let command = format!(
        "{} run --no-report --out {} -- sh -c '{script}'",
        montrace_bin().display(),
        out.display()
    );
    run_with_timeout(
        Command::new("script")
            .args(["-q", "-e", "-c", &command, "/dev/null"])
            .env_remove("SUDO_UID")
            .env_remove("SUDO_GID"),
        TIMEOUT,
    )
}

#[test]
fn live_line_shows_on_a_terminal_the_command_does_not_write_to_and_not_on_a_pipe() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("log");
    let on_tty = on_a_terminal(
        &tmp.path().join("run"),
        &format!("exec >{} 2>&1; sleep 2.3; echo done", log.display()),
    );
    assert_eq!(on_tty.code(), 0, "{on_tty:?}");
    // Every 500 ms (a tokio interval that delays a late tick, never drops it) over the 2.3 s the
    // sleep guarantees (nanosleep never returns early): four draws after the command's
    // redirection, so two need montrace on a CPU twice in 2.3 s. With `sleep 1.3` there were two
    // draws due and two needed: one late tick on a busy machine failed it. Each rewrites the
    // line in place.
    let updates = on_tty.stdout.matches("] live ").count();
    assert!(
        updates >= 2,
        "expected the live line on a terminal: {on_tty:?}"
    );
    assert!(on_tty.stdout.contains("\r\x1b[K[montrace "), "{on_tty:?}");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "done\n");

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

#[test]
fn the_command_s_lines_on_a_shared_terminal_stay_intact() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    // 40 lines over 2 s, written in pieces (the line's two halves in two writes), on the
    // terminal montrace's status line would use.
    let shared = on_a_terminal(
        &tmp.path().join("run"),
        "i=0; while [ $i -lt 40 ]; do printf \"line-$i-\"; printf \"abcdefghij\\n\"; \
         i=$((i+1)); sleep 0.05; done",
    );
    assert_eq!(shared.code(), 0, "{shared:?}");
    let lines: Vec<&str> = shared
        .stdout
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .collect();
    for i in 0..40 {
        let want = format!("line-{i}-abcdefghij");
        assert!(
            lines.contains(&want.as_str()),
            "{want} is not intact on the terminal: {shared:?}"
        );
    }
    assert!(
        !shared.stdout.contains("] live "),
        "no status line over the command's output: {shared:?}"
    );
}
