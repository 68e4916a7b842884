//! Issue 27, the outputs and the subcommands besides `run`: each test performs an attack of the
//! hostile trial and checks that nothing outside its target changed.
//!
//! - `export --format perfetto` of a run of a million processes stays within 200 MiB (it once
//!   built the whole trace in memory: 16.5 KB a process).
//! - `report`, `export`, `compare`, `publish` and `bench` of the granted binary hold no
//!   capability; with `--repeat N --otlp` to a silent collector, no thread keeps CapPrm during
//!   the last repetition; an ordinary user's ring buffer is capped.
//! - `publish` refuses a run.json whose start_time would put files outside DEST, and two
//!   publishers of the same runs both succeed; `--warmup 4294967295` is refused; `report` of
//!   samples with an infinite or 1e308 CPU % ends.
use std::{
    collections::{BTreeMap, BTreeSet, HashSet},
    io::BufReader,
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use arrow_array::{
    builder::{ListBuilder, StringBuilder},
    ArrayRef, Float64Array, Int32Array, RecordBatch, StringArray, TimestampNanosecondArray,
    UInt32Array, UInt64Array,
};
use parquet::arrow::{arrow_reader::ParquetRecordBatchReaderBuilder, ArrowWriter};
use tests::{montrace_bin, read_json, require_root, run_with_timeout, users::TestUser, TIMEOUT};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/run-small")
}

/// A copy of the fixture run at `dst` (created).
fn fixture_copy(dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for entry in std::fs::read_dir(fixture()).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dst.join(entry.file_name())).unwrap();
    }
}

/// Every path under `dir` (relative), recursively, without following links.
fn tree(dir: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            out.insert(path.strip_prefix(dir).unwrap().to_path_buf());
            if std::fs::symlink_metadata(&path).unwrap().is_dir() {
                stack.push(path);
            }
        }
    }
    out
}

fn parquet_rows(path: &Path) -> i64 {
    let file = std::fs::File::open(path).unwrap();
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
    builder.metadata().file_metadata().num_rows()
}

fn write_parquet(path: &Path, batches: impl IntoIterator<Item = RecordBatch>) {
    let mut batches = batches.into_iter().peekable();
    let schema = batches.peek().unwrap().schema();
    let file = std::fs::File::create(path).unwrap();
    let mut writer = ArrowWriter::try_new(file, schema, None).unwrap();
    for batch in batches {
        writer.write(&batch).unwrap();
    }
    writer.close().unwrap();
}

/// A root-owned copy of montrace (mode 0755) under /tmp, granted with its own `setcap` (as in
/// capabilities.rs).
struct CapableCopy {
    dir: PathBuf,
    bin: PathBuf,
}

impl CapableCopy {
    fn new() -> CapableCopy {
        require_root();
        let dir = PathBuf::from(format!("/tmp/montrace-hostile-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let bin = dir.join("montrace");
        let installed = Command::new("install")
            .args(["-o", "root", "-g", "root", "-m", "0755"])
            .arg(montrace_bin())
            .arg(&bin)
            .status()
            .unwrap();
        assert!(installed.success());
        let grant = run_with_timeout(
            Command::new(&bin).arg("setcap").arg(&bin),
            Duration::from_secs(20),
        );
        assert_eq!(grant.code(), 0, "montrace setcap: {grant:?}");
        CapableCopy { dir, bin }
    }
}

impl Drop for CapableCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `CapPrm` and `CapEff` of every thread of `pid`, as (tid, comm, permitted, effective).
fn thread_caps(pid: u32) -> Vec<(String, String, u64, u64)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = entry.unwrap().path();
        let Ok(status) = std::fs::read_to_string(task.join("status")) else {
            continue;
        };
        let field = |name: &str| {
            let line = status.lines().find(|l| l.starts_with(name)).unwrap();
            u64::from_str_radix(line[name.len()..].trim(), 16).unwrap()
        };
        let comm = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
        out.push((
            task.file_name().unwrap().to_string_lossy().into_owned(),
            comm.trim().to_string(),
            field("CapPrm:"),
            field("CapEff:"),
        ));
    }
    out
}

/// Kills `child` and everything in its process group, and reaps it.
fn kill_group(child: &mut Child) {
    // SAFETY: a signal to the group this test made for its own child.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    let _ = child.wait();
}

/// `montrace report`, `export`, `compare`, `publish` and `bench` of the granted binary, run by an
/// ordinary user, let their capabilities go before they read anything. Each is held where it
/// first reads the run (a FIFO in place of a Parquet part: the open waits for a writer), or,
/// for `publish`, on a bucket that never answers, or, for `bench`, while its first repetition
/// runs; every thread's CapPrm and CapEff are then read.
#[test]
fn subcommands_that_load_nothing_hold_no_capability() {
    let copy = CapableCopy::new();
    let user = TestUser::create("hcap");
    let home = &user.home;
    // A run whose samples are a FIFO part (report, export).
    let held = home.join("held");
    std::fs::create_dir(&held).unwrap();
    std::fs::copy(
        fixture().join("processes.parquet"),
        held.join("processes.parquet"),
    )
    .unwrap();
    std::fs::create_dir(held.join("samples.parts")).unwrap();
    let fifo = |path: &Path| {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(
            unsafe { libc::mkfifo(c.as_ptr(), 0o644) },
            0,
            "{}",
            path.display()
        );
    };
    fifo(&held.join("samples.parts/samples-000000.parquet"));
    // A fleet's dataset whose runs table is a FIFO (compare --baseline), and a candidate run.
    let dataset = home.join("dataset/runs/date=2026-11-24/host=h/run_id=r");
    std::fs::create_dir_all(&dataset).unwrap();
    fifo(&dataset.join("part-0.parquet"));
    let candidate = home.join("candidate");
    fixture_copy(&candidate);
    Command::new("chown")
        .arg("-R")
        .arg(format!("{}:{}", user.uid, user.gid))
        .arg(home)
        .status()
        .unwrap();
    let cases: Vec<(&str, Vec<String>)> = vec![
        ("report", vec!["report".into(), held.display().to_string()]),
        (
            "export",
            vec![
                "export".into(),
                held.display().to_string(),
                "--format".into(),
                "perfetto".into(),
            ],
        ),
        (
            "compare",
            vec![
                "compare".into(),
                "--baseline".into(),
                home.join("dataset").display().to_string(),
                candidate.display().to_string(),
            ],
        ),
        (
            "publish",
            vec![
                "publish".into(),
                candidate.display().to_string(),
                "s3://bucket/dataset".into(),
            ],
        ),
        (
            "bench",
            vec![
                "bench".into(),
                "-a".into(),
                "sleep 3".into(),
                "-b".into(),
                "sleep 3".into(),
                "--repeat".into(),
                "2".into(),
                "--warmup".into(),
                "0".into(),
                "-o".into(),
                home.join("bench").display().to_string(),
            ],
        ),
    ];
    // publish reads only regular files (a FIFO is refused): it is held on a bucket's server
    // that accepts the connection and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    for (what, args) in cases {
        let mut cmd = user.command(&copy.bin);
        cmd.current_dir(home)
            .args(&args)
            .env("AWS_ENDPOINT", &endpoint)
            .env("AWS_ALLOW_HTTP", "true")
            .env("AWS_ACCESS_KEY_ID", "held")
            .env("AWS_SECRET_ACCESS_KEY", "held")
            .env("AWS_REGION", "us-east-1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        let mut child = cmd.spawn().unwrap();
        let pid = child.id();
        // Held in its open of a FIFO for good (bench: in its first repetition, 3 s; publish: on
        // a server that never answers). Looked at after 1.5 s, when an idle machine has long
        // started it; a busy one may still be starting the debug binary then (paged in from a
        // busy disk, no thread past the drop of its capabilities yet), so the look is repeated
        // until every thread holds none, for 20 s at most: a thread that keeps one still fails.
        std::thread::sleep(Duration::from_millis(1500));
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut threads = Vec::new();
        loop {
            let alive = child.try_wait().unwrap().is_none();
            if alive {
                let now = thread_caps(pid);
                if !now.is_empty() {
                    threads = now;
                }
            }
            let clean = !threads.is_empty() && threads.iter().all(|t| (t.2, t.3) == (0, 0));
            if !alive || clean || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        kill_group(&mut child);
        assert!(
            !threads.is_empty(),
            "montrace {what} ended before it could be looked at"
        );
        for (tid, comm, permitted, effective) in &threads {
            assert_eq!(
                (*permitted, *effective),
                (0, 0),
                "montrace {what}: thread {tid} ({comm}) holds CapPrm {permitted:x} CapEff \
                 {effective:x}"
            );
        }
    }
}

/// `--repeat 3 --otlp` to a collector that takes connections and never answers: the exporter
/// threads of the first two repetitions are still waiting on it during the third, and hold no
/// capability (they were started while montrace kept its permitted set for the next load).
#[test]
fn otlp_threads_of_earlier_repetitions_hold_no_capability() {
    let copy = CapableCopy::new();
    let user = TestUser::create("hotlp");
    // Connections complete in the kernel's backlog; nothing is ever read or answered.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let out = user.home.join("run");
    // Each repetition prints, for every thread of montrace (its parent), its name and CapPrm.
    let script = "echo rep; for t in /proc/$PPID/task/*; do \
                  echo \"thread $(cat $t/comm) $(grep ^CapPrm $t/status | cut -f2)\"; done; \
                  sleep 0.5";
    let mut cmd = user.command(&copy.bin);
    cmd.current_dir(&user.home)
        .args(["run", "--repeat", "3", "--no-report", "-q", "-i", "50ms"])
        .args(["--otlp", &url, "--out"])
        .arg(&out)
        .args(["--", "sh", "-c", script]);
    let run = run_with_timeout(&mut cmd, TIMEOUT);
    assert_eq!(run.code(), 0, "{run:?}");
    let last = run.stdout.rsplit("rep\n").next().unwrap();
    let threads: Vec<(&str, u64)> = last
        .lines()
        .filter_map(|l| l.strip_prefix("thread "))
        // (A thread that ended between the listing and the read has no mask.)
        .filter_map(|l| {
            let (name, mask) = l.rsplit_once(' ')?;
            Some((name, u64::from_str_radix(mask, 16).ok()?))
        })
        .collect();
    let otlp = threads.iter().filter(|(name, _)| *name == "otlp").count();
    // Guarantee: each queued request waits its whole 2 s timeout on a collector that never
    // answers (a timer never fires early), and an exporter works through its whole queue after
    // its repetition: a repetition's dozen or so requests keep its thread ~20 s, and the third
    // repetition starts about two repetitions (0.5 s and at most 2 s for the queue each) later.
    assert!(
        otlp >= 2,
        "the earlier repetitions' exporters are gone already: nothing tested: {run:?}"
    );
    for (name, mask) in &threads {
        assert_eq!(
            *mask, 0,
            "thread {name} holds CapPrm {mask:x} in the last repetition"
        );
    }
    drop(silent);
}

/// An ordinary user asking the granted binary for a 128 MiB ring buffer (kernel memory, locked
/// for the run) is refused before anything starts.
#[test]
fn an_ordinary_users_ring_buffer_is_capped() {
    let copy = CapableCopy::new();
    let user = TestUser::create("hring");
    let out = user.home.join("run");
    let marker = user.home.join("ran");
    let mut cmd = user.command(&copy.bin);
    cmd.current_dir(&user.home)
        .args(["run", "--ring-buffer-size", "128MiB", "--out"])
        .arg(&out)
        .arg("--")
        .arg("touch")
        .arg(&marker);
    let run = run_with_timeout(&mut cmd, TIMEOUT);
    assert_eq!(run.code(), 2, "{run:?}");
    assert!(run.stderr.contains("at most 64 MiB"), "{run:?}");
    assert!(!out.exists() && !marker.exists(), "{run:?}");
}

/// run.json's start_time of `/../../../` made the date partition climb out of DEST (the
/// trial's files landed in DEST's parent, exit 0). Now the run is refused and nothing is written
/// anywhere.
#[test]
fn publish_refuses_a_start_time_that_climbs_out_of_dest() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("runs/hostile");
    fixture_copy(&run);
    let mut info = read_json(&run.join("run.json")).unwrap();
    info["start_time"] = "/../../../".into();
    std::fs::write(run.join("run.json"), info.to_string()).unwrap();
    let dest = tmp.path().join("a/b/dest");
    std::fs::create_dir_all(&dest).unwrap();
    let before = tree(tmp.path());
    let out = run_with_timeout(
        Command::new(montrace_bin())
            .arg("publish")
            .arg(&run)
            .arg(&dest),
        TIMEOUT,
    );
    assert_eq!(out.code(), 1, "{out:?}");
    assert!(out.stderr.contains("YYYY-MM-DD"), "{out:?}");
    assert_eq!(tree(tmp.path()), before, "publish wrote something: {out:?}");
}

/// Two publishers of the same ten runs into one directory at once: both succeed (each file is
/// renamed into place from a temporary name of its own), every file is whole, and no temporary
/// file is left.
#[test]
fn two_publishers_of_the_same_runs_both_succeed() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let mut runs = Vec::new();
    for k in 0..10 {
        let run = tmp.path().join(format!("runs/r{k}"));
        fixture_copy(&run);
        let mut info = read_json(&run.join("run.json")).unwrap();
        info["run_id"] = format!("race-{k}").into();
        std::fs::write(run.join("run.json"), info.to_string()).unwrap();
        runs.push(run);
    }
    let dest = tmp.path().join("dataset");
    let publisher = || {
        Command::new(montrace_bin())
            .arg("publish")
            .args(&runs)
            .arg(&dest)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (publisher(), publisher());
    for child in [a, b] {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "a publisher failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let files = tree(&dest);
    assert!(
        files
            .iter()
            .all(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.')),
        "temporary files left: {files:?}"
    );
    for k in 0..10 {
        for table in ["processes", "samples", "events", "system", "runs"] {
            let dir: Vec<&PathBuf> = files
                .iter()
                .filter(|p| {
                    let text = p.to_string_lossy();
                    text.starts_with(&format!("{table}/"))
                        && text.contains(&format!("run_id=race-{k}/"))
                        && text.ends_with(".parquet")
                })
                .collect();
            assert_eq!(dir.len(), 1, "{table} of race-{k}: {files:?}");
            let rows = parquet_rows(&dest.join(dir[0]));
            if table == "runs" {
                assert_eq!(rows, 1);
            } else {
                assert_eq!(
                    rows,
                    parquet_rows(&fixture().join(format!("{table}.parquet")))
                );
            }
        }
    }
}

/// `--warmup 4294967295 --repeat 2` once wrapped around u32 (the command never ran, exit 0).
#[test]
fn a_warmup_count_that_would_overflow_is_refused() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let marker = tmp.path().join("ran");
    let run = run_with_timeout(
        Command::new(montrace_bin())
            .args(["run", "--repeat", "2", "--warmup", "4294967295", "--out"])
            .arg(&out)
            .arg("--")
            .arg("touch")
            .arg(&marker),
        TIMEOUT,
    );
    assert_eq!(run.code(), 2, "{run:?}");
    assert!(run.stderr.contains("--warmup 4294967295"), "{run:?}");
    assert!(!out.exists() && !marker.exists(), "{run:?}");
}

/// The fixture run with every sample's cpu_percent replaced by inf, NaN, 1e308 or -1e308 in turn
/// and the machine's idle CPU at -1e308 (a busy share of 1e308): `report` once looped forever in
/// plotters's axis ticks. It ends, says what it left out, and the export of the same run reads.
#[test]
fn report_of_infinite_cpu_percentages_ends_and_says_so() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    fixture_copy(&run);
    let absurd = [f64::INFINITY, f64::NAN, 1e308, -1e308];
    for (table, column) in [("samples", "cpu_percent"), ("system", "cpu_idle_percent")] {
        let path = run.join(format!("{table}.parquet"));
        let file = std::fs::File::open(&path).unwrap();
        let batches: Vec<RecordBatch> = ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let crafted = batches.into_iter().map(|batch| {
            let at = batch.schema().index_of(column).unwrap();
            let n = batch.num_rows();
            let values: Vec<f64> = (0..n)
                .map(|i| {
                    if table == "system" {
                        -1e308
                    } else {
                        absurd[i % 4]
                    }
                })
                .collect();
            let mut columns = batch.columns().to_vec();
            columns[at] = Arc::new(Float64Array::from(values)) as ArrayRef;
            RecordBatch::try_new(batch.schema(), columns).unwrap()
        });
        write_parquet(&path, crafted.collect::<Vec<_>>());
    }
    let started = Instant::now();
    let report = run_with_timeout(
        Command::new(montrace_bin())
            .arg("report")
            .arg(&run)
            .args(["--format", "md"]),
        TIMEOUT,
    );
    assert_eq!(report.code(), 0, "{report:?}");
    // Not a timing claim: the bound is the harness's for a hung command (the report once
    // looped forever on these values), not a speed.
    assert!(started.elapsed() < TIMEOUT);
    let md = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert!(
        md.contains("were not numbers or beyond any machine"),
        "{md}"
    );
    let trace = tmp.path().join("trace.json");
    let export = run_with_timeout(
        Command::new(montrace_bin())
            .arg("export")
            .arg(&run)
            .args(["--format", "perfetto", "--out"])
            .arg(&trace),
        TIMEOUT,
    );
    assert_eq!(export.code(), 0, "{export:?}");
    let json = read_json(&trace).unwrap();
    let cpu: Vec<&serde_json::Value> = json["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "cpu")
        .collect();
    assert!(
        cpu.iter().all(|e| e["args"]["percent"].is_number()),
        "{cpu:?}"
    );
}

/// The processes and samples of a run of `n` processes (pids 1000.., a root, 1000 shells under
/// it and the rest under the shells), each with an exit sample, and `sweeps` sweeps of 10 live
/// processes; written as montrace's schema has them.
fn synthetic_run(dir: &Path, n: usize, sweeps: usize) {
    const T0: i64 = 1_714_564_800_000_000_000;
    std::fs::create_dir_all(dir).unwrap();
    let ts =
        |v: Vec<i64>| Arc::new(TimestampNanosecondArray::from(v).with_timezone("UTC")) as ArrayRef;
    let opt_ts = |v: Vec<Option<i64>>| {
        Arc::new(TimestampNanosecondArray::from(v).with_timezone("UTC")) as ArrayRef
    };
    let shells = 1000.min(n.saturating_sub(1));
    let parent = |i: usize| -> Option<usize> {
        match i {
            0 => None,
            i if i <= shells => Some(0),
            i => Some(1 + i % shells),
        }
    };
    let start = |i: usize| T0 + i as i64 * 1_000;
    let end = |i: usize| {
        if i == 0 {
            T0 + n as i64 * 1_000 + 1_000_000
        } else {
            start(i) + 1_000_000
        }
    };
    let exe = |i: usize| match i {
        0 => "make",
        i if i <= shells => "sh",
        _ => "cc1",
    };
    let chunk = 100_000;
    let processes = (0..n).step_by(chunk).map(|lo| {
        let rows: Vec<usize> = (lo..(lo + chunk).min(n)).collect();
        let mut argv = ListBuilder::new(StringBuilder::new());
        for &i in &rows {
            argv.values().append_value(exe(i));
            argv.values().append_value(format!("job-{i}.c"));
            argv.append(true);
        }
        let columns: Vec<(&str, ArrayRef)> = vec![
            (
                "pid",
                Arc::new(UInt32Array::from_iter_values(
                    rows.iter().map(|&i| 1000 + i as u32),
                )),
            ),
            ("start_time", ts(rows.iter().map(|&i| start(i)).collect())),
            (
                "parent_pid",
                Arc::new(UInt32Array::from(
                    rows.iter()
                        .map(|&i| parent(i).map(|p| 1000 + p as u32))
                        .collect::<Vec<_>>(),
                )),
            ),
            (
                "parent_start_time",
                opt_ts(rows.iter().map(|&i| parent(i).map(start)).collect()),
            ),
            (
                "end_time",
                opt_ts(rows.iter().map(|&i| Some(end(i))).collect()),
            ),
            (
                "filename",
                Arc::new(StringArray::from_iter_values(
                    rows.iter().map(|&i| format!("/usr/bin/{}", exe(i))),
                )),
            ),
            ("argv", Arc::new(argv.finish())),
            (
                "comm",
                Arc::new(StringArray::from_iter_values(rows.iter().map(|&i| exe(i)))),
            ),
            (
                "exit_code",
                Arc::new(Int32Array::from_iter_values(rows.iter().map(|_| 0))),
            ),
            (
                "cpu_user_ns",
                Arc::new(UInt64Array::from_iter_values(rows.iter().map(|_| 900_000))),
            ),
            (
                "cpu_system_ns",
                Arc::new(UInt64Array::from_iter_values(rows.iter().map(|_| 100_000))),
            ),
            (
                "peak_rss_bytes",
                Arc::new(UInt64Array::from_iter_values(
                    rows.iter().map(|&i| (i as u64 % 64 + 1) << 20),
                )),
            ),
        ];
        RecordBatch::try_from_iter(columns).unwrap()
    });
    write_parquet(&dir.join("processes.parquet"), processes);
    // Exit rows, then the sweeps: (time, process, source, cpu %).
    let mut rows: Vec<(i64, usize, &str, Option<f64>)> =
        (0..n).map(|i| (end(i), i, "exit", None)).collect();
    for k in 0..sweeps {
        let t = T0 + k as i64 * 1_000_000;
        for j in 0..10.min(n) {
            rows.push((t, j, "procfs", Some(50.0 + j as f64)));
        }
    }
    let samples = rows.chunks(chunk).map(|rows| {
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("time", ts(rows.iter().map(|r| r.0).collect())),
            (
                "pid",
                Arc::new(UInt32Array::from_iter_values(
                    rows.iter().map(|r| 1000 + r.1 as u32),
                )),
            ),
            ("start_time", ts(rows.iter().map(|r| start(r.1)).collect())),
            (
                "source",
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.2))),
            ),
            (
                "cpu_percent",
                Arc::new(Float64Array::from(
                    rows.iter().map(|r| r.3).collect::<Vec<_>>(),
                )),
            ),
            (
                "rss_bytes",
                Arc::new(UInt64Array::from_iter_values(
                    rows.iter().map(|r| (r.1 as u64 % 64 + 1) << 20),
                )),
            ),
        ];
        RecordBatch::try_from_iter(columns).unwrap()
    });
    write_parquet(&dir.join("samples.parquet"), samples.collect::<Vec<_>>());
}

/// What a trace holds, counted as it is parsed (a million processes' trace is about a GB of
/// JSON: it is never held whole).
#[derive(Default)]
struct Counts {
    /// Events by (ph, name) (`name` only for metadata and counters).
    by_kind: BTreeMap<(String, String), u64>,
    /// Distinct tracks of the "X" slices.
    slice_tracks: HashSet<u64>,
}

struct CountingVisitor<'a>(&'a mut Counts);

impl<'de> serde::de::Visitor<'de> for CountingVisitor<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("the traceEvents array")
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        #[derive(serde::Deserialize)]
        struct Event {
            ph: String,
            name: String,
            pid: u64,
        }
        while let Some(e) = seq.next_element::<Event>()? {
            if e.ph == "X" {
                self.0.slice_tracks.insert(e.pid);
            }
            let name = if matches!(e.ph.as_str(), "M" | "C") {
                e.name
            } else {
                String::new()
            };
            *self.0.by_kind.entry((e.ph, name)).or_default() += 1;
        }
        Ok(())
    }
}

fn count_trace(path: &Path) -> Counts {
    use serde::de::{Deserializer as _, MapAccess, Visitor};
    struct Top;
    impl<'de> Visitor<'de> for Top {
        type Value = Counts;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a trace object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Counts, A::Error> {
            struct Events<'a>(&'a mut Counts);
            impl<'de> serde::de::DeserializeSeed<'de> for Events<'_> {
                type Value = ();
                fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
                    d.deserialize_seq(CountingVisitor(self.0))
                }
            }
            let mut counts = Counts::default();
            let mut seen_events = false;
            while let Some(key) = map.next_key::<String>()? {
                if key == "traceEvents" {
                    map.next_value_seed(Events(&mut counts))?;
                    seen_events = true;
                } else {
                    map.next_value::<serde_json::Value>()?;
                }
            }
            assert!(seen_events, "no traceEvents");
            Ok(counts)
        }
    }
    let file = std::fs::File::open(path).unwrap();
    let mut de = serde_json::Deserializer::from_reader(BufReader::with_capacity(1 << 20, file));
    let counts = de.deserialize_map(Top).expect("the trace is JSON");
    de.end().expect("nothing after the trace");
    counts
}

/// The trial's attack on memory: a run of a million processes (14 MB of Parquet) took 16.5 GB to
/// export (16.5 KB a process). Exported now within 200 MiB of peak RSS (the child's own, from
/// wait4), and the trace holds every process and counter. The suite exports 200,000 processes
/// (3.3 GB the old way; a debug build takes minutes for a million on 2 cores):
/// `MONTRACE_TEST_PERFETTO_PROCESSES=1000000` runs the trial's million (129 MiB measured).
#[test]
// The child is reaped by wait4 (for its own rusage), which clippy does not see.
#[allow(clippy::zombie_processes)]
fn perfetto_export_of_many_processes_stays_within_200_mib() {
    require_root();
    let n_processes: usize = std::env::var("MONTRACE_TEST_PERFETTO_PROCESSES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    #[allow(non_snake_case)]
    let N = n_processes;
    const SWEEPS: usize = 1_000;
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    synthetic_run(&run, N, SWEEPS);
    let trace = tmp.path().join("trace.json");
    let started = Instant::now();
    let child = Command::new(montrace_bin())
        .arg("export")
        .arg(&run)
        .args(["--format", "perfetto", "--out"])
        .arg(&trace)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for this test's own child; status and usage are valid for writes.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid);
    let elapsed = started.elapsed();
    let peak_mib = usage.ru_maxrss as f64 / 1024.0;
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.unwrap(), &mut stderr).unwrap();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "export failed ({status:#x}): {stderr}"
    );
    eprintln!(
        "perfetto export of {N} processes: {:.1} s, peak RSS {peak_mib:.1} MiB, {} MB of JSON",
        elapsed.as_secs_f64(),
        std::fs::metadata(&trace).unwrap().len() / 1_000_000
    );
    assert!(peak_mib < 200.0, "peak RSS {peak_mib:.1} MiB");
    let counts = count_trace(&trace);
    let count = |ph: &str, name: &str| {
        counts
            .by_kind
            .get(&(ph.to_string(), name.to_string()))
            .copied()
            .unwrap_or(0)
    };
    let n = N as u64;
    assert_eq!(count("X", ""), n);
    assert_eq!(counts.slice_tracks.len(), N, "one track per process");
    assert_eq!(count("M", "process_name"), n + 1, "and the machine's");
    assert_eq!(count("M", "process_sort_index"), n + 1);
    assert_eq!(count("M", "process_labels"), n);
    assert_eq!(count("M", "thread_name"), n);
    assert_eq!(
        count("C", "memory"),
        n + 10 * SWEEPS as u64,
        "exits and sweeps"
    );
    assert_eq!(count("C", "cpu"), 10 * SWEEPS as u64);
    assert_eq!(count("C", "tree memory"), SWEEPS as u64);
}
