//! The harness of montrace's end-to-end tests: find the binary, run it on a workload with a
//! time limit, compile small C workloads, and read the run directory back.
//!
//! These tests need root (montrace loads eBPF programs). They do not skip themselves without it:
//! every entry point calls [`require_root`], so an unprivileged run fails loudly instead of
//! passing on nothing. Run them with `cargo xtask test`, or as root with
//! `cargo test -p tests -- --test-threads=1` (they run serially: several count CPU time).
use std::{
    fs::File,
    io::{Read as _, Seek as _, SeekFrom},
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use arrow_array::{
    Array, BooleanArray, Float64Array, Int32Array, Int64Array, ListArray, RecordBatch, StringArray,
    TimestampMicrosecondArray, UInt32Array, UInt64Array,
};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use tempfile::TempDir;

pub mod agent;
pub mod pids;
pub mod slurm;
pub mod users;

/// How long any one montrace run may take before the harness kills it and fails the test.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// [`TIMEOUT`] for the runs the harness starts itself, times `$MONTRACE_TEST_TIMEOUT_SCALE`
/// (default 1): the kernel tier's VMs without KVM run everything several times slower. A bound
/// for a hung run, not a timing assertion.
pub fn run_timeout() -> Duration {
    TIMEOUT * slowdown()
}

/// `$MONTRACE_TEST_TIMEOUT_SCALE` (default 1): how many times slower than this machine the
/// tests run (5 in the kernel tier's VMs without KVM).
pub fn slowdown() -> u32 {
    std::env::var("MONTRACE_TEST_TIMEOUT_SCALE")
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .unwrap_or(1)
        .max(1)
}

pub const MIB: u64 = 1 << 20;
pub const MS: u64 = 1_000_000;

/// The montrace binary under test: `$MONTRACE_BIN`, else `<workspace>/target/debug/montrace`.
pub fn montrace_bin() -> PathBuf {
    let path = match std::env::var_os("MONTRACE_BIN") {
        Some(path) => PathBuf::from(path),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/montrace"),
    };
    assert!(
        path.is_file(),
        "the montrace binary is missing at {}: build it with `cargo build -p monitor` or run \
         `cargo xtask test` (MONTRACE_BIN overrides the path)",
        path.display()
    );
    path
}

/// The preamble of every test: montrace needs root, so these tests do too.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "root tests need root: run `cargo xtask test` (it uses sudo); this test runs as euid {euid}"
    );
}

/// What a finished command left: its status, its output and how long it took.
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub wall: Duration,
}

impl std::fmt::Debug for Finished {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ended with {} after {:.3}s\n--- stdout\n{}--- stderr\n{}---",
            self.status,
            self.wall.as_secs_f64(),
            self.stdout,
            self.stderr
        )
    }
}

impl Finished {
    /// The exit code; panics when a signal killed the process.
    pub fn code(&self) -> i32 {
        self.status
            .code()
            .unwrap_or_else(|| panic!("montrace itself was killed: {self:?}"))
    }
}

/// Runs `cmd` in its own process group with stdout and stderr captured in files (not pipes, so a
/// daemon that keeps them open cannot hang the test). After `timeout` the whole group is killed
/// and the test fails.
pub fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Finished {
    run_with_timeout_and(cmd, timeout, |_| {})
}

/// As [`run_with_timeout`], calling `during(pid)` once the process has started.
pub fn run_with_timeout_and(
    cmd: &mut Command,
    timeout: Duration,
    during: impl FnOnce(u32),
) -> Finished {
    cmd.process_group(0);
    wait_with_timeout(cmd, timeout, during)
}

/// As [`run_with_timeout_and`], for a command already made the leader of its own process group
/// (`process_group(0)`, or `setsid` in a `pre_exec` hook).
fn wait_with_timeout(cmd: &mut Command, timeout: Duration, during: impl FnOnce(u32)) -> Finished {
    let mut out = tempfile::tempfile().expect("creating a temporary file for stdout");
    let mut err = tempfile::tempfile().expect("creating a temporary file for stderr");
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone().expect("duplicating the stdout file"))
        .stderr(err.try_clone().expect("duplicating the stderr file"));
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    // A failing check in `during` must not leave the run behind (a montrace still waiting on
    // its command, holding the test's files): its process group is killed, then the panic goes on.
    let pid = child.id();
    if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| during(pid))) {
        // SAFETY: plain syscall on the process group we created for this child.
        unsafe { libc::kill(-(pid as libc::pid_t), libc::SIGKILL) };
        let _ = child.wait();
        std::panic::resume_unwind(panic);
    }
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the command") {
            break status;
        }
        if started.elapsed() > timeout {
            // SAFETY: plain syscall on the process group we created for this child.
            unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
            let _ = child.wait();
            panic!(
                "{cmd:?} did not finish within {timeout:?}; killed it. stderr so far:\n{}",
                read_all(&mut err)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let wall = started.elapsed();
    Finished {
        status,
        stdout: read_all(&mut out),
        stderr: read_all(&mut err),
        wall,
    }
}

fn read_all(file: &mut File) -> String {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0))
        .expect("rewinding output file");
    file.read_to_string(&mut text).expect("reading output file");
    text
}

/// A `montrace run --out OUT ARGS -- CMD` command, without the `SUDO_*` variables the test
/// runner may have been started with (they would make montrace drop to that user).
pub fn montrace_command(out: &Path, args: &[&str], cmd: &[&str]) -> Command {
    let mut command = Command::new(montrace_bin());
    command
        .arg("run")
        .arg("--out")
        .arg(out)
        .args(args)
        .arg("--")
        .args(cmd)
        .env_remove("SUDO_UID")
        .env_remove("SUDO_GID")
        .env_remove("SUDO_USER")
        .env_remove("SUDO_COMMAND");
    command
}

/// [`montrace_command`] run as the unprivileged user `nobody` (uid and gid 65534, no
/// supplementary groups), from a copy of the binary every user can reach
/// ([`users::reachable_montrace`]: the workspace may sit where `nobody` cannot enter).
pub fn montrace_command_as_nobody(out: &Path, args: &[&str], cmd: &[&str]) -> Command {
    let command = montrace_command(out, args, cmd);
    let mut as_nobody = Command::new(users::reachable_montrace());
    as_nobody.args(command.get_args());
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => as_nobody.env(key, value),
            None => as_nobody.env_remove(key),
        };
    }
    // SAFETY: only async-signal-safe calls between fork and exec; the arguments are constants.
    unsafe {
        as_nobody.pre_exec(|| {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(65534) != 0
                || libc::setuid(65534) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    as_nobody
}

/// One montrace run and its run directory (removed when the value is dropped).
pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// Wall time of the whole montrace process, start-up included.
    pub wall: Duration,
    pub dir: PathBuf,
    pub command_line: String,
    _tmp: TempDir,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` ended with {} after {:.3}s\n--- stdout\n{}--- stderr\n{}---",
            self.command_line,
            self.status,
            self.wall.as_secs_f64(),
            self.stdout,
            self.stderr
        )
    }
}

/// Runs `montrace run --out <fresh dir>/run ARGS -- CMD` as root and waits for it (at most
/// [`TIMEOUT`]).
pub fn run_montrace(args: &[&str], cmd: &[&str]) -> Run {
    run_montrace_env(args, cmd, &[])
}

/// As [`run_montrace`], with extra environment variables for montrace.
pub fn run_montrace_env(args: &[&str], cmd: &[&str], env: &[(&str, &str)]) -> Run {
    run_montrace_and(args, cmd, env, |_| {})
}

/// As [`run_montrace_env`], calling `during(montrace's pid)` once montrace has started.
pub fn run_montrace_and(
    args: &[&str],
    cmd: &[&str],
    env: &[(&str, &str)],
    during: impl FnOnce(u32),
) -> Run {
    launch_montrace(args, cmd).envs(env).during(during)
}

/// `montrace run --out <fresh dir>/run ARGS -- CMD`, set up and not started yet: say how, then
/// [`MontraceLaunch::run`] it.
pub fn launch_montrace(args: &[&str], cmd: &[&str]) -> MontraceLaunch {
    require_root();
    let tmp = tempfile::tempdir().expect("creating a temporary directory");
    let dir = tmp.path().join("run");
    let command = montrace_command(&dir, args, cmd);
    let command_line = format!(
        "montrace run --out {} {} -- {}",
        dir.display(),
        args.join(" "),
        cmd.join(" ")
    );
    MontraceLaunch {
        command,
        command_line,
        dir,
        tmp,
        ahead: false,
    }
}

/// A montrace run set up and not started yet (see [`launch_montrace`]).
pub struct MontraceLaunch {
    command: Command,
    command_line: String,
    dir: PathBuf,
    tmp: TempDir,
    ahead: bool,
}

impl MontraceLaunch {
    /// The run directory montrace will write.
    pub fn dir(&self) -> PathBuf {
        self.dir.clone()
    }

    /// Extra environment variables for montrace. With `SUDO_UID` and `SUDO_GID` (montrace as
    /// `sudo` starts it), the directory that will hold the run directory is given to that user:
    /// montrace creates the run with the user's identity, in a place the user can write, as a
    /// user's `sudo montrace run --out ~/x` does.
    pub fn envs(mut self, env: &[(&str, &str)]) -> Self {
        self.command.envs(env.iter().copied());
        let id = |key: &str| {
            env.iter()
                .find(|(k, _)| *k == key)
                .and_then(|(_, v)| v.parse::<u32>().ok())
        };
        if let (Some(uid), Some(gid)) = (id("SUDO_UID"), id("SUDO_GID")) {
            std::os::unix::fs::chown(self.tmp.path(), Some(uid), Some(gid))
                .expect("giving the test's directory to the sudo user");
        }
        self
    }

    /// Runs montrace, and so the command it starts, ahead of whatever else the machine runs
    /// (other builds and tests), for the tests whose figures depend on getting the CPUs: in a
    /// session of its own, whose scheduler autogroup gets nice -20 (autogroups share the CPUs
    /// fairly whatever their processes' nice values), and at nice -20 itself, so that neither
    /// montrace nor its command is behind the other.
    pub fn ahead_of_the_machine(mut self) -> Self {
        self.ahead = true;
        self
    }

    /// Starts montrace and waits for it (at most [`TIMEOUT`]).
    pub fn run(self) -> Run {
        self.during(|_| {})
    }

    /// Starts montrace, calls `during(montrace's pid)`, and waits for it (at most [`TIMEOUT`]).
    pub fn during(mut self, during: impl FnOnce(u32)) -> Run {
        let finished = if self.ahead {
            // SAFETY: the hook makes only async-signal-safe calls (setsid, open, write, close,
            // setpriority) on data prepared before the fork.
            unsafe { self.command.pre_exec(go_ahead) };
            wait_with_timeout(&mut self.command, run_timeout(), during)
        } else {
            run_with_timeout_and(&mut self.command, run_timeout(), during)
        };
        Run {
            status: finished.status,
            stdout: finished.stdout,
            stderr: finished.stderr,
            wall: finished.wall,
            dir: self.dir,
            command_line: self.command_line,
            _tmp: self.tmp,
        }
    }
}

/// Runs `montrace attach --out <fresh dir>/run ARGS PID` as root and waits for it (at most
/// [`TIMEOUT`]).
pub fn attach_montrace(pid: u32, args: &[&str]) -> Run {
    require_root();
    let tmp = tempfile::tempdir().expect("creating a temporary directory");
    let dir = tmp.path().join("run");
    let mut command = Command::new(montrace_bin());
    command
        .arg("attach")
        .arg("--out")
        .arg(&dir)
        .args(args)
        .arg(pid.to_string());
    let command_line = format!(
        "montrace attach --out {} {} {pid}",
        dir.display(),
        args.join(" ")
    );
    let finished = run_with_timeout(&mut command, run_timeout());
    Run {
        status: finished.status,
        stdout: finished.stdout,
        stderr: finished.stderr,
        wall: finished.wall,
        dir,
        command_line,
        _tmp: tmp,
    }
}

/// The `pre_exec` hook of [`MontraceLaunch::ahead_of_the_machine`]. `setsid` also makes the
/// process the leader of a new process group, which the timeout kills as a whole.
fn go_ahead() -> std::io::Result<()> {
    let os_error = std::io::Error::last_os_error;
    // SAFETY: plain syscalls on this process and a static NUL-terminated path.
    unsafe {
        if libc::setsid() < 0 {
            return Err(os_error());
        }
        // Without autogroups (a kernel built without them) there is no file: nice alone then.
        let fd = libc::open(c"/proc/self/autogroup".as_ptr(), libc::O_WRONLY);
        if fd >= 0 {
            let written = libc::write(fd, b"-20".as_ptr().cast(), 3);
            libc::close(fd);
            if written != 3 {
                return Err(os_error());
            }
        }
        if libc::setpriority(libc::PRIO_PROCESS, 0, -20) != 0 {
            return Err(os_error());
        }
    }
    Ok(())
}

impl Run {
    /// montrace's exit code; panics when a signal killed montrace itself.
    pub fn code(&self) -> i32 {
        self.status
            .code()
            .unwrap_or_else(|| panic!("montrace itself was killed: {self:?}"))
    }

    /// Panics unless montrace exited with `code`.
    pub fn assert_code(&self, code: i32) {
        assert_eq!(
            self.status.code(),
            Some(code),
            "montrace should exit with {code}: {self:?}"
        );
    }

    /// The rows of `processes.parquet`, in file order.
    pub fn processes(&self) -> Vec<Proc> {
        read_processes(&self.dir)
    }

    /// The rows of `events.parquet`, in file order.
    pub fn events(&self) -> Vec<Event> {
        let path = self.dir.join("events.parquet");
        let mut rows = Vec::new();
        for batch in read_batches(&path) {
            let c = Columns {
                batch: &batch,
                path: &path,
            };
            let time = c.time("time");
            let kind = c.get::<StringArray>("kind");
            let pid = c.get::<UInt32Array>("pid");
            let start_time = c.time("start_time");
            let parent_pid = c.get::<UInt32Array>("parent_pid");
            let parent_start_time = c.time("parent_start_time");
            let filename = c.get::<StringArray>("filename");
            let argv = c.get::<ListArray>("argv");
            let tid = c.get::<UInt32Array>("tid");
            let exit_code = c.get::<Int32Array>("exit_code");
            let exit_signal = c.get::<Int32Array>("exit_signal");
            let cpu_user_ns = c.get::<UInt64Array>("cpu_user_ns");
            let cpu_system_ns = c.get::<UInt64Array>("cpu_system_ns");
            let peak_rss_bytes = c.get::<UInt64Array>("peak_rss_bytes");
            for i in 0..batch.num_rows() {
                rows.push(Event {
                    time: time.value(i),
                    kind: kind.value(i).to_string(),
                    pid: pid.value(i),
                    start_time: start_time.value(i),
                    parent_pid: opt(parent_pid, i),
                    parent_start_time: opt(parent_start_time, i),
                    filename: opt_str(filename, i),
                    argv: opt_list(argv, i),
                    tid: opt(tid, i),
                    exit_code: opt(exit_code, i),
                    exit_signal: opt(exit_signal, i),
                    cpu_user_ns: opt(cpu_user_ns, i),
                    cpu_system_ns: opt(cpu_system_ns, i),
                    peak_rss_bytes: opt(peak_rss_bytes, i),
                });
            }
        }
        rows
    }

    /// The rows of `samples.parquet`, in file order.
    pub fn samples(&self) -> Vec<Sample> {
        read_samples(&self.dir.join("samples.parquet"))
    }

    /// The `time` of every row of `system.parquet` (one per sampling sweep), in file order.
    pub fn system_times(&self) -> Vec<i64> {
        let path = self.dir.join("system.parquet");
        read_batches(&path)
            .iter()
            .flat_map(|batch| {
                let c = Columns { batch, path: &path };
                c.time("time").values().to_vec()
            })
            .collect()
    }

    /// `(time, tree_rss_bytes)` of every row of `system.parquet`: the tree's memory at each
    /// sweep, each memory image counted once (what `--limit rss` checks).
    pub fn tree_rss(&self) -> Vec<(i64, Option<u64>)> {
        let path = self.dir.join("system.parquet");
        read_batches(&path)
            .iter()
            .flat_map(|batch| {
                let c = Columns { batch, path: &path };
                let (time, rss) = (c.time("time"), c.get::<UInt64Array>("tree_rss_bytes"));
                (0..batch.num_rows())
                    .map(|i| (time.value(i), opt(rss, i)))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// `run.json`, parsed.
    pub fn run_json(&self) -> serde_json::Value {
        let path = self.dir.join("run.json");
        read_json(&path).unwrap_or_else(|e| panic!("{e}\n{self:?}"))
    }

    /// `summary.json`, parsed.
    pub fn summary_json(&self) -> serde_json::Value {
        let path = self.dir.join("summary.json");
        read_json(&path).unwrap_or_else(|e| panic!("{e}\n{self:?}"))
    }

    /// Panics unless `run.json` says that no event was lost and no process vanished.
    pub fn assert_nothing_lost(&self) {
        let json = self.run_json();
        for counter in ["ringbuf_full", "track_map_full", "read_errors"] {
            assert_eq!(
                json["lost_events"][counter], 0,
                "lost_events.{counter} should be 0 in {}",
                json
            );
        }
        assert_eq!(
            json["vanished_processes"], 0,
            "no process should vanish: {json}"
        );
    }

    /// The one row without a parent: the command montrace started.
    pub fn root<'a>(&self, rows: &'a [Proc]) -> &'a Proc {
        let roots: Vec<&Proc> = rows.iter().filter(|p| p.parent_pid.is_none()).collect();
        assert_eq!(
            roots.len(),
            1,
            "exactly one row (the command) should have no parent: {roots:#?}\n{self:?}"
        );
        roots[0]
    }
}

/// A row of `processes.parquet`: every column of schema version 1. Times are ns since the
/// epoch; None is null.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proc {
    pub pid: u32,
    pub start_time: i64,
    pub parent_pid: Option<u32>,
    pub parent_start_time: Option<i64>,
    pub end_time: Option<i64>,
    pub filename: Option<String>,
    pub argv: Option<Vec<String>>,
    pub argv_truncated: bool,
    pub comm: String,
    pub exec_count: u32,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub core_dumped: bool,
    pub cpu_user_ns: Option<u64>,
    pub cpu_system_ns: Option<u64>,
    pub peak_rss_bytes: Option<u64>,
    pub minor_faults: Option<u64>,
    pub major_faults: Option<u64>,
    pub voluntary_ctxt_switches: Option<u64>,
    pub involuntary_ctxt_switches: Option<u64>,
    pub read_bytes: Option<u64>,
    pub write_bytes: Option<u64>,
    pub read_chars: Option<u64>,
    pub write_chars: Option<u64>,
    /// Time off the CPU (null without the BTF tracepoints).
    pub run_queue_ns: Option<u64>,
    pub blocked_ns: Option<u64>,
    pub sleep_ns: Option<u64>,
    /// Socket bytes by family (null without the BTF tracepoints of Linux 6.3+).
    pub net_inet_sent_bytes: Option<u64>,
    pub net_inet_received_bytes: Option<u64>,
    pub net_unix_sent_bytes: Option<u64>,
    pub net_unix_received_bytes: Option<u64>,
    pub alive_at_end: bool,
}

impl Proc {
    /// User + system CPU time; panics when the row has no exit figures.
    pub fn cpu_ns(&self) -> u64 {
        match (self.cpu_user_ns, self.cpu_system_ns) {
            (Some(user), Some(system)) => user + system,
            _ => panic!("this row has no CPU figures: {self:#?}"),
        }
    }

    /// Whether `parent` is this row's parent, by the full identity (pid, start_time).
    pub fn is_child_of(&self, parent: &Proc) -> bool {
        self.parent_pid == Some(parent.pid) && self.parent_start_time == Some(parent.start_time)
    }

    pub fn has_filename(&self, filename: &str) -> bool {
        self.filename.as_deref() == Some(filename)
    }
}

/// A row of `events.parquet`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub time: i64,
    pub kind: String,
    pub pid: u32,
    pub start_time: i64,
    pub parent_pid: Option<u32>,
    pub parent_start_time: Option<i64>,
    pub filename: Option<String>,
    pub argv: Option<Vec<String>>,
    pub tid: Option<u32>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub cpu_user_ns: Option<u64>,
    pub cpu_system_ns: Option<u64>,
    pub peak_rss_bytes: Option<u64>,
}

/// A row of `samples.parquet`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub time: i64,
    pub pid: u32,
    pub start_time: i64,
    /// `procfs` (a sweep) or `exit` (the kernel's figures at the exit).
    pub source: String,
    pub cpu_user_ns: u64,
    pub cpu_system_ns: u64,
    pub cpu_percent: Option<f64>,
    pub rss_bytes: Option<u64>,
    pub uss_bytes: Option<u64>,
    pub pss_bytes: Option<u64>,
    pub swap_bytes: Option<u64>,
    pub vms_bytes: Option<u64>,
    pub threads: Option<u32>,
    pub fds: Option<u32>,
    pub read_bytes: Option<u64>,
    pub write_bytes: Option<u64>,
    pub read_chars: Option<u64>,
    pub write_chars: Option<u64>,
    pub minor_faults: Option<u64>,
    pub major_faults: Option<u64>,
    pub state: Option<String>,
}

impl Sample {
    /// User + system CPU time so far.
    pub fn cpu_ns(&self) -> u64 {
        self.cpu_user_ns + self.cpu_system_ns
    }

    /// Whether this row is about `process`, by the full identity (pid, start_time).
    pub fn is_of(&self, process: &Proc) -> bool {
        self.pid == process.pid && self.start_time == process.start_time
    }
}

/// The rows of a samples table (`samples.parquet`, or one part of it), in file order.
pub fn read_samples(path: &Path) -> Vec<Sample> {
    let mut rows = Vec::new();
    for batch in read_batches(path) {
        let c = Columns {
            batch: &batch,
            path,
        };
        let time = c.time("time");
        let pid = c.get::<UInt32Array>("pid");
        let start_time = c.time("start_time");
        let source = c.get::<StringArray>("source");
        let cpu_user_ns = c.get::<UInt64Array>("cpu_user_ns");
        let cpu_system_ns = c.get::<UInt64Array>("cpu_system_ns");
        let cpu_percent = c.get::<Float64Array>("cpu_percent");
        let rss_bytes = c.get::<UInt64Array>("rss_bytes");
        let uss_bytes = c.get::<UInt64Array>("uss_bytes");
        let pss_bytes = c.get::<UInt64Array>("pss_bytes");
        let swap_bytes = c.get::<UInt64Array>("swap_bytes");
        let vms_bytes = c.get::<UInt64Array>("vms_bytes");
        let threads = c.get::<UInt32Array>("threads");
        let fds = c.get::<UInt32Array>("fds");
        let read_bytes = c.get::<UInt64Array>("read_bytes");
        let write_bytes = c.get::<UInt64Array>("write_bytes");
        let read_chars = c.get::<UInt64Array>("read_chars");
        let write_chars = c.get::<UInt64Array>("write_chars");
        let minor_faults = c.get::<UInt64Array>("minor_faults");
        let major_faults = c.get::<UInt64Array>("major_faults");
        let state = c.get::<StringArray>("state");
        for i in 0..batch.num_rows() {
            rows.push(Sample {
                time: time.value(i),
                pid: pid.value(i),
                start_time: start_time.value(i),
                source: source.value(i).to_string(),
                cpu_user_ns: cpu_user_ns.value(i),
                cpu_system_ns: cpu_system_ns.value(i),
                cpu_percent: opt(cpu_percent, i),
                rss_bytes: opt(rss_bytes, i),
                uss_bytes: opt(uss_bytes, i),
                pss_bytes: opt(pss_bytes, i),
                swap_bytes: opt(swap_bytes, i),
                vms_bytes: opt(vms_bytes, i),
                threads: opt(threads, i),
                fds: opt(fds, i),
                read_bytes: opt(read_bytes, i),
                write_bytes: opt(write_bytes, i),
                read_chars: opt(read_chars, i),
                write_chars: opt(write_chars, i),
                minor_faults: opt(minor_faults, i),
                major_faults: opt(major_faults, i),
                state: opt_str(state, i),
            });
        }
    }
    rows
}

/// A JSON file, parsed; the error says which file and why.
pub fn read_json(path: &Path) -> Result<serde_json::Value, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not JSON: {e}\n{text}", path.display()))
}

fn read_batches(path: &Path) -> Vec<RecordBatch> {
    let file = File::open(path).unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    ParquetRecordBatchReaderBuilder::try_new(file)
        .and_then(|builder| builder.build())
        .unwrap_or_else(|e| panic!("{} is not a readable Parquet file: {e}", path.display()))
        .map(|batch| {
            batch.unwrap_or_else(|e| panic!("cannot read a batch of {}: {e}", path.display()))
        })
        .collect()
}

/// Typed access to a batch's columns by name.
struct Columns<'a> {
    batch: &'a RecordBatch,
    path: &'a Path,
}

impl<'a> Columns<'a> {
    fn get<A: Array + 'static>(&self, name: &str) -> &'a A {
        let column = self.batch.column_by_name(name).unwrap_or_else(|| {
            panic!(
                "{} has no column `{name}`: {:?}",
                self.path.display(),
                self.batch.schema()
            )
        });
        column.as_any().downcast_ref::<A>().unwrap_or_else(|| {
            panic!(
                "column `{name}` of {} is {}, not {}",
                self.path.display(),
                column.data_type(),
                std::any::type_name::<A>()
            )
        })
    }

    /// A time column as exact nanoseconds since the epoch: its `<name>_ns` twin (Int64), beside
    /// the timestamp itself, which the schema says is in microseconds with the UTC zone in the
    /// type (schema version 3: what DuckDB, pandas, polars and Spark read natively).
    fn time(&self, name: &str) -> &'a Int64Array {
        let column = self.get::<TimestampMicrosecondArray>(name);
        assert_eq!(
            column.timezone(),
            Some("UTC"),
            "column `{name}` of {} should be a timestamp in UTC",
            self.path.display()
        );
        let exact = self.get::<Int64Array>(&format!("{name}_ns"));
        assert!(
            (0..column.len()).all(|i| column.is_valid(i) == exact.is_valid(i)
                && (column.is_null(i) || column.value(i) == exact.value(i).div_euclid(1_000))),
            "column `{name}` of {} should be its `{name}_ns` twin in microseconds",
            self.path.display()
        );
        exact
    }
}

fn opt<T: arrow_array::ArrowPrimitiveType>(
    array: &arrow_array::PrimitiveArray<T>,
    i: usize,
) -> Option<T::Native> {
    array.is_valid(i).then(|| array.value(i))
}

fn opt_str(array: &StringArray, i: usize) -> Option<String> {
    array.is_valid(i).then(|| array.value(i).to_string())
}

fn opt_list(array: &ListArray, i: usize) -> Option<Vec<String>> {
    array.is_valid(i).then(|| {
        let items = array.value(i);
        let items = items
            .as_any()
            .downcast_ref::<StringArray>()
            .expect("argv items should be Utf8");
        (0..items.len())
            .map(|j| items.value(j).to_string())
            .collect()
    })
}

/// A C program compiled for one test (its directory is removed when the value is dropped).
pub struct CProgram {
    pub path: PathBuf,
    _dir: TempDir,
}

impl CProgram {
    /// The path as a `&str`, for a command line.
    pub fn as_str(&self) -> &str {
        self.path.to_str().expect("temporary paths are UTF-8")
    }
}

/// Compiles `source` with the system's `cc` (without optimisation, so busy loops and memsets
/// stay as written; `-pthread` always).
pub fn compile_c(name: &str, source: &str) -> CProgram {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let src = dir.path().join(format!("{name}.c"));
    let path = dir.path().join(name);
    std::fs::write(&src, source).expect("writing C source");
    let output = Command::new("cc")
        .args(["-O0", "-Wall", "-Werror", "-pthread", "-o"])
        .arg(&path)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run cc (is a C compiler installed?): {e}"));
    assert!(
        output.status.success(),
        "cc failed on {name}.c:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    CProgram { path, _dir: dir }
}

/// Parses the `n`th line of a workload's stdout as a number.
pub fn stdout_number(run: &Run, n: usize) -> u64 {
    let line = run
        .stdout
        .lines()
        .nth(n)
        .unwrap_or_else(|| panic!("the workload printed fewer than {} lines: {run:?}", n + 1));
    line.trim()
        .parse()
        .unwrap_or_else(|e| panic!("line {} of stdout, `{line}`, is not a number: {e}", n + 1))
}

/// Panics unless `actual` is within 2% (or 20 ms, whichever is larger) of `expected`.
///
/// Not a timing assertion: both are the kernel's accounting of the same CPU time (montrace's
/// exit figures and the workload's getrusage), which time spent waiting for a CPU does not
/// change; the tolerance covers when each was taken (an exit event before the final switch).
pub fn assert_cpu_close(what: &str, actual_ns: u64, expected_ns: u64) {
    let tolerance = (expected_ns / 50).max(20 * MS);
    assert!(
        actual_ns.abs_diff(expected_ns) <= tolerance,
        "{what}: montrace says {:.3} ms, the kernel's rusage says {:.3} ms (off by {:.3} ms, \
         tolerance {:.3} ms)",
        actual_ns as f64 / 1e6,
        expected_ns as f64 / 1e6,
        actual_ns.abs_diff(expected_ns) as f64 / 1e6,
        tolerance as f64 / 1e6
    );
}

/// Waits (at most 10 s) until `path` exists: a workload's sign that it has started. A bound for
/// a workload that never starts, not a speed: starting one takes milliseconds.
pub fn wait_for_file(path: &Path) {
    let started = Instant::now();
    while !path.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{} did not appear within 10 s",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Kills (SIGKILL) the processes a run left running, so that a test does not leak them.
pub fn kill_leftovers(rows: &[Proc]) {
    for row in rows.iter().filter(|p| p.alive_at_end) {
        // SAFETY: plain syscall; ESRCH for a process that already ended is fine.
        unsafe { libc::kill(row.pid as libc::pid_t, libc::SIGKILL) };
    }
}

/// Runs `python3 -c SCRIPT ARGS...` with extra environment variables (at most [`TIMEOUT`]) and
/// returns its stdout; panics with its stderr when it fails. `what` names the step in messages.
pub fn python(what: &str, script: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    python_within(run_timeout(), what, script, args, env)
}

/// [`python`] bounded by `timeout` rather than [`run_timeout`]: for a script that starts a JVM
/// (PySpark), whose start and stages took over 60 s on a 2-core machine at a load average of 6
/// (25 s when idle). Still a bound for a hung script, not a timing claim.
pub fn python_within(
    timeout: Duration,
    what: &str,
    script: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> String {
    let mut command = Command::new("python3");
    command
        .arg("-c")
        .arg(script)
        .args(args)
        .envs(env.iter().copied());
    let finished = run_with_timeout(&mut command, timeout);
    assert!(
        finished.status.success(),
        "{what}: python3 failed (the Python packages come with `cargo xtask setup`): {finished:?}"
    );
    finished.stdout
}

/// Runs each query with DuckDB (Python) in a fresh in-memory database. Timestamp columns come
/// back as ns since the epoch (`epoch_ns`), so that no time-zone package is needed.
const DUCKDB_QUERIES: &str = r#"
import decimal, json, sys
import duckdb

def quoted(name):
    return '"' + name.replace('"', '""') + '"'

results = []
for sql in sys.argv[1:]:
    try:
        rel = duckdb.connect().sql(sql)
        if rel is None:
            results.append({"columns": [], "types": [], "rows": []})
            continue
        types = [str(t) for t in rel.types]
        exprs = [
            f"epoch_ns({quoted(c)}) AS {quoted(c)}" if t.startswith("TIMESTAMP") else quoted(c)
            for c, t in zip(rel.columns, types)
        ]
        rows = rel.project(", ".join(exprs)).fetchall() if exprs else []
        results.append({"columns": rel.columns, "types": types, "rows": rows})
    except Exception as e:
        results.append({"error": f"{type(e).__name__}: {e}"})
json.dump(results, sys.stdout,
          default=lambda v: float(v) if isinstance(v, decimal.Decimal) else str(v))
"#;

/// What DuckDB answered to one query.
#[derive(Clone, Debug)]
pub struct QueryResult {
    pub sql: String,
    pub columns: Vec<String>,
    /// DuckDB's type of each column, as it names them (`BIGINT`, `TIMESTAMP WITH TIME ZONE`...).
    pub types: Vec<String>,
    pub rows: Vec<Vec<serde_json::Value>>,
}

impl QueryResult {
    /// Index of the column `name`; panics when the query has no such column.
    pub fn column(&self, name: &str) -> usize {
        self.columns
            .iter()
            .position(|c| c == name)
            .unwrap_or_else(|| panic!("no column `{name}` in {:?} of\n{}", self.columns, self.sql))
    }

    /// The value in `row` of column `name`.
    pub fn get(&self, row: usize, name: &str) -> &serde_json::Value {
        &self.rows[row][self.column(name)]
    }

    /// A numeric value (null reads as None); panics on any other type.
    pub fn f64(&self, row: usize, name: &str) -> Option<f64> {
        let value = self.get(row, name);
        if value.is_null() {
            return None;
        }
        Some(value.as_f64().unwrap_or_else(|| {
            panic!("column `{name}` of row {row} is not a number: {value}\n{self:#?}")
        }))
    }

    /// A whole-number value (null reads as None); panics on any other type.
    pub fn u64(&self, row: usize, name: &str) -> Option<u64> {
        let value = self.get(row, name);
        if value.is_null() {
            return None;
        }
        Some(value.as_u64().unwrap_or_else(|| {
            panic!("column `{name}` of row {row} is not a whole number: {value}\n{self:#?}")
        }))
    }

    /// A string value (null reads as None); panics on any other type.
    pub fn str(&self, row: usize, name: &str) -> Option<&str> {
        let value = self.get(row, name);
        if value.is_null() {
            return None;
        }
        Some(value.as_str().unwrap_or_else(|| {
            panic!("column `{name}` of row {row} is not a string: {value}\n{self:#?}")
        }))
    }

    /// All values of column `name`.
    pub fn values(&self, name: &str) -> Vec<&serde_json::Value> {
        let i = self.column(name);
        self.rows.iter().map(|row| &row[i]).collect()
    }
}

/// Runs every query through DuckDB in one Python process: per query, its answer or DuckDB's
/// error message.
pub fn duckdb_queries(queries: &[String]) -> Vec<Result<QueryResult, String>> {
    let args: Vec<&str> = queries.iter().map(String::as_str).collect();
    let out = python("DuckDB queries", DUCKDB_QUERIES, &args, &[]);
    let answers: Vec<serde_json::Value> = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("the DuckDB helper printed no JSON list: {e}\n{out}"));
    assert_eq!(answers.len(), queries.len(), "{out}");
    answers
        .into_iter()
        .zip(queries)
        .map(|(answer, sql)| {
            if let Some(error) = answer.get("error") {
                return Err(error.as_str().unwrap_or_default().to_string());
            }
            let strings = |key: &str| -> Vec<String> {
                answer[key]
                    .as_array()
                    .unwrap_or_else(|| panic!("no `{key}` in {answer}"))
                    .iter()
                    .map(|v| v.as_str().unwrap_or_default().to_string())
                    .collect()
            };
            let rows = answer["rows"]
                .as_array()
                .unwrap_or_else(|| panic!("no `rows` in {answer}"))
                .iter()
                .map(|row| row.as_array().cloned().unwrap_or_default())
                .collect();
            Ok(QueryResult {
                sql: sql.clone(),
                columns: strings("columns"),
                types: strings("types"),
                rows,
            })
        })
        .collect()
}

/// Runs one query through DuckDB; panics with DuckDB's message when it fails.
pub fn duckdb_query(sql: &str) -> QueryResult {
    duckdb_queries(&[sql.to_string()])
        .remove(0)
        .unwrap_or_else(|e| panic!("DuckDB failed on\n{sql}\n{e}"))
}

/// Nanoseconds since the epoch of an RFC 3339 time in UTC as montrace writes them
/// (`2024-05-01T12:00:00.123456Z`).
pub fn rfc3339_ns(text: &str) -> i64 {
    let bad = || -> ! { panic!("`{text}` is not an RFC 3339 UTC time (YYYY-MM-DDTHH:MM:SS[.f]Z)") };
    let body = text.strip_suffix('Z').unwrap_or_else(|| bad());
    let (date, time) = body.split_once('T').unwrap_or_else(|| bad());
    let number = |s: &str| -> i64 { s.parse().unwrap_or_else(|_| bad()) };
    let d: Vec<i64> = date.split('-').map(number).collect();
    let (clock, fraction) = time.split_once('.').unwrap_or((time, ""));
    let t: Vec<i64> = clock.split(':').map(number).collect();
    if d.len() != 3 || t.len() != 3 || fraction.len() > 9 {
        bad();
    }
    // Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
    let (y, m, day) = (d[0] - i64::from(d[1] <= 2), d[1], d[2]);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let nanos = if fraction.is_empty() {
        0
    } else {
        number(fraction) * 10i64.pow(9 - fraction.len() as u32)
    };
    ((days * 24 + t[0]) * 60 + t[1]) * 60_000_000_000 + t[2] * 1_000_000_000 + nanos
}

/// A workload with a known shape for the analysis tests: `sh` marks the phase `holders` begun
/// (`montrace mark`), starts three copies of `holder` at once (each burns 100 ms of CPU, then
/// holds 20 MiB for 500 ms), waits for them, marks the phase ended, then runs `/bin/true` five
/// times: 11 processes in all (sh, 2 montrace mark, 3 holder, 5 true).
pub struct KnownWorkload {
    pub holder: CProgram,
    pub script: String,
}

const HOLDER: &str = r#"
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long long cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(void) {
    while (cpu_ns() < 100000000LL) {}
    size_t size = 20u << 20;
    char *p = malloc(size);
    if (!p) return 1;
    memset(p, 1, size);
    usleep(500000);
    return p[size - 1] == 1 ? 0 : 2;
}
"#;

/// Compiles `holder` and writes the shell script of [`KnownWorkload`].
pub fn known_workload() -> KnownWorkload {
    let holder = compile_c("holder", HOLDER);
    let montrace = montrace_bin();
    let montrace = montrace.to_str().expect("the montrace path is UTF-8");
    let script = format!(
        "set -e; {montrace} mark --begin holders; for i in 1 2 3; do {} & done; wait; \
         {montrace} mark --end holders; for i in 1 2 3 4 5; do /bin/true; done",
        holder.as_str()
    );
    KnownWorkload { holder, script }
}

impl KnownWorkload {
    /// The command line to give montrace.
    pub fn command(&self) -> [&str; 3] {
        ["sh", "-c", &self.script]
    }
}

#[cfg(test)]
mod unit {
    use super::rfc3339_ns;

    #[test]
    fn rfc3339_ns_reads_montraces_times() {
        assert_eq!(rfc3339_ns("1970-01-01T00:00:00Z"), 0);
        assert_eq!(
            rfc3339_ns("2024-05-01T12:00:00.123456Z"),
            1_714_564_800_123_456_000
        );
        assert_eq!(
            rfc3339_ns("2000-02-29T23:59:59.5Z"),
            951_868_799_500_000_000
        );
    }
}

/// A row of `marks.parquet`: a phase mark the command sent. Times are ns since the epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mark {
    pub time: i64,
    pub pid: u32,
    pub start_time: Option<i64>,
    pub label: String,
    /// `point`, `begin` or `end`.
    pub kind: String,
}

impl Run {
    /// The rows of `marks.parquet`, in file order (the order montrace received them).
    pub fn marks(&self) -> Vec<Mark> {
        let path = self.dir.join("marks.parquet");
        let mut rows = Vec::new();
        for batch in read_batches(&path) {
            let c = Columns {
                batch: &batch,
                path: &path,
            };
            let time = c.time("time");
            let pid = c.get::<UInt32Array>("pid");
            let start_time = c.time("start_time");
            let label = c.get::<StringArray>("label");
            let kind = c.get::<StringArray>("kind");
            for i in 0..batch.num_rows() {
                rows.push(Mark {
                    time: time.value(i),
                    pid: pid.value(i),
                    start_time: opt(start_time, i),
                    label: label.value(i).to_string(),
                    kind: kind.value(i).to_string(),
                });
            }
        }
        rows
    }
}

/// The rows of `<dir>/processes.parquet`, in file order.
pub fn read_processes(dir: &Path) -> Vec<Proc> {
    let path = dir.join("processes.parquet");
    let mut rows = Vec::new();
    for batch in read_batches(&path) {
        let c = Columns {
            batch: &batch,
            path: &path,
        };
        let pid = c.get::<UInt32Array>("pid");
        let start_time = c.time("start_time");
        let parent_pid = c.get::<UInt32Array>("parent_pid");
        let parent_start_time = c.time("parent_start_time");
        let end_time = c.time("end_time");
        let filename = c.get::<StringArray>("filename");
        let argv = c.get::<ListArray>("argv");
        let argv_truncated = c.get::<BooleanArray>("argv_truncated");
        let comm = c.get::<StringArray>("comm");
        let exec_count = c.get::<UInt32Array>("exec_count");
        let exit_code = c.get::<Int32Array>("exit_code");
        let exit_signal = c.get::<Int32Array>("exit_signal");
        let core_dumped = c.get::<BooleanArray>("core_dumped");
        let cpu_user_ns = c.get::<UInt64Array>("cpu_user_ns");
        let cpu_system_ns = c.get::<UInt64Array>("cpu_system_ns");
        let peak_rss_bytes = c.get::<UInt64Array>("peak_rss_bytes");
        let minor_faults = c.get::<UInt64Array>("minor_faults");
        let major_faults = c.get::<UInt64Array>("major_faults");
        let voluntary = c.get::<UInt64Array>("voluntary_ctxt_switches");
        let involuntary = c.get::<UInt64Array>("involuntary_ctxt_switches");
        let read_bytes = c.get::<UInt64Array>("read_bytes");
        let write_bytes = c.get::<UInt64Array>("write_bytes");
        let read_chars = c.get::<UInt64Array>("read_chars");
        let run_queue = c.get::<UInt64Array>("run_queue_ns");
        let blocked = c.get::<UInt64Array>("blocked_ns");
        let net: Vec<&UInt64Array> = [
            "net_inet_sent_bytes",
            "net_inet_received_bytes",
            "net_unix_sent_bytes",
            "net_unix_received_bytes",
        ]
        .iter()
        .map(|name| c.get::<UInt64Array>(name))
        .collect();
        let sleep = c.get::<UInt64Array>("sleep_ns");
        let write_chars = c.get::<UInt64Array>("write_chars");
        let alive_at_end = c.get::<BooleanArray>("alive_at_end");
        for i in 0..batch.num_rows() {
            rows.push(Proc {
                pid: pid.value(i),
                start_time: start_time.value(i),
                parent_pid: opt(parent_pid, i),
                parent_start_time: opt(parent_start_time, i),
                end_time: opt(end_time, i),
                filename: opt_str(filename, i),
                argv: opt_list(argv, i),
                argv_truncated: argv_truncated.value(i),
                comm: comm.value(i).to_string(),
                exec_count: exec_count.value(i),
                exit_code: opt(exit_code, i),
                exit_signal: opt(exit_signal, i),
                core_dumped: core_dumped.value(i),
                cpu_user_ns: opt(cpu_user_ns, i),
                cpu_system_ns: opt(cpu_system_ns, i),
                peak_rss_bytes: opt(peak_rss_bytes, i),
                minor_faults: opt(minor_faults, i),
                major_faults: opt(major_faults, i),
                voluntary_ctxt_switches: opt(voluntary, i),
                involuntary_ctxt_switches: opt(involuntary, i),
                read_bytes: opt(read_bytes, i),
                write_bytes: opt(write_bytes, i),
                read_chars: opt(read_chars, i),
                run_queue_ns: opt(run_queue, i),
                blocked_ns: opt(blocked, i),
                net_inet_sent_bytes: opt(net[0], i),
                net_inet_received_bytes: opt(net[1], i),
                net_unix_sent_bytes: opt(net[2], i),
                net_unix_received_bytes: opt(net[3], i),
                sleep_ns: opt(sleep, i),
                write_chars: opt(write_chars, i),
                alive_at_end: alive_at_end.value(i),
            });
        }
    }
    rows
}

/// Now, in ns since the Unix epoch (the clock of the tables' `time` columns).
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_nanos() as i64
}

/// A C project with `files` source files and a Makefile, in `dir`.
pub fn write_c_project(dir: &Path, files: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let mut objs = Vec::new();
    for i in 0..files {
        std::fs::write(
            dir.join(format!("u{i}.c")),
            format!("int f{i}(int x) {{ int s = 0; for (int i = 0; i < x; i++) s += i * {i}; return s; }}\n"),
        )
        .unwrap();
        objs.push(format!("u{i}.o"));
    }
    std::fs::write(
        dir.join("Makefile"),
        format!(
            "OBJS = {objs}\nall: $(OBJS)\n%.o: %.c\n\tcc -O2 -c $< -o $@\nclean:\n\trm -f *.o\n",
            objs = objs.join(" ")
        ),
    )
    .unwrap();
}

/// `git ARGS` in `dir` (a fixed identity, `main` as the first branch); its stdout, trimmed.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
