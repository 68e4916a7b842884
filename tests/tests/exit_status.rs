//! montrace exits as a shell would with the command's status, and records it in run.json and in
//! the command's row.
use std::time::Duration;

use tests::{run_montrace, run_montrace_and, wait_for_file};

#[test]
fn exits_with_the_commands_exit_code() {
    let run = run_montrace(&[], &["sh", "-c", "exit 7"]);
    run.assert_code(7);
    let json = run.run_json();
    assert_eq!(json["exit_code"], 7, "{json}");
    assert_eq!(json["exit_signal"], serde_json::Value::Null, "{json}");
    assert_eq!(json["exit_status"], 7, "{json}");
    let rows = run.processes();
    let root = run.root(&rows);
    assert_eq!(
        (root.exit_code, root.exit_signal),
        (Some(7), None),
        "{root:?}"
    );
}

#[test]
fn exits_128_plus_signal_when_killed() {
    let run = run_montrace(&[], &["sh", "-c", "kill -KILL $$"]);
    run.assert_code(137);
    let json = run.run_json();
    assert_eq!(json["exit_code"], serde_json::Value::Null, "{json}");
    assert_eq!(json["exit_signal"], 9, "{json}");
    assert_eq!(json["exit_status"], 137, "{json}");
    let rows = run.processes();
    let root = run.root(&rows);
    assert_eq!(
        (root.exit_code, root.exit_signal),
        (None, Some(9)),
        "{root:?}"
    );
    assert!(!root.alive_at_end, "{root:?}");
}

#[test]
fn forwards_sigterm_to_the_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let started = tmp.path().join("started");
    // Two sleeps: a child, and the shell itself after `exec`. Neither waits for the other, so
    // each ends only by the signal montrace passes on, whichever it reaches first.
    let script = format!("sleep 30 & touch {}; exec sleep 30", started.display());
    let run = run_montrace_and(&[], &["sh", "-c", &script], &[], |montrace| {
        wait_for_file(&started);
        // The shell has exec'd its own `sleep` once montrace's child is called sleep: wait for
        // that event rather than for a time.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while child_of(montrace).is_none_or(|pid| comm_of(pid).as_deref() != Some("sleep")) {
            assert!(
                std::time::Instant::now() < deadline,
                "the shell never exec'd sleep"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        // SAFETY: plain syscall to the montrace process this test started.
        unsafe { libc::kill(montrace as libc::pid_t, libc::SIGTERM) };
    });
    run.assert_code(143);
    // Not a timing claim: the tree would otherwise run until the test's TIMEOUT; 10 s is
    // margin enough for any load.
    assert!(
        run.wall < Duration::from_secs(10),
        "the tree ended at once: {run:?}"
    );
    let json = run.run_json();
    assert_eq!(json["signals_forwarded"], serde_json::json!([15]), "{json}");
    assert_eq!(json["exit_signal"], 15, "{json}");
    assert_eq!(json["totals"]["alive_at_end"], 0, "{json}");
    let rows = run.processes();
    let root = run.root(&rows);
    let sleeps: Vec<_> = rows
        .iter()
        .filter(|p| p.argv.as_deref() == Some(&["sleep".to_string(), "30".into()][..]))
        .collect();
    assert_eq!(
        sleeps.len(),
        2,
        "the shell and its child both run sleep: {rows:?}"
    );
    assert!(sleeps.iter().any(|p| p.pid == root.pid), "{rows:?}");
    for row in sleeps {
        assert_eq!(
            (row.exit_code, row.exit_signal),
            (None, Some(15)),
            "{row:?}"
        );
        assert!(!row.alive_at_end, "{row:?}");
    }
}

/// The (first) child of `pid`, from /proc.
fn child_of(pid: u32) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn comm_of(pid: u32) -> Option<String> {
    Some(
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .ok()?
            .trim()
            .to_string(),
    )
}
