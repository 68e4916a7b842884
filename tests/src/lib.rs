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
    Array, BooleanArray, Int32Array, ListArray, RecordBatch, StringArray, TimestampNanosecondArray,
    UInt32Array, UInt64Array,
};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use tempfile::TempDir;

/// How long any one montrace run may take before the harness kills it and fails the test.
pub const TIMEOUT: Duration = Duration::from_secs(60);

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
    let mut out = tempfile::tempfile().expect("creating a temporary file for stdout");
    let mut err = tempfile::tempfile().expect("creating a temporary file for stderr");
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone().expect("duplicating the stdout file"))
        .stderr(err.try_clone().expect("duplicating the stderr file"))
        .process_group(0);
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    during(child.id());
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
    require_root();
    let tmp = tempfile::tempdir().expect("creating a temporary directory");
    let dir = tmp.path().join("run");
    let mut command = montrace_command(&dir, args, cmd);
    command.envs(env.iter().copied());
    let command_line = format!(
        "montrace run --out {} {} -- {}",
        dir.display(),
        args.join(" "),
        cmd.join(" ")
    );
    let finished = run_with_timeout_and(&mut command, TIMEOUT, during);
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
        let path = self.dir.join("processes.parquet");
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
                    write_chars: opt(write_chars, i),
                    alive_at_end: alive_at_end.value(i),
                });
            }
        }
        rows
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

    /// `run.json`, parsed.
    pub fn run_json(&self) -> serde_json::Value {
        let path = self.dir.join("run.json");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}\n{self:?}", path.display()));
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not JSON: {e}\n{text}", path.display()))
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

    /// A timestamp column, which the schema says is in ns and UTC.
    fn time(&self, name: &str) -> &'a TimestampNanosecondArray {
        let column = self.get::<TimestampNanosecondArray>(name);
        assert_eq!(
            column.timezone(),
            Some("UTC"),
            "column `{name}` of {} should be a UTC timestamp",
            self.path.display()
        );
        column
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

/// Waits (at most 10 s) until `path` exists: a workload's sign that it has started.
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
