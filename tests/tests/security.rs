//! The monitored command is untrusted. Each test here tries one attack or fault on a montrace
//! run the way such a command (or a full disk, or a closed terminal) would, and asserts that
//! nothing outside the run directory was touched, that the command was supervised to its end,
//! and that montrace left nothing in the kernel. docs/security.md says why each cannot work.
use std::{
    collections::BTreeMap,
    os::unix::fs::{MetadataExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use tests::{
    compile_c, duckdb_query, montrace_command, read_json, require_root, run_with_timeout,
    users::TestUser, Finished, TIMEOUT,
};

/// Root-owned files in a directory only root can enter: what the attacks aim at. Checked byte
/// for byte, with owner and mode, and for files that should not have appeared.
struct Victims {
    dir: PathBuf,
    before: BTreeMap<PathBuf, (Vec<u8>, u32, u32, u32)>,
}

impl Victims {
    fn new(tag: &str) -> Victims {
        require_root();
        let dir = PathBuf::from(format!("/root/mt-victims-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        for i in 0..4 {
            let path = dir.join(format!("victim-{i}"));
            std::fs::write(&path, format!("root's file {i}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        let mut victims = Victims {
            dir,
            before: BTreeMap::new(),
        };
        victims.before = victims.snapshot();
        victims
    }

    fn snapshot(&self) -> BTreeMap<PathBuf, (Vec<u8>, u32, u32, u32)> {
        std::fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| {
                let path = e.unwrap().path();
                let meta = std::fs::symlink_metadata(&path).unwrap();
                let bytes = std::fs::read(&path).unwrap_or_default();
                (path, (bytes, meta.uid(), meta.gid(), meta.mode()))
            })
            .collect()
    }

    fn assert_untouched(&self, what: &str) {
        assert_eq!(
            self.snapshot(),
            self.before,
            "{what}: the root-only directory {} changed",
            self.dir.display()
        );
        let meta = std::fs::metadata(&self.dir).unwrap();
        assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o700), "{what}");
    }
}

impl Drop for Victims {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Every file and directory under `dir` (itself included), by lstat: all the user's.
fn assert_all_owned_by(dir: &Path, user: &TestUser) {
    let mut stack = vec![dir.to_path_buf()];
    let mut seen = 0;
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid()),
            (user.uid, user.gid),
            "{} belongs to the user, not root",
            path.display()
        );
        seen += 1;
        if meta.is_dir() {
            stack.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        }
    }
    assert!(seen > 1, "{} is empty", dir.display());
}

/// Every name montrace writes at the top of a run directory, and their temporary names.
const WRITTEN: &[&str] = &[
    "run.json",
    "summary.json",
    "processes.parquet",
    "events.parquet",
    "samples.parquet",
    "system.parquet",
    "marks.parquet",
    "report.html",
    "report.md",
    "report-timeline.svg",
    "report-cpu-time.svg",
];

fn temporary(name: &str) -> String {
    format!(".{name}.tmp")
}

/// `montrace run --out OUT ARGS -- sh -c SCRIPT` started as `sudo montrace` by `user` would
/// start it, from the user's home.
fn sudo_run(user: &TestUser, out: &Path, args: &[&str], script: &str) -> Finished {
    let mut cmd = user.sudo_montrace(&user.home, &["run", "--out"]);
    cmd.arg(out).args(args).args(["--", "sh", "-c", script]);
    run_with_timeout(&mut cmd, TIMEOUT)
}

#[test]
fn symlinks_planted_by_the_command_lead_nowhere_outside_the_run() {
    let victims = Victims::new("links");
    let user = TestUser::create("lnk");
    // Links to root's existing files: writing through them would overwrite those.
    fn existing(v: &Path, i: usize, _: &str) -> PathBuf {
        v.join(format!("victim-{}", i % 4))
    }
    // Dangling links into the root-only directory: writing through them would create files.
    fn dangling(v: &Path, _: usize, name: &str) -> PathBuf {
        v.join(format!("new-{name}"))
    }
    type Target = fn(&Path, usize, &str) -> PathBuf;
    let attempts: [(&str, Target); 2] = [("existing", existing), ("dangling", dangling)];
    for (attempt, target) in attempts {
        let out = user.home.join(format!("run-{attempt}"));
        let mut script = String::new();
        for (i, name) in WRITTEN.iter().enumerate() {
            for planted in [name.to_string(), temporary(name)] {
                script.push_str(&format!(
                    "ln -sf '{}' '{}'; ",
                    target(&victims.dir, i, &planted).display(),
                    out.join(&planted).display()
                ));
            }
        }
        script.push_str("exit 3");
        let run = sudo_run(&user, &out, &[], &script);
        assert_eq!(run.code(), 3, "the command's status: {run:?}");
        victims.assert_untouched(attempt);
        assert_all_owned_by(&out, &user);
        // The planted names were replaced, not followed: the files are montrace's.
        let json = read_json(&out.join("run.json")).unwrap();
        assert_eq!(json["exit_code"], 3, "{attempt}: {json}");
        assert!(read_json(&out.join("summary.json")).is_ok(), "{attempt}");
        for name in WRITTEN {
            let meta = std::fs::symlink_metadata(out.join(name)).unwrap();
            assert!(
                !meta.file_type().is_symlink(),
                "{attempt}: {name} is still a link"
            );
        }
    }
}

#[test]
fn a_parts_directory_swapped_for_a_link_stops_recording_not_the_command() {
    let victims = Victims::new("parts");
    let user = TestUser::create("prt");
    let out = user.home.join("run");
    let marker = user.home.join("finished");
    // The command moves montrace's parts directories away and puts links to root's directory
    // in their place, then goes on working and ends with 5.
    let script = format!(
        "for t in events processes samples system marks; do mv {o}/$t.parts {o}/$t.moved; \
         ln -s {v} {o}/$t.parts; done; for i in $(seq 200); do /bin/true; done; \
         touch {m}; exit 5",
        o = out.display(),
        v = victims.dir.display(),
        m = marker.display()
    );
    let run = sudo_run(&user, &out, &["--flush-interval", "100ms"], &script);
    assert_eq!(run.code(), 5, "{run:?}");
    assert!(marker.exists(), "the command ran to its end");
    victims.assert_untouched("parts");
    assert_eq!(
        run.stderr.matches("recording stopped").count(),
        1,
        "said once: {run:?}"
    );
}

#[test]
fn an_out_that_holds_files_is_refused_and_left_as_it_was() {
    let victims = Victims::new("out");
    let user = TestUser::create("out");
    // A run, then a second one into the same --out.
    let out = user.home.join("run");
    let first = sudo_run(&user, &out, &["--no-report"], "exit 0");
    assert_eq!(first.code(), 0, "{first:?}");
    let snapshot = |dir: &Path| -> BTreeMap<PathBuf, Vec<u8>> {
        let mut files = BTreeMap::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(p) = stack.pop() {
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.is_dir() {
                stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            } else if meta.file_type().is_symlink() {
                files.insert(
                    p.clone(),
                    std::fs::read_link(&p)
                        .unwrap()
                        .into_os_string()
                        .into_encoded_bytes(),
                );
            } else {
                files.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
        files
    };
    let before = snapshot(&out);
    let marker = user.home.join("ran");
    let again = sudo_run(&user, &out, &[], &format!("touch {}", marker.display()));
    assert_eq!(again.code(), 2, "refused: {again:?}");
    assert!(again.stderr.contains("is not empty"), "{again:?}");
    assert!(!marker.exists(), "the command did not run");
    assert_eq!(snapshot(&out), before, "the earlier run is byte-identical");

    // An --out the user prepared with a link to root's file in it: refused the same way.
    let planted = user.home.join("planted");
    std::fs::create_dir(&planted).unwrap();
    std::os::unix::fs::symlink(victims.dir.join("victim-0"), planted.join("summary.json")).unwrap();
    std::os::unix::fs::chown(&planted, Some(user.uid), Some(user.gid)).unwrap();
    let run = sudo_run(&user, &planted, &[], "exit 0");
    assert_eq!(run.code(), 2, "{run:?}");
    victims.assert_untouched("planted");
}

/// swap DIR LINK: swaps them with renameat2(RENAME_EXCHANGE) as fast as it can, forever.
const SWAP: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc != 3) return 2;
    for (;;) syscall(SYS_renameat2, AT_FDCWD, argv[1], AT_FDCWD, argv[2], 2 /* RENAME_EXCHANGE */);
}
"#;

#[test]
fn the_rename_exchange_race_hands_nothing_to_the_user() {
    let victims = Victims::new("race");
    let user = TestUser::create("rce");
    let swap = compile_c("swap", SWAP);
    // The program must be reachable by the user: copy it into their home.
    let swap_copy = user.home.join("swap");
    std::fs::copy(swap.as_str(), &swap_copy).unwrap();
    std::fs::set_permissions(&swap_copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    for i in 0..50 {
        let out = user.home.join(format!("race-{i}"));
        // In the run directory, a directory of the user's and a link to root's directory swap
        // places continuously while montrace finishes (--linger keeps the swapper running past
        // the command's own exit, into montrace's end of run).
        let script = format!(
            "mkdir {o}/d && touch {o}/d/f && ln -s {v} {o}/l && \
             (exec {s} {o}/d {o}/l &) ; exit 0",
            o = out.display(),
            v = victims.dir.display(),
            s = swap_copy.display()
        );
        let run = sudo_run(
            &user,
            &out,
            &[
                "--linger",
                "300ms",
                "--no-report",
                "-q",
                "--interval",
                "50ms",
            ],
            &script,
        );
        assert_eq!(run.code(), 0, "attempt {i}: {run:?}");
        let _ = Command::new("pkill")
            .args(["-9", "-u", &user.name, "swap"])
            .status();
        victims.assert_untouched(&format!("attempt {i}"));
    }
}

/// The names of the eBPF programs loaded in the kernel now (`bpftool prog show`).
/// The eBPF programs loaded in the kernel: (id, name).
fn loaded_programs() -> Vec<(u64, String)> {
    let out = Command::new("bpftool")
        .args(["prog", "show", "--json"])
        .output()
        .expect("bpftool (cargo xtask setup installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let progs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    progs
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| Some((p["id"].as_u64()?, p["name"].as_str()?.to_string())))
        .collect()
}

/// montrace's programs among `loaded` (monitor-ebpf: one per tracepoint, BTF and classic).
fn montrace_programs(loaded: &[(u64, String)]) -> Vec<(u64, String)> {
    loaded
        .iter()
        .filter(|(_, n)| {
            ["fork_", "exec_", "exit_", "switch_"]
                .iter()
                .any(|p| n.starts_with(p))
        })
        .cloned()
        .collect()
}

/// A small tmpfs mounted for a test, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, options: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(status.success(), "mount -t tmpfs -o {options}");
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Every `montrace/run-*` directory under /sys/fs/cgroup's hierarchies.
fn run_cgroups() -> Vec<PathBuf> {
    let mut parents = vec![PathBuf::from("/sys/fs/cgroup/montrace")];
    parents.extend(
        std::fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
            .map(|c| c.path().join("montrace")),
    );
    parents
        .iter()
        .flat_map(|p| std::fs::read_dir(p).into_iter().flatten().flatten())
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("run-"))
        .collect()
}

/// Processes whose program is `exe` (montrace and the children it forked before exec).
fn processes_running(exe: &Path) -> Vec<u32> {
    let exe = std::fs::canonicalize(exe).unwrap();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|p| p == exe))
        .collect()
}

#[test]
fn a_failure_after_the_fork_leaves_nothing_behind() {
    require_root();
    // Programs already loaded, and processes of this binary already running, are another
    // montrace's (a resident agent on this machine): only what appears after this point counts
    // as left behind.
    let before: std::collections::HashSet<u64> = montrace_programs(&loaded_programs())
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let bin = tests::montrace_bin();
    let running_before: std::collections::HashSet<u32> =
        processes_running(&bin).into_iter().collect();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let marker = tmp.path().join("ran");
    let mut cmd = montrace_command(&out, &[], &["touch", marker.to_str().unwrap()]);
    // Once the command is forked and held (while montrace loads its programs), its
    // `processes.parts` is taken: the recording cannot start, after the fork.
    let run = tests::run_with_timeout_and(&mut cmd, TIMEOUT, |montrace| {
        let children = format!("/proc/{montrace}/task/{montrace}/children");
        let deadline = Instant::now() + TIMEOUT;
        while std::fs::read_to_string(&children).is_ok_and(|c| c.trim().is_empty()) {
            assert!(Instant::now() < deadline, "montrace forked nothing");
            std::thread::sleep(Duration::from_micros(200));
        }
        std::fs::create_dir(out.join("processes.parts")).unwrap();
    });
    assert_eq!(run.code(), 125, "montrace failed: {run:?}");
    assert!(
        run.stderr.contains("processes.parts"),
        "failed where the test made it fail: {run:?}"
    );
    assert!(!marker.exists(), "the held command never ran: {run:?}");
    // Neither montrace nor the child it held is left, and nothing of montrace is in the kernel.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<u32> = processes_running(&bin)
            .into_iter()
            .filter(|pid| !running_before.contains(pid))
            .collect();
        let programs: Vec<(u64, String)> = montrace_programs(&loaded_programs())
            .into_iter()
            .filter(|(id, _)| !before.contains(id))
            .collect();
        if left.is_empty() && programs.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "10 s after montrace failed: processes {left:?}, programs {programs:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // No run cgroup of a montrace that is gone is left (another run's may be alive).
    for dir in run_cgroups() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let pid: u32 = name
            .split('-')
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        assert!(
            Path::new(&format!("/proc/{pid}")).exists(),
            "the run cgroup {} of a montrace that is gone is left",
            dir.display()
        );
    }
}

#[test]
fn a_full_disk_stops_the_recording_not_the_command() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let fs = Tmpfs::mount(&tmp.path().join("fs"), "size=256k");
    let out = fs.0.join("run");
    let marker = tmp.path().join("done");
    let script = format!(
        "for i in $(seq 3000); do /bin/true; done; echo done > {}; exit 5",
        marker.display()
    );
    let mut cmd = montrace_command(&out, &["--flush-interval", "200ms"], &["sh", "-c", &script]);
    let run = run_with_timeout(&mut cmd, TIMEOUT);
    assert_eq!(run.code(), 5, "the command's status: {run:?}");
    assert!(
        marker.exists(),
        "the command completed before montrace returned"
    );
    assert_eq!(
        run.stderr.matches("recording stopped").count(),
        1,
        "said once: {run:?}"
    );
    assert!(run.stderr.contains("No space left on device"), "{run:?}");
    // What was written before the disk filled reads back.
    let answer = duckdb_query(&format!(
        "SELECT count(*) AS n, count(*) FILTER (WHERE kind = 'exit') AS exits \
         FROM '{}/events.parts/*.parquet'",
        out.display()
    ));
    let n = answer.f64(0, "n").unwrap();
    assert!(n > 0.0, "no event read back from the parts: {answer:?}");
    eprintln!("events read back from the parts of the full disk: {n}");
    drop(fs);
}

/// `montrace run --out OUT -- sh -c 'sleep 0.5; exit 3'` with stderr on `stderr`.
fn run_with_stderr(out: &Path, stderr: Stdio) -> std::process::ExitStatus {
    let mut cmd = montrace_command(out, &[], &["sh", "-c", "sleep 0.5; exit 3"]);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "montrace did not end");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_full_or_closed_stderr_is_not_an_error() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let status = run_with_stderr(&tmp.path().join("full"), Stdio::from(full));
    assert_eq!(status.code(), Some(3), "2>/dev/full: {status:?}");
    assert!(read_json(&tmp.path().join("full/summary.json")).is_ok());

    // A pipe whose reader is gone before montrace writes.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let status = run_with_stderr(&tmp.path().join("closed"), Stdio::from(writer));
    assert_eq!(status.code(), Some(3), "closed stderr: {status:?}");
    assert!(read_json(&tmp.path().join("closed/summary.json")).is_ok());
}

#[test]
fn a_killed_montraces_cgroup_is_removed_by_the_next_run() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let started = tmp.path().join("started");
    let mut cmd = montrace_command(
        &tmp.path().join("killed"),
        &["-q"],
        &[
            "sh",
            "-c",
            &format!("touch {}; sleep 0.5", started.display()),
        ],
    );
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut montrace = cmd.spawn().unwrap();
    tests::wait_for_file(&started);
    // SAFETY: plain syscall on the montrace this test started.
    unsafe { libc::kill(montrace.id() as libc::pid_t, libc::SIGKILL) };
    montrace.wait().unwrap();
    let prefix = format!("run-{}-", montrace.id());
    let leftovers = || -> Vec<PathBuf> {
        run_cgroups()
            .into_iter()
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(&prefix)
            })
            .collect()
    };
    assert!(
        !leftovers().is_empty(),
        "kill -9 left the run cgroup (the premise)"
    );
    // The command's `sleep 0.5` ends by itself; its cgroup is then empty.
    let deadline = Instant::now() + Duration::from_secs(10);
    while leftovers().iter().any(|d| {
        !std::fs::read_to_string(d.join("cgroup.procs"))
            .unwrap_or_default()
            .trim()
            .is_empty()
    }) {
        assert!(
            Instant::now() < deadline,
            "the killed run's command did not end"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let next = run_with_timeout(
        &mut montrace_command(&tmp.path().join("next"), &["-q", "--no-report"], &["true"]),
        TIMEOUT,
    );
    assert_eq!(next.code(), 0, "{next:?}");
    assert!(leftovers().is_empty(), "left: {:?}", leftovers());
}

/// A tree that ignores SIGINT/SIGTERM (a shell and a busy child that trap them), plus a stopped
/// `sleep` that does not ignore them: the first SIGTERM to montrace is passed on (the stopped
/// sleep gets SIGCONT with it and dies), the second goes to the whole tree as SIGTERM, the third
/// as SIGKILL, and montrace ends at once with every process gone.
#[test]
fn signals_to_montrace_escalate() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let started = tmp.path().join("started");
    // The sleep starts before the traps: an ignored signal would be inherited.
    let script = format!(
        "sleep 30 & S=$!; until grep -qx sleep /proc/$S/comm; do :; done; kill -STOP $S; \
         trap '' INT TERM; \
         sh -c \"trap '' INT TERM; while :; do sleep 0.05; done\" & touch {}; wait",
        started.display()
    );
    let run = tests::launch_montrace(&["--no-report"], &["sh", "-c", &script]).during(|montrace| {
        tests::wait_for_file(&started);
        // montrace blocks SIGTERM and reads it from a signalfd: a SIGTERM sent while the one
        // before is still pending is merged with it by the kernel (standard signals do not
        // queue). So each is sent once montrace has read the one before (it has left the
        // process's shared pending set), not merely 300 ms later, which a busy machine need
        // not give montrace a CPU in.
        let send = |n: u32| {
            // SAFETY: plain syscall on the montrace this test started.
            unsafe { libc::kill(montrace as libc::pid_t, libc::SIGTERM) };
            eprintln!("SIGTERM {n} sent");
            let deadline = Instant::now() + TIMEOUT;
            while sigterm_pending(montrace) {
                assert!(Instant::now() < deadline, "montrace never read SIGTERM {n}");
                std::thread::sleep(Duration::from_millis(10));
            }
            std::thread::sleep(Duration::from_millis(300));
        };
        send(1);
        send(2);
        send(3);
    });
    // An upper bound, not a race: without the third signal's SIGKILL the tree, which ignores
    // SIGTERM, runs until the harness's 60 s.
    assert!(run.wall < Duration::from_secs(20), "{run:?}");
    assert_eq!(
        run.code(),
        128 + libc::SIGKILL,
        "the shell died of SIGKILL: {run:?}"
    );
    let json = run.run_json();
    assert_eq!(
        json["signals_forwarded"],
        serde_json::json!([15, 15, 9]),
        "{json}"
    );
    assert_eq!(json["totals"]["alive_at_end"], 0, "{json}");
    assert!(
        run.stderr.contains("SIGTERM sent to the"),
        "the second: {run:?}"
    );
    assert!(
        run.stderr.contains("SIGKILL sent to the"),
        "the third: {run:?}"
    );
    let rows = run.processes();
    let stopped = rows
        .iter()
        .find(|p| p.argv.as_deref() == Some(&["sleep".to_string(), "30".into()][..]))
        .expect("the stopped sleep");
    assert_eq!(
        stopped.exit_signal,
        Some(libc::SIGTERM),
        "the stopped sleep got SIGCONT with a SIGTERM, not the SIGKILL: {stopped:?}"
    );
}

#[test]
fn montrace_names_the_processes_it_waits_for_once() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = montrace_command(
        &tmp.path().join("run"),
        &["--no-report"],
        &["sh", "-c", "sleep 2.5 & exit 0"],
    );
    let run = run_with_timeout(&mut cmd, TIMEOUT);
    assert_eq!(run.code(), 0, "{run:?}");
    assert_eq!(
        run.stderr.matches("it left running").count(),
        1,
        "said once: {run:?}"
    );
    assert!(run.stderr.contains("sleep ("), "names the sleep: {run:?}");
}

#[test]
fn bad_durations_are_usage_errors_not_panics() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    for bad in ["99999999999999999999s", "100", "1e400s"] {
        let mut cmd = montrace_command(&tmp.path().join("x"), &["--interval", bad], &["true"]);
        let run = run_with_timeout(&mut cmd, TIMEOUT);
        assert_eq!(run.code(), 2, "--interval {bad}: {run:?}");
        assert!(!run.stderr.contains("panicked"), "{run:?}");
    }
}

/// Whether a SIGTERM to `pid` is pending, not yet taken by any of its threads (the process's
/// shared pending set, `ShdPnd` in /proc/PID/status); false once the process is gone.
fn sigterm_pending(pid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("ShdPnd:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (libc::SIGTERM - 1)) != 0)
}
