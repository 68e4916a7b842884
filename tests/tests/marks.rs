//! Phase marks: the command marks its phases through `MONTRACE_MARK_SOCKET`, with
//! `montrace mark` from a shell or one datagram from any language, and the marks land in
//! marks.parquet with the sender's identity and the moment they were sent.
use std::{path::Path, process::Command};

use tests::{montrace_bin, run_montrace, run_montrace_env, run_with_timeout, Mark, Proc, TIMEOUT};

/// Sends one point mark from Python, prints the sender's pid.
const PYTHON_SENDER: &str = r#"
import os, socket
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.sendto(b"point from python\n", os.environ["MONTRACE_MARK_SOCKET"])
print(os.getpid())
"#;

fn shell_quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

/// The row of the process that sent `mark`, which must be in the tree.
fn sender<'a>(rows: &'a [Proc], mark: &Mark) -> &'a Proc {
    rows.iter()
        .find(|p| p.pid == mark.pid && Some(p.start_time) == mark.start_time)
        .unwrap_or_else(|| panic!("{mark:?} should name a process of the tree: {rows:#?}"))
}

#[test]
fn a_shell_script_that_marks_three_phases_gets_three_begin_end_pairs_inside_the_phases() {
    let montrace = shell_quote(&montrace_bin());
    let script = format!(
        "for phase in a b c; do {montrace} mark --begin $phase; sleep 0.2; \
         {montrace} mark --end $phase; done"
    );
    let run = run_montrace(&[], &["sh", "-c", &script]);
    run.assert_code(0);
    let marks = run.marks();
    let got: Vec<(&str, &str)> = marks
        .iter()
        .map(|m| (m.kind.as_str(), m.label.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("begin", "a"),
            ("end", "a"),
            ("begin", "b"),
            ("end", "b"),
            ("begin", "c"),
            ("end", "c"),
        ],
        "{run:?}"
    );

    let rows = run.processes();
    let shell = run.root(&rows);
    let sleeps: Vec<&Proc> = rows.iter().filter(|p| p.comm == "sleep").collect();
    assert_eq!(sleeps.len(), 3, "{rows:#?}");
    for (pair, sleep) in marks.chunks(2).zip(&sleeps) {
        let (begin, end) = (&pair[0], &pair[1]);
        let phase_s = (end.time - begin.time) as f64 / 1e9;
        // At least the phase's `sleep 0.2` (inside it, checked next; nanosleep never returns
        // early). No upper bound in seconds: how long the two `montrace mark` commands take to
        // start is the machine's (a debug binary paged in from a busy disk). Each mark's time
        // comes before its sender's exit instead (the kernel stamps a datagram as it is queued,
        // during the sender's sendto), checked below.
        assert!(
            phase_s >= 0.2,
            "phase {} lasted {phase_s:.3}s, the script slept 0.2s: {begin:?} {end:?}",
            begin.label
        );
        // The phase's `sleep` ran between its two marks: each mark is the moment it was sent.
        let sleep_end = sleep.end_time.expect("sleep ended");
        assert!(
            begin.time <= sleep.start_time && sleep_end <= end.time,
            "sleep [{}, {sleep_end}] should be inside phase {} [{}, {}]",
            sleep.start_time,
            begin.label,
            begin.time,
            end.time
        );
        // Each mark names the `montrace mark` process that sent it, a child of the script.
        for mark in pair {
            let process = sender(&rows, mark);
            assert!(process.is_child_of(shell), "{process:?} sent {mark:?}");
            // Sent before its sender's exit: the upper bound on a phase's length.
            assert!(
                process.end_time.is_some_and(|end| mark.time <= end),
                "{mark:?} should be sent before its sender's exit {process:?}"
            );
            assert_eq!(
                process
                    .argv
                    .as_ref()
                    .and_then(|a| a.get(1))
                    .map(String::as_str),
                Some("mark"),
                "{process:?} sent {mark:?}"
            );
        }
    }
    assert!(
        marks.windows(2).all(|w| w[0].time <= w[1].time),
        "{marks:#?}"
    );
}

#[test]
fn a_python_program_marks_with_one_datagram_and_is_its_sender() {
    let run = run_montrace(&[], &["python3", "-c", PYTHON_SENDER]);
    run.assert_code(0);
    let marks = run.marks();
    assert_eq!(marks.len(), 1, "{marks:#?}\n{run:?}");
    let mark = &marks[0];
    assert_eq!(
        (mark.kind.as_str(), mark.label.as_str()),
        ("point", "from python")
    );
    let rows = run.processes();
    let python = run.root(&rows);
    assert_eq!(mark.pid, python.pid, "{mark:?} {python:?}");
    assert_eq!(
        mark.start_time,
        Some(python.start_time),
        "{mark:?} {python:?}"
    );
    assert_eq!(run.stdout.trim(), python.pid.to_string(), "{run:?}");
    let end = python.end_time.expect("python ended");
    assert!(
        python.start_time <= mark.time && mark.time <= end,
        "{mark:?} should be within python's life {python:?}"
    );
}

#[test]
fn the_command_of_a_sudo_user_can_mark() {
    let sudo = [
        ("SUDO_UID", "65534"),
        ("SUDO_GID", "65534"),
        ("SUDO_USER", "nobody"),
    ];
    let script = format!(
        "{} mark --begin 'as nobody' && python3 -c '{}' >/dev/null",
        shell_quote(&tests::users::reachable_montrace()),
        PYTHON_SENDER.trim().replace('\n', "; ")
    );
    let run = run_montrace_env(&[], &["sh", "-c", &script], &sudo);
    run.assert_code(0);
    let got: Vec<(String, String)> = run.marks().into_iter().map(|m| (m.kind, m.label)).collect();
    assert_eq!(
        got,
        [
            ("begin".to_string(), "as nobody".to_string()),
            ("point".to_string(), "from python".to_string()),
        ],
        "{run:?}"
    );
}

#[test]
fn the_mark_socket_is_private_to_the_run_and_removed_after_it() {
    let run = run_montrace(
        &[],
        &[
            "sh",
            "-c",
            r#"test -S "$MONTRACE_MARK_SOCKET" && echo "$MONTRACE_MARK_SOCKET""#,
        ],
    );
    run.assert_code(0);
    let socket = Path::new(run.stdout.trim());
    assert!(socket.is_absolute(), "{run:?}");
    assert!(
        !socket.exists(),
        "{} should be removed: {run:?}",
        socket.display()
    );
    let dir = socket.parent().unwrap();
    assert!(
        !dir.exists(),
        "{} should be removed: {run:?}",
        dir.display()
    );
    assert!(run.marks().is_empty());
}

#[test]
fn montrace_mark_outside_a_run_says_where_it_works() {
    let mut command = Command::new(montrace_bin());
    command
        .args(["mark", "--begin", "load"])
        .env_remove("MONTRACE_MARK_SOCKET");
    let finished = run_with_timeout(&mut command, TIMEOUT);
    assert_eq!(finished.status.code(), Some(2), "{finished:?}");
    assert!(
        finished
            .stderr
            .contains("montrace mark works inside `montrace run`: MONTRACE_MARK_SOCKET is not set"),
        "{finished:?}"
    );
}

/// Sends 100,000 marks as fast as it can (a blocking send waits while montrace's queue is full,
/// so every one reaches montrace), prints how many it sent, and exits with 3.
const PYTHON_FLOOD: &str = r#"
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
path = os.environ["MONTRACE_MARK_SOCKET"]
sent = 0
for i in range(100000):
    s.sendto(b"point flood %d\n" % i, path)
    sent += 1
print(sent)
sys.exit(3)
"#;

/// The command is untrusted: a flood of marks costs montrace bounded memory, a bounded report,
/// and every mark is either kept (up to the budget) or counted as dropped.
#[test]
fn a_flood_of_marks_is_bounded_and_counted() {
    let mut peak_kib = 0u64;
    let run = tests::launch_montrace(&[], &["python3", "-c", PYTHON_FLOOD]).during(|montrace| {
        // montrace's own high-water mark (its command's memory is not in it), read until it
        // exits: the last reading comes at most a poll before its end.
        let status = format!("/proc/{montrace}/status");
        while let Ok(text) = std::fs::read_to_string(&status) {
            let Some(kib) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            else {
                break; // a zombie: its memory is gone
            };
            peak_kib = peak_kib.max(kib);
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    });
    run.assert_code(3);
    assert_eq!(run.stdout.trim(), "100000", "{run:?}");
    let kept = run.marks().len() as u64;
    let dropped = run.run_json()["marks_dropped"].as_u64().unwrap();
    eprintln!("100,000 marks: {kept} kept, {dropped} dropped, montrace's peak RSS {peak_kib} KiB");
    assert_eq!(kept + dropped, 100_000, "every mark is kept or counted");
    assert!(kept <= 10_000 && dropped >= 90_000, "{kept} kept");
    assert!(
        peak_kib > 0 && peak_kib < 200 * 1024,
        "montrace's peak RSS {peak_kib} KiB"
    );
    let report = std::fs::metadata(run.dir.join("report.html"))
        .unwrap()
        .len();
    assert!(report < 5 << 20, "report.html is {report} bytes");
    assert!(run.stderr.contains("were dropped"), "said: {run:?}");
}
