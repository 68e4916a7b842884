//! `montrace attach PID`: a tree that was running before montrace started is followed from the
//! processes alive at the attach to every child started afterwards.
use std::collections::BTreeSet;
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use tests::{attach_montrace, require_root, wait_for_file};

/// A shell loop started outside montrace: one child that lives until the test kills the loop's
/// process group (its pid in `sleeper`), then a short-lived child every ~20 ms, each of which
/// appends its own pid to `log`. The sleeper must outlive montrace's start-up, however long
/// that takes: a `sleep 30` did not in the kernel tier's VM (qemu without KVM, the host busy),
/// where the attach took 33 s to follow the tree.
const LOOP: &str = r#"
sleep 86400 & echo $! > "$1/sleeper.tmp"; mv "$1/sleeper.tmp" "$1/sleeper"
while :; do sh -c 'echo $$ >> "$0/log"' "$1"; sleep 0.02; done
"#;

/// Kills a process group when dropped: the loop and its sleeper end with the test, pass or fail.
struct KillGroup(u32);

impl Drop for KillGroup {
    fn drop(&mut self) {
        // SAFETY: plain syscall on the process group made for the loop.
        unsafe { libc::kill(-(self.0 as libc::pid_t), libc::SIGKILL) };
    }
}

#[test]
fn attach_follows_the_tree_alive_before_and_the_children_started_after() {
    require_root();
    let work = tempfile::tempdir().unwrap();
    let mut shell = Command::new("sh")
        .args(["-c", LOOP, "loop"])
        .arg(work.path())
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let shell_pid = shell.id();
    let group = KillGroup(shell_pid);
    wait_for_file(&work.path().join("sleeper"));
    let sleeper: u32 = std::fs::read_to_string(work.path().join("sleeper"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Children already came and went before the attach.
    std::thread::sleep(Duration::from_millis(300));

    // 2 s here; the loop's pace is the machine's, and in a VM without KVM a child takes a few
    // tenths of a second: the attach lasts as many times longer as the harness's bound on a run
    // ($MONTRACE_TEST_TIMEOUT_SCALE), so that it sees the children it checks below.
    let seconds = 2 * (tests::run_timeout().as_secs() / tests::TIMEOUT.as_secs()).max(1);
    let run = attach_montrace(shell_pid, &["--duration", &format!("{seconds}s"), "-q"]);
    // Running (not a zombie) until the test kills it: alive at the attach.
    let sleeper_alive =
        std::fs::read_to_string(format!("/proc/{sleeper}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| !rest.starts_with('Z'))
        });
    drop(group);
    let _ = shell.wait();
    assert!(
        sleeper_alive,
        "the sleeper ({sleeper}) ended before the test killed it"
    );
    run.assert_code(0);
    let json = run.run_json();
    // The processes count from the attach: the shell's life before it is not the run's.
    let path_s = json["time"]["critical_path_s"].as_f64().unwrap();
    let wall_s = json["duration_s"].as_f64().unwrap();
    assert!(
        path_s <= wall_s + 0.001,
        "critical path {path_s} s in a {wall_s} s run: {json}"
    );
    for counter in ["ringbuf_full", "track_map_full", "read_errors"] {
        assert_eq!(
            json["lost_events"][counter], 0,
            "lost_events.{counter}: {json}"
        );
    }
    let rows = run.processes();
    // A process can vanish (end without an exit event) only if it started before the kernel
    // followed its parent: found in /proc at the attach, it may end before it is in the kernel's
    // map of tracked processes. The first event of a process is stamped with the moment the
    // kernel follows it (its fork, or the attach's scan that found it), so every process that
    // started after its parent's first event was forked under the kernel's eyes, and its exit
    // must come too.
    let events = run.events();
    let followed_at = |pid: u32, start_time: i64| -> Option<i64> {
        events
            .iter()
            .filter(|e| e.pid == pid && e.start_time == start_time)
            .map(|e| e.time)
            .min()
    };
    let vanished: Vec<&tests::Proc> = rows
        .iter()
        .filter(|p| !p.alive_at_end && p.cpu_user_ns.is_none())
        .collect();
    assert_eq!(
        vanished.len() as u64,
        json["vanished_processes"].as_u64().unwrap(),
        "{vanished:#?}\n{json}"
    );
    for p in &vanished {
        let parent = p
            .parent_pid
            .zip(p.parent_start_time)
            .and_then(|(pid, start)| followed_at(pid, start));
        let parent = parent.unwrap_or_else(|| panic!("no events of the parent of {p:#?}"));
        assert!(
            p.start_time < parent,
            "a child forked while its parent was followed vanished (its exit event was lost): \
             {p:#?}\nparent followed from {parent}\n{:#?}\n{json}",
            events.iter().filter(|e| e.pid == p.pid).collect::<Vec<_>>()
        );
    }

    let shell_row = rows
        .iter()
        .find(|p| p.pid == shell_pid)
        .unwrap_or_else(|| panic!("no row of the attached shell {shell_pid}: {rows:#?}"));
    assert!(
        rows.iter()
            .any(|p| p.pid == sleeper && p.is_child_of(shell_row) && p.comm == "sleep"),
        "the `sleep` alive before the attach ({sleeper}) is the shell's child: {rows:#?}"
    );
    // The children that logged their pid: every one montrace saw start after the attach, and
    // in the log's order no child between the first and the last of them is missing.
    let logged: Vec<u32> = std::fs::read_to_string(work.path().join("log"))
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    let seen: BTreeSet<u32> = rows
        .iter()
        .filter(|p| p.is_child_of(shell_row) && p.pid != sleeper)
        .map(|p| p.pid)
        .collect();
    let first = logged.iter().position(|pid| seen.contains(pid));
    let last = logged.iter().rposition(|pid| seen.contains(pid));
    let (Some(first), Some(last)) = (first, last) else {
        panic!(
            "none of the {} logged children was recorded: {rows:#?}",
            logged.len()
        );
    };
    // The loop went round for the 300 ms before the attach and during montrace's start-up (it
    // had logged its sleeper already): children logged then are not the run's.
    assert!(
        first > 0,
        "children logged before the attach are not in the run: {logged:?}"
    );
    let missed: Vec<u32> = logged[first..=last]
        .iter()
        .copied()
        .filter(|pid| !seen.contains(pid))
        .collect();
    assert!(
        missed.is_empty(),
        "children started while attached but not recorded: {missed:?}"
    );
    let recorded = last - first + 1;
    eprintln!(
        "attached for {seconds} s: {recorded} children recorded in a row, {} logged in all, {} vanished",
        logged.len(),
        vanished.len()
    );
    // The loop starts a child every 25-30 ms on an idle machine; a busy one slows the loop, not
    // montrace's view of it (the check above). 5 in the attach's 2 s leave the loop 400 ms a
    // round, 15 times its idle pace.
    assert!(
        recorded >= 5,
        "only {recorded} children recorded in {seconds} s: {rows:#?}"
    );
}

/// A program montrace did not start cannot be given `MONTRACE_MARK_SOCKET`: attach binds the
/// socket where `--mark-socket` says, and marks sent there are recorded.
#[test]
fn marks_sent_to_the_attach_socket_are_recorded() {
    let work = tempfile::tempdir().unwrap();
    // The tree ends once both marks are sent (the sender creates `done`), and the attach with
    // it: not after a fixed 2 s, in which a busy machine need not have started two `montrace
    // mark` commands (a debug binary, paged in from a busy disk). 30 s bounds a broken sender.
    let done = work.path().join("done");
    let mut shell = Command::new("sh")
        .args(["-c", "while [ ! -e \"$1\" ]; do sleep 0.05; done", "loop"])
        .arg(&done)
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let socket = work.path().join("marks.sock");
    let sender = {
        let socket = socket.clone();
        std::thread::spawn(move || {
            wait_for_file(&socket);
            let statuses: Vec<_> = [["mark", "--begin", "phase"], ["mark", "--end", "phase"]]
                .iter()
                .map(|args| {
                    Command::new(tests::montrace_bin())
                        .args(args)
                        .env("MONTRACE_MARK_SOCKET", &socket)
                        .status()
                        .unwrap()
                })
                .collect();
            std::fs::write(&done, "").unwrap();
            assert!(statuses.iter().all(|s| s.success()), "{statuses:?}");
        })
    };
    let socket_arg = socket.display().to_string();
    let run = attach_montrace(
        shell.id(),
        &[
            "--duration",
            "30s",
            "-q",
            "--no-report",
            "--mark-socket",
            &socket_arg,
        ],
    );
    // SAFETY: plain syscall on the process group made for the loop.
    unsafe { libc::kill(-(shell.id() as libc::pid_t), libc::SIGKILL) };
    let _ = shell.wait();
    sender.join().unwrap();
    run.assert_code(0);
    let marks: Vec<(String, String)> = run.marks().into_iter().map(|m| (m.kind, m.label)).collect();
    assert_eq!(
        marks,
        [
            ("begin".into(), "phase".into()),
            ("end".into(), "phase".into())
        ],
        "{run:?}"
    );
    assert!(!socket.exists(), "the socket is removed at the end");
}
