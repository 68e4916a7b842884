//! Exact tracking without sudo: an ordinary user runs a copy of montrace granted CAP_BPF and
//! CAP_PERFMON by `montrace setcap`, and gets the eBPF record of their own commands, with their
//! own environment, files they own, and no capability left to montrace or the command.
//! Without the grant, `run` and `attach` poll /proc and say so; the grant refuses a filesystem
//! that cannot keep file capabilities; an ordinary user cannot attach to root's processes.
use std::{
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use arrow_array::{Array, StringArray};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use tests::{
    montrace_bin, read_json, require_root, run_timeout, run_with_timeout,
    users::{Delegated, TestUser},
    Finished,
};

/// A root-owned copy of montrace (mode 0755) under /tmp, granted with its own `setcap`.
struct CapableCopy {
    dir: PathBuf,
    bin: PathBuf,
}

impl CapableCopy {
    fn new() -> CapableCopy {
        require_root();
        let dir = PathBuf::from(format!("/tmp/montrace-cap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let bin = dir.join("montrace");
        let installed = Command::new("install")
            .args(["-o", "root", "-g", "root", "-m", "0755"])
            .arg(montrace_bin())
            .arg(&bin)
            .status()
            .unwrap();
        assert!(installed.success());
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let grant = run_with_timeout(Command::new(&bin).arg("setcap").arg(&bin), run_timeout());
        assert_eq!(grant.code(), 0, "montrace setcap: {grant:?}");
        assert!(grant.stdout.contains("CAP_BPF"), "{grant:?}");
        CapableCopy { dir, bin }
    }
}

impl Drop for CapableCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A plain copy (no capabilities) the user can run.
fn plain_copy(dir: &Path) -> PathBuf {
    let bin = dir.join("montrace-plain");
    std::fs::copy(montrace_bin(), &bin).unwrap();
    std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    bin
}

/// `BIN run --out OUT ARGS -- sh -c SCRIPT` as `user`, with the user's own environment plus
/// `env`.
fn run_as(
    user: &TestUser,
    bin: &Path,
    out: &Path,
    args: &[&str],
    script: &str,
    env: &[(&str, &str)],
) -> Finished {
    let mut cmd = user.command(bin);
    cmd.current_dir(&user.home)
        .env_clear()
        .env("HOME", &user.home)
        .env("USER", &user.name)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .envs(env.iter().copied())
        .arg("run")
        .arg("--out")
        .arg(out)
        .args(args)
        .args(["--", "sh", "-c", script]);
    run_with_timeout(&mut cmd, run_timeout())
}

/// Rows of processes.parquet whose filename is `filename`.
fn rows_with_filename(dir: &Path, filename: &str) -> usize {
    let file = std::fs::File::open(dir.join("processes.parquet")).unwrap();
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    let mut n = 0;
    for batch in reader {
        let batch = batch.unwrap();
        let col = batch
            .column_by_name("filename")
            .unwrap()
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap()
            .clone();
        n += (0..col.len())
            .filter(|&i| !col.is_null(i) && col.value(i) == filename)
            .count();
    }
    n
}

/// The capability lines of a /proc/PID/status text, as (name, mask).
fn caps(text: &str, prefix: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .filter_map(|l| {
            let (name, hex) = l.split_once(':')?;
            name.starts_with("Cap").then(|| {
                (
                    name.to_string(),
                    u64::from_str_radix(hex.trim(), 16).unwrap(),
                )
            })
        })
        .collect()
}

#[test]
fn the_granted_binary_tracks_an_ordinary_users_command_exactly() {
    let copy = CapableCopy::new();
    let user = TestUser::create("cap");
    let out = user.home.join("run");
    // The command prints its own capabilities and those of every thread of montrace (its
    // parent; capabilities are per thread) at its start and again after its work, its PATH and
    // an exported variable, then starts exactly N /bin/true: 1000 here, 1000 / the slowdown in
    // the kernel tier's VM (200: without KVM each exec costs ~0.2 s there; the count is exact
    // either way).
    let n = 1000 / tests::slowdown();
    let script = &"montrace_threads() { for s in /proc/$PPID/task/*/status; do \
                    t=${s%/status}; grep ^Cap $s | sed \"s/^/montrace $1 ${t##*/} /\"; done; }; \
                  grep ^Cap /proc/self/status | sed 's/^/self /'; \
                  montrace_threads start; \
                  echo \"path $PATH\"; echo \"var $MONTRACE_TEST_VAR\"; \
                  i=0; while [ $i -lt N_TRUES ]; do /bin/true; i=$((i+1)); done; \
                  montrace_threads end; \
                  if ls /proc/$PPID/fd >/dev/null 2>&1; then echo 'montrace fds open'; \
                  else echo 'montrace fds refused'; fi; \
                  if head -c1 /proc/$PPID/environ >/dev/null 2>&1; then echo 'montrace environ open'; \
                  else echo 'montrace environ refused'; fi"
        .replace("N_TRUES", &n.to_string());
    let path = format!("{}/bin:/usr/local/bin:/usr/bin:/bin", user.home.display());
    let run = run_as(
        &user,
        &copy.bin,
        &out,
        &["--no-report", "-q"],
        script,
        &[("PATH", &path), ("MONTRACE_TEST_VAR", "kept-42")],
    );
    assert_eq!(run.code(), 0, "{run:?}");
    let json = read_json(&out.join("run.json")).unwrap();
    assert_eq!(json["tracking_mode"], "tp_btf", "{json}");
    assert_eq!(json["uid"], user.uid, "{json}");
    assert_eq!(rows_with_filename(&out, "/bin/true"), n as usize, "{run:?}");
    // No subtree is delegated to this user here: no cgroup, and run.json says why.
    assert!(json["cgroup"]["version"].is_null(), "{json}");
    let why = json["cgroup"]["error"].as_str().unwrap();
    assert!(why.contains("no delegated cgroup v2 subtree"), "{why}");
    assert!(
        run.stdout.contains(&format!("path {path}\n")),
        "the command sees the user's own PATH: {run:?}"
    );
    assert!(run.stdout.contains("var kept-42\n"), "{run:?}");
    let own = caps(&run.stdout, "self ");
    assert_eq!(own.len(), 5, "CapInh/Prm/Eff/Bnd/Amb: {run:?}");
    for (name, mask) in own.iter().filter(|(n, _)| n != "CapBnd") {
        assert_eq!(*mask, 0, "the command's {name} must be empty: {run:?}");
    }
    // Every thread of montrace, at both moments, holds none.
    for moment in ["start", "end"] {
        let threads: std::collections::BTreeSet<&str> = run
            .stdout
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("montrace {moment} ")))
            .filter_map(|l| l.split_once(' ').map(|(tid, _)| tid))
            .collect();
        assert!(!threads.is_empty(), "no thread of montrace read: {run:?}");
        for tid in &threads {
            let montrace = caps(&run.stdout, &format!("montrace {moment} {tid} "));
            assert_eq!(montrace.len(), 5, "thread {tid}: {run:?}");
            for (name, mask) in montrace.iter().filter(|(n, _)| n != "CapBnd") {
                assert_eq!(
                    *mask, 0,
                    "montrace's thread {tid} holds {name} after start-up ({moment}): {run:?}"
                );
            }
        }
    }
    // The user cannot reach into montrace once its capabilities are gone: were it an ordinary
    // dumpable process of the user, ptrace or /proc/PID/fd would hand over its eBPF map
    // descriptors (the tracked-process map). It is non-dumpable, so the kernel refuses both.
    for what in ["fds", "environ"] {
        assert!(
            run.stdout.contains(&format!("montrace {what} refused\n")),
            "the user reached montrace's {what}: {run:?}"
        );
    }
    // Every file and directory of the run is the user's.
    let mut paths = vec![out.clone()];
    for entry in std::fs::read_dir(&out).unwrap() {
        paths.push(entry.unwrap().path());
    }
    assert!(paths.len() > 5, "{paths:?}");
    for path in paths {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid()),
            (user.uid, user.gid),
            "{} belongs to the user",
            path.display()
        );
    }
}

#[test]
fn a_delegated_cgroup_v2_subtree_gives_an_ordinary_users_run_kernel_totals() {
    let copy = CapableCopy::new();
    let user = TestUser::create("dlg");
    let delegated = Delegated::new(&user);
    let out = user.home.join("run");
    // The command burns CPU in a few processes.
    let run = delegated.run(
        &copy.bin,
        &user,
        &out,
        &[],
        "for n in 1 2 3; do sh -c 'i=0; while [ $i -lt 150000 ]; do i=$((i+1)); done'; done",
    );
    assert_eq!(run.code(), 0, "{run:?}");
    let json = read_json(&out.join("run.json")).unwrap();
    assert_eq!(json["tracking_mode"], "tp_btf", "{json}");
    let cgroup = &json["cgroup"];
    assert_eq!(cgroup["version"], "v2", "{json}");
    let path = cgroup["path"].as_str().unwrap();
    assert!(
        path.starts_with(&format!("{}/montrace/run-", delegated.dir.display())),
        "the run cgroup sits in the delegated subtree, beside montrace's own: {path}"
    );
    assert_eq!(cgroup["removed"], true, "{json}");
    assert!(!Path::new(path).exists(), "{path} is removed");
    let usage = cgroup["totals"]["cpu_usage_ns"].as_u64().unwrap();
    // A floor only: a shell loop's CPU time is the machine's (its CPU's speed), not the load's
    // (waiting for a CPU is no CPU time); 450,000 rounds of dash take several times 100 ms.
    assert!(usage > 100_000_000, "the burners took CPU: {json}");
    let coverage = cgroup["cpu_coverage"].as_f64().unwrap();
    assert!(
        (0.97..=1.03).contains(&coverage),
        "per-process exit CPU against the kernel's total for the cgroup: {coverage} {json}"
    );
}

/// A shell loop of the user's: a `sleep` child alive at the attach (it lives until the drop,
/// however long montrace takes to start), and a short child every ~20 ms. Killed on drop.
struct Loop(std::process::Child);

impl Loop {
    fn start(user: &TestUser) -> Loop {
        let child = user
            .command("sh")
            .args([
                "-c",
                "sleep 86400 & while true; do /bin/true; sleep 0.02; done",
            ])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // The loop's first children exist before the attach.
        std::thread::sleep(Duration::from_millis(200));
        Loop(child)
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("pkill")
            .args(["-9", "-P", &self.0.id().to_string()])
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The run cgroup's own pressure, per sweep in system.parquet: while twice as many burners as
/// cores run, some of the tree's tasks wait for a CPU all the time; while it only sleeps, none.
#[test]
fn a_v2_run_cgroup_gives_the_trees_own_pressure_per_sweep() {
    let copy = CapableCopy::new();
    let user = TestUser::create("psi");
    let delegated = Delegated::new(&user);
    let out = user.home.join("run");
    let burners = 2 * std::thread::available_parallelism().unwrap().get();
    let script = format!(
        "for i in $(seq {burners}); do timeout 1.5 sh -c 'while :; do :; done' & done; wait; \
         sleep 1.2"
    );
    let run = delegated.run(&copy.bin, &user, &out, &["--interval", "250ms"], &script);
    assert_eq!(run.code(), 0, "{run:?}");
    let dir = out.display();
    // Rows whose whole interval (since the previous row) lies in the burners' time, or in the
    // sleep's.
    let answer = tests::duckdb_query(&format!(
        "WITH p AS (SELECT * FROM '{dir}/processes.parquet'), \
           busy AS (SELECT min(start_time) AS t0, max(end_time) AS t1 FROM p \
                    WHERE argv = ['sh', '-c', 'while :; do :; done']), \
           quiet AS (SELECT start_time AS t0, end_time AS t1 FROM p WHERE argv = ['sleep', '1.2']), \
           s AS (SELECT time, lag(time) OVER (ORDER BY time) AS since, run_cpu_some_percent AS cpu \
                 FROM '{dir}/system.parquet') \
         SELECT count(*) FILTER (WHERE s.since >= busy.t0 AND s.time <= busy.t1) AS busy_rows, \
           min(cpu) FILTER (WHERE s.since >= busy.t0 AND s.time <= busy.t1) AS busy_low, \
           avg(cpu) FILTER (WHERE s.since >= busy.t0 AND s.time <= busy.t1) AS busy_mean, \
           count(*) FILTER (WHERE s.since >= quiet.t0 AND s.time <= quiet.t1) AS quiet_rows, \
           max(cpu) FILTER (WHERE s.since >= quiet.t0 AND s.time <= quiet.t1) AS quiet_high, \
           count(*) FILTER (WHERE s.since IS NOT NULL AND cpu IS NULL) AS missing \
         FROM s, busy, quiet"
    ));
    eprintln!("{answer:?}");
    assert_eq!(answer.f64(0, "missing"), Some(0.0), "{answer:?}");
    // The burners live the 1.5 s of their `timeout` (never shorter), swept every 250 ms: about
    // 5 rows wholly inside; a busy machine delays a sweep, never skips one.
    assert!(answer.f64(0, "busy_rows").unwrap() >= 3.0, "{answer:?}");
    // PSI's "some" is, on each CPU, the share of time one of the cgroup's runnable tasks there
    // waits, averaged over the CPUs weighted by the time the cgroup has a task on each. Twice as
    // many burners as cores: balanced two a CPU, that is 100 %; placed three and one (a busy
    // machine's hog on one CPU moves them), the lone burner's CPU gives 0 % to 50 % (it waits
    // only for the hog), so 50 % to 75 % — a stress run measured a mean of 72 %. Never below
    // half, but at the edges, where the burners start and end a moment apart.
    assert!(answer.f64(0, "busy_low").unwrap() >= 25.0, "{answer:?}");
    assert!(answer.f64(0, "busy_mean").unwrap() >= 50.0, "{answer:?}");
    // While the tree only sleeps none of its tasks is runnable: no CPU pressure, whatever the
    // machine does (its 1.2 s hold about 4 rows).
    assert!(answer.f64(0, "quiet_rows").unwrap() >= 2.0, "{answer:?}");
    assert!(answer.f64(0, "quiet_high").unwrap() <= 10.0, "{answer:?}");
}

fn attach_as(user: &TestUser, bin: &Path, out: &Path, pid: u32) -> Finished {
    let mut cmd = user.command(bin);
    cmd.current_dir(&user.home)
        .args(["attach", "--no-report", "-q", "--duration", "2s", "--out"])
        .arg(out)
        .arg(pid.to_string());
    run_with_timeout(&mut cmd, run_timeout())
}

#[test]
fn an_ordinary_user_attaches_to_their_own_processes_only() {
    let copy = CapableCopy::new();
    let user = TestUser::create("att");
    let lp = Loop::start(&user);
    let out = user.home.join("attached");
    let run = attach_as(&user, &copy.bin, &out, lp.0.id());
    assert_eq!(run.code(), 0, "{run:?}");
    let json = read_json(&out.join("run.json")).unwrap();
    assert_eq!(json["tracking_mode"], "tp_btf", "{json}");
    // The sleep alive at the attach and the loop's children since: three rounds of the loop
    // (a /bin/true and a 20 ms sleep, ~30 ms on an idle machine) in the attach's 2 s, which a
    // busy machine slows but does not stop. (It was 1 s: 330 ms a round.)
    assert!(json["processes_started"].as_u64().unwrap() >= 5, "{json}");
    assert!(rows_with_filename(&out, "/bin/true") >= 3, "{run:?}");

    // Root's process: refused before anything is loaded or created.
    let refused = user.home.join("refused");
    let run = attach_as(&user, &copy.bin, &refused, 1);
    assert_eq!(run.code(), 2, "{run:?}");
    assert!(run.stderr.contains("your own"), "{run:?}");
    assert!(!refused.exists(), "no run directory for a refused attach");

    // The user's own process that made itself non-dumpable (as ssh-agent does): a debugger
    // could not attach to it, so neither may montrace.
    let mut agent = user
        .command("/usr/bin/python3")
        .args([
            "-c",
            "import ctypes, sys, time; ctypes.CDLL(None).prctl(4, 0, 0, 0, 0); \
             print('ready', flush=True); time.sleep(30)",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = [0u8; 6];
    std::io::Read::read_exact(agent.stdout.as_mut().unwrap(), &mut ready).unwrap();
    let guarded = user.home.join("guarded");
    let run = attach_as(&user, &copy.bin, &guarded, agent.id());
    let _ = agent.kill();
    let _ = agent.wait();
    assert_eq!(run.code(), 2, "{run:?}");
    assert!(run.stderr.contains("not dumpable"), "{run:?}");
    assert!(!guarded.exists(), "no run directory for a refused attach");
}

#[test]
fn without_the_grant_run_and_attach_poll_and_say_so() {
    require_root();
    let user = TestUser::create("pol");
    let bin = plain_copy(&user.home);
    let out = user.home.join("polled");
    // Not quiet: the summary is printed.
    let run = run_as(
        &user,
        &bin,
        &out,
        &["--no-report"],
        "/bin/true; sleep 0.3",
        &[],
    );
    assert_eq!(run.code(), 0, "{run:?}");
    let json = read_json(&out.join("run.json")).unwrap();
    assert_eq!(json["tracking_mode"], "polling");
    // No delegated subtree here: no run cgroup, so the CPU coverage is unknown, not 0 %.
    assert!(json["cgroup"]["path"].is_null(), "{json}");
    assert!(json["cgroup"]["cpu_coverage"].is_null(), "{json}");
    assert!(
        run.stderr
            .contains("CPU coverage         unavailable (no run cgroup)"),
        "{run:?}"
    );
    assert_eq!(
        run.stderr.matches("no eBPF").count(),
        1,
        "said once: {run:?}"
    );
    assert!(run.stderr.contains("montrace setcap"), "{run:?}");

    let lp = Loop::start(&user);
    let out = user.home.join("attach-polled");
    let run = attach_as(&user, &bin, &out, lp.0.id());
    assert_eq!(run.code(), 0, "{run:?}");
    let json = read_json(&out.join("run.json")).unwrap();
    assert_eq!(json["tracking_mode"], "polling", "{json}");
    assert!(json["processes_started"].as_u64().unwrap() >= 2, "{json}");
    assert_eq!(run.stderr.matches("no eBPF").count(), 1, "{run:?}");
}

#[test]
fn the_grant_on_a_filesystem_without_xattrs_says_what_to_do() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("ramfs");
    std::fs::create_dir(&mnt).unwrap();
    // ramfs keeps no extended attributes, so no file capabilities.
    let mounted = Command::new("mount")
        .args(["-t", "ramfs", "ramfs"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(mounted.success(), "mount -t ramfs");
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mnt.clone());
    let bin = mnt.join("montrace");
    std::fs::copy(montrace_bin(), &bin).unwrap();
    std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let grant = run_with_timeout(
        Command::new(&bin).arg("setcap").arg(&bin),
        Duration::from_secs(20),
    );
    assert_eq!(grant.code(), 125, "{grant:?}");
    assert!(
        grant.stderr.contains("does not keep file capabilities"),
        "{grant:?}"
    );
    assert!(
        grant.stderr.contains("/usr/local/bin"),
        "says where instead: {grant:?}"
    );
}
