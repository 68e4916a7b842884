//! A montrace killed with `kill -9` leaves every row it had flushed in closed Parquet parts that
//! DuckDB reads as they are.
use std::{
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use tests::{
    duckdb_queries, montrace_bin, montrace_command, require_root, run_with_timeout, TIMEOUT,
};

/// Kills what a killed montrace left running (its command's tree, in montrace's process group
/// and in its run cgroup) and removes that run cgroup, which montrace can no longer remove.
struct Leftovers {
    montrace_pid: u32,
}

impl Leftovers {
    /// The run cgroup's directories: `montrace/run-<montrace pid>-<ns>` under each cgroup
    /// hierarchy (v1: one per controller; v2: the unified root).
    fn cgroups(&self) -> Vec<PathBuf> {
        let prefix = format!("run-{}-", self.montrace_pid);
        let root = Path::new("/sys/fs/cgroup");
        let mut parents = vec![root.join("montrace")];
        if let Ok(entries) = std::fs::read_dir(root) {
            parents.extend(entries.flatten().map(|e| e.path().join("montrace")));
        }
        let mut found = Vec::new();
        for parent in parents {
            let Ok(entries) = std::fs::read_dir(&parent) else {
                continue;
            };
            for entry in entries.flatten() {
                if entry.file_name().to_string_lossy().starts_with(&prefix) {
                    found.push(entry.path());
                }
            }
        }
        found
    }

    /// Pids of the processes still in the run cgroup.
    fn cgroup_pids(&self) -> Vec<i32> {
        let mut pids: Vec<i32> = self
            .cgroups()
            .iter()
            .filter_map(|dir| std::fs::read_to_string(dir.join("cgroup.procs")).ok())
            .flat_map(|text| {
                text.lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect::<Vec<_>>()
            })
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        // SAFETY: plain syscalls on the process group this test created (montrace is its
        // leader, the command never leaves it) and on the processes in the run's cgroup.
        unsafe { libc::kill(-(self.montrace_pid as libc::pid_t), libc::SIGKILL) };
        for pid in self.cgroup_pids() {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        // An emptied cgroup answers rmdir with EBUSY until its last process is reaped.
        for _ in 0..100 {
            let left: Vec<PathBuf> = self
                .cgroups()
                .into_iter()
                .filter(|dir| std::fs::remove_dir(dir).is_err())
                .collect();
            if left.is_empty() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!(
            "warning: could not remove the killed run's cgroups {:?}",
            self.cgroups()
        );
    }
}

/// The part files of `table` in the run directory, by name.
fn parts(dir: &Path, table: &str) -> Vec<String> {
    let parts_dir = dir.join(format!("{table}.parts"));
    let mut names: Vec<String> = std::fs::read_dir(&parts_dir)
        .unwrap_or_else(|e| panic!("no {}: {e}", parts_dir.display()))
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".parquet"))
        .collect();
    names.sort();
    names
}

#[test]
fn kill_9_keeps_flushed_rows() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    // A shell that runs `sleep 0.5` over and over: a steady stream of forks, execs and exits.
    let mut command = montrace_command(
        &dir,
        &["--flush-interval", "2s", "--interval", "100ms"],
        &["sh", "-c", "while :; do sleep 0.5; done"],
    );
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    let mut montrace = command.spawn().expect("starting montrace");
    let leftovers = Leftovers {
        montrace_pid: montrace.id(),
    };
    // Kill it once it has flushed enough, whatever the machine's speed: 4 parts of samples
    // (flushes every 2 s: at least 3 intervals, 6 s, lie between the first and the fourth) and
    // 3 of processes (a part is written only with rows in it, so 3 flushes each ended at least
    // one `sleep`).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    // The parts directories appear a moment after montrace starts.
    let flushed = |table: &str| {
        std::fs::read_dir(dir.join(format!("{table}.parts"))).map_or(0, |d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".parquet"))
                .count()
        })
    };
    while flushed("samples") < 4 || flushed("processes") < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "montrace did not flush 4 sample parts and 3 process parts in 60 s: {} {}",
            flushed("samples"),
            flushed("processes")
        );
        assert!(
            montrace.try_wait().unwrap().is_none(),
            "montrace ended by itself before the kill"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let flushed_samples = parts(&dir, "samples").len();
    // SAFETY: plain syscall on the montrace process this test started.
    unsafe { libc::kill(montrace.id() as libc::pid_t, libc::SIGKILL) };
    let status = montrace.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    eprintln!(
        "after kill -9, the run cgroup still holds {:?}",
        leftovers.cgroup_pids()
    );
    drop(leftovers);

    // Nothing was merged or summed up: the tables are their parts.
    for table in ["processes", "events", "samples", "system"] {
        assert!(
            !dir.join(format!("{table}.parquet")).exists(),
            "{table}.parquet is written only at a clean end"
        );
        let names = parts(&dir, table);
        assert!(!names.is_empty(), "{table}.parts holds no part");
        for (i, name) in names.iter().enumerate() {
            assert_eq!(name, &format!("{table}-{i:06}.parquet"), "{names:?}");
        }
    }
    assert!(
        !dir.join("run.json").exists(),
        "run.json is written at a clean end only"
    );

    let d = dir.display();
    // One DuckDB process for all the questions.
    let answers = duckdb_queries(&[
        format!(
            "SELECT count(*) AS n, (epoch_ns(max(time)) - epoch_ns(min(time))) / 1e9 AS span_s \
             FROM '{d}/samples.parts/*.parquet'"
        ),
        // The schema's glob for a table in either state.
        format!("SELECT count(*) AS n FROM '{d}/**/samples*.parquet'"),
        format!(
            "SELECT kind, count(*) AS n FROM '{d}/events.parts/*.parquet' \
             GROUP BY kind ORDER BY kind"
        ),
        format!(
            "SELECT count(*) AS n, count(*) FILTER (WHERE exit_code = 0) AS exited_0 \
             FROM '{d}/processes.parts/*.parquet' WHERE comm = 'sleep'"
        ),
        format!("SELECT count(*) AS n FROM '{d}/system.parts/*.parquet'"),
    ]);
    let [samples, globbed, events, sleeps, system] = <[_; 5]>::try_from(answers)
        .unwrap()
        .map(|answer| answer.unwrap_or_else(|e| panic!("DuckDB failed on the parts: {e}")));

    let (n, span) = (
        samples.f64(0, "n").unwrap(),
        samples.f64(0, "span_s").unwrap(),
    );
    eprintln!(
        "samples in the {flushed_samples}+ parts of the killed run: {n} rows over {span:.3} s"
    );
    // A row of the first part was taken before its flush, a row of the fourth after the flush
    // before it, at least two flushes later; the flush timer delays a late tick and never
    // catches up (tokio's MissedTickBehavior::Delay), so those flushes are 2 s apart or more:
    // the rows span at least 4 s (less 50 ms for the wall clock's slew against the timer's).
    // About 6 s here. Not "over 5 s": that needed the first sweep within 1 s of the flush
    // timer's start, which a busy machine need not give.
    assert!(
        span >= 3.95,
        "4 parts flushed 2 s apart span at least 4 s of samples, not {span:.3} s"
    );
    // Each part holds at least one row (a flush with nothing buffered writes no part).
    assert!(
        n >= flushed_samples as f64,
        "{n} rows in {flushed_samples} parts"
    );
    assert_eq!(globbed.f64(0, "n"), Some(n), "{globbed:?}");

    eprintln!("events in the parts: {:?}", events.rows);
    for kind in ["exec", "exit", "fork"] {
        let row = events
            .values("kind")
            .iter()
            .position(|k| k.as_str() == Some(kind))
            .unwrap_or_else(|| panic!("no `{kind}` event in the parts: {:?}", events.rows));
        let count = events.f64(row, "n").unwrap();
        // Three process parts: three `sleep`s at least had been forked, exec'd and ended.
        assert!(count >= 3.0, "{count} `{kind}` events");
    }
    // The sleeps that ended before the last flush have their rows.
    let n = sleeps.f64(0, "n").unwrap();
    assert!(n >= 3.0, "{n} sleeps in 3+ parts of processes");
    assert_eq!(sleeps.f64(0, "exited_0"), Some(n), "{sleeps:?}");
    // One system row per sweep, and a sweep writes samples for the live shell at least.
    assert!(
        system.f64(0, "n").unwrap() >= flushed_samples as f64,
        "one system row per sweep: {system:?}"
    );

    // The shell was still running at the kill, so it has no processes row: its name, program
    // and arguments come from its exec event, in the report and in the CSV export.
    let script = "while :; do sleep 0.5; done";
    let report = run_with_timeout(
        Command::new(montrace_bin())
            .args(["report", "--format", "md"])
            .arg(&dir),
        TIMEOUT,
    );
    assert_eq!(report.code(), 0, "{report:?}");
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        md.contains(script),
        "the running shell is named in the report:\n{md}"
    );
    let csv = tmp.path().join("csv");
    let export = run_with_timeout(
        Command::new(montrace_bin())
            .args(["export", "--format", "csv", "--out"])
            .arg(&csv)
            .arg(&dir),
        TIMEOUT,
    );
    assert_eq!(export.code(), 0, "{export:?}");
    let processes = std::fs::read_to_string(csv.join("processes.csv")).unwrap();
    let shell = processes
        .lines()
        .find(|l| l.contains(script))
        .unwrap_or_else(|| panic!("no row for the running shell in processes.csv:\n{processes}"));
    assert!(shell.contains(",sh,"), "its comm: {shell}");
    assert!(
        shell.contains("/bin/sh") || shell.contains("/usr/bin/sh"),
        "its program: {shell}"
    );
}

/// What montrace synced of the run directory `dir` under strace: the names of the files it
/// fsync'd (or fdatasync'd), in order, and every other whole-disk sync it made, which it must
/// never make (a `syncfs` or `sync` would wait on everything the machine's other programs wrote).
fn synced_under_strace(flush_interval: &str, cmd: &[&str]) -> (Vec<String>, Vec<String>) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let trace = tmp.path().join("trace");
    let montrace = montrace_command(
        &dir,
        &["-q", "--no-report", "--flush-interval", flush_interval],
        cmd,
    );
    let mut strace = Command::new("strace");
    strace
        .args(["-f", "-qq", "-y", "-o"])
        .arg(&trace)
        .args([
            "-e",
            "trace=fsync,fdatasync,syncfs,sync,sync_file_range",
            "-e",
            "signal=none",
        ])
        .arg(montrace_bin())
        .args(montrace.get_args());
    for (key, value) in montrace.get_envs() {
        match value {
            Some(value) => strace.env(key, value),
            None => strace.env_remove(key),
        };
    }
    let done = run_with_timeout(&mut strace, TIMEOUT);
    assert!(done.status.success(), "strace montrace: {done:?}");
    // The run is whole either way: run.json, summary.json and the command's one process.
    let info = tests::read_json(&dir.join("run.json")).expect("run.json");
    assert_eq!(info["exit_code"], 0, "{info}");
    tests::read_json(&dir.join("summary.json")).expect("summary.json");
    assert_eq!(tests::read_processes(&dir).len(), 1, "{done:?}");
    let text = std::fs::read_to_string(&trace).expect("strace's output");
    let (mut files, mut others) = (Vec::new(), Vec::new());
    for line in text.lines().filter(|l| !l.contains("resumed>")) {
        let call = line
            .split_once(' ')
            .map_or(line, |(_, rest)| rest.trim_start());
        if call.starts_with("fsync(") || call.starts_with("fdatasync(") {
            let path = call.split_once('<').and_then(|(_, p)| p.split_once('>'));
            let name = path.map(|(p, _)| p.rsplit('/').next().unwrap_or(p).to_owned());
            files.push(name.unwrap_or_else(|| call.to_owned()));
        } else {
            others.push(call.to_owned());
        }
    }
    (files, others)
}

/// A run shorter than its flush interval leaves its files to the kernel's writeback: not one
/// fsync (each costs 0.2 to 0.7 ms here, more beside a neighbour that writes, where a short
/// run's own time is a few milliseconds). A run that recorded for its flush interval syncs each
/// of its 7 files before it renames it into place. Both are whole and read back.
#[test]
fn a_run_shorter_than_its_flush_interval_is_not_synced_and_a_longer_one_is() {
    require_root();
    let (files, others) = synced_under_strace("5s", &["true"]);
    assert_eq!((files, others), (vec![], vec![]), "a short run synced");

    let (mut files, others) = synced_under_strace("100ms", &["sleep", "0.3"]);
    assert_eq!(others, Vec::<String>::new(), "a whole-disk sync");
    files.sort();
    let expected = [
        ".events.parquet.tmp",
        ".marks.parquet.tmp",
        ".processes.parquet.tmp",
        ".run.json.tmp",
        ".samples.parquet.tmp",
        ".summary.json.tmp",
        ".system.parquet.tmp",
    ];
    assert_eq!(files, expected, "the files a long run synced");
}
