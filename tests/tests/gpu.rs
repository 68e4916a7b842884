//! The GPU path end to end, through the NVML driver double (tests/nvml-double): the real
//! binary loads the double as libnvidia-ml.so.1 through the real `nvml.rs` backend, and the
//! tests read back the real gpu.parquet, gpu_processes.parquet and run.json. The double answers
//! from a JSON script the test writes (and rewrites while a run goes); the workload,
//! `xtask/gpu-check/workload.py --backend nvml-double`, puts each of its processes in the
//! double's process list with (MiB + 500) MiB, as a CUDA context would, and takes it out at
//! exit.
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tempfile::TempDir;
use tests::{duckdb_query, launch_montrace, run_with_timeout, wait_for_file, Run, MIB};

const UUID0: &str = "GPU-d0b1e5a7-0000-4000-8000-000000000000";
const UUID1: &str = "GPU-d0b1e5a7-0000-4000-8000-000000000001";
const BASE_USED: u64 = 600 * MIB;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn workload() -> String {
    workspace()
        .join("xtask/gpu-check/workload.py")
        .to_string_lossy()
        .into_owned()
}

/// The double's library, compiled once per test binary: `<dir>/libnvidia-ml.so.1`, and the
/// one of an older driver (without the _v3 process lists and the v2 memory query).
fn library(old: bool) -> &'static Path {
    static BUILT: OnceLock<(TempDir, PathBuf, PathBuf)> = OnceLock::new();
    let (_, new, older) = BUILT.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a directory for the NVML double");
        let source = workspace().join("tests/nvml-double/nvml_double.c");
        let mut dirs = Vec::new();
        for (name, flags) in [("new", &[][..]), ("old", &["-DNVML_DOUBLE_OLD_DRIVER"][..])] {
            let out = dir.path().join(name);
            std::fs::create_dir_all(&out).unwrap();
            let built = Command::new("cc")
                .args([
                    "-std=gnu11",
                    "-O1",
                    "-Wall",
                    "-Wextra",
                    "-Werror",
                    "-shared",
                    "-fPIC",
                ])
                .args(flags)
                .arg("-o")
                .arg(out.join("libnvidia-ml.so.1"))
                .arg(&source)
                .arg("-lpthread")
                .output()
                .unwrap_or_else(|e| panic!("cannot run cc (cargo xtask setup installs it): {e}"));
            assert!(
                built.status.success(),
                "cc failed on the NVML double:\n{}",
                String::from_utf8_lossy(&built.stderr)
            );
            dirs.push(out);
        }
        let older = dirs.pop().unwrap();
        let new = dirs.pop().unwrap();
        (dir, new, older)
    });
    if old {
        older
    } else {
        new
    }
}

/// One test's driver: its script and its library.
struct Double {
    dir: TempDir,
    lib: &'static Path,
}

impl Double {
    fn new(script: Value) -> Double {
        Double::with_library(script, false)
    }

    fn with_library(script: Value, old: bool) -> Double {
        let double = Double {
            dir: tempfile::tempdir().expect("a directory for the double's script"),
            lib: library(old),
        };
        double.edit(|s| *s = script);
        double
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("nvml.json")
    }

    /// The script, changed by `change` under the lock the workload takes too, then renamed
    /// over the old one (the double reads it again when it changes).
    fn edit(&self, change: impl FnOnce(&mut Value)) {
        let config = self.config();
        let lock = std::fs::File::create(config.with_extension("json.lock")).unwrap();
        // SAFETY: flock on a descriptor we own; released when `lock` is closed.
        assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
        let mut script = std::fs::read_to_string(&config)
            .map(|text| serde_json::from_str(&text).unwrap())
            .unwrap_or(Value::Null);
        change(&mut script);
        let tmp = config.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(&script).unwrap()).unwrap();
        std::fs::rename(&tmp, &config).unwrap();
    }

    fn script(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.config()).unwrap()).unwrap()
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("LD_LIBRARY_PATH", self.lib.to_string_lossy().into_owned()),
            (
                "NVML_DOUBLE_CONFIG",
                self.config().to_string_lossy().into_owned(),
            ),
        ]
    }

    /// `montrace run ARGS -- CMD` with this driver; `during` runs once montrace has started.
    fn run(&self, args: &[&str], cmd: &[&str], during: impl FnOnce(u32)) -> Run {
        let env = self.env();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        launch_montrace(args, cmd).envs(&env).during(during)
    }

    /// The workload's report files (parent, child), when it wrote them.
    fn report(&self) -> PathBuf {
        self.dir.path().join("workload.json")
    }
}

/// A GPU as the double gives it: every figure montrace reads.
fn h100(uuid: &str) -> Value {
    json!({
        "name": "NVIDIA H100 80GB HBM3", "uuid": uuid,
        "memory_total": 81559 * MIB, "memory_used": BASE_USED, "memory_reserved": 0,
        "util_gpu": 87, "util_memory": 41, "power_mw": 312_500, "energy_mj": 1_000_000_000u64,
        "temperature": 44, "sm_clock": 1980, "memory_clock": 2619, "throttle": 0x4 | 0x40,
        "accounting": false, "compute": [], "graphics": [],
    })
}

fn one_gpu() -> Value {
    json!({"init": "SUCCESS", "devices": [h100(UUID0)]})
}

/// `m.resources["gpu_memory_peak_bytes"]` and the MLflow series of GPU 0 of the run `argv[1]`.
const PYTHON_GPU_FIGURES: &str = r#"
import json, sys
import montrace
from montrace import mlflow as mm
run = montrace.load(sys.argv[1])
series = mm.series(run)
memory = [v for _, _, v in series["gpu0_memory_mb"]]
util = sorted({v for _, _, v in series["gpu0_utilization_percent"]})
print(json.dumps({"peak": run.resources["gpu_memory_peak_bytes"], "memory_mb_max": max(memory),
                  "utilization": util, "steps": len(series["gpu0_memory_mb"])}))
"#;

fn parquet(run: &Run, table: &str) -> String {
    run.dir
        .join(format!("{table}.parquet"))
        .to_string_lossy()
        .into_owned()
}

/// The workload's processes as (pid the driver gives, MiB it holds).
fn workload_pids(double: &Double) -> Vec<(u64, u64)> {
    let mut pids = Vec::new();
    for path in [
        double.report(),
        double.report().with_extension("json.child"),
    ] {
        if let Ok(text) = std::fs::read_to_string(&path) {
            let report: Value = serde_json::from_str(&text).unwrap();
            pids.push((
                report["driver_pid"].as_u64().unwrap(),
                report["held_mib"].as_u64().unwrap(),
            ));
        }
    }
    pids
}

/// Waits until both workload processes have put themselves in the double's process list.
fn wait_for_workload(double: &Double) {
    wait_for_file(&double.report());
    wait_for_file(&double.report().with_extension("json.child"));
}

#[test]
fn the_trees_gpu_processes_are_attributed_exactly_and_others_not_at_all() {
    let double = Double::new(one_gpu());
    // A process outside the tree on the same GPU: this test's own pid.
    let outsider = std::process::id();
    double.edit(|s| {
        s["devices"][0]["compute"] = json!([{"pid": outsider, "used": 3 << 30}]);
        s["devices"][0]["memory_used"] = json!(BASE_USED + (3 << 30));
    });
    let report = double.report().to_string_lossy().into_owned();
    let run = double.run(
        &["--interval", "100ms", "--gpu", "require"],
        &[
            "python3",
            &workload(),
            "--backend",
            "nvml-double",
            "--seconds",
            "2",
            "--mib",
            "1024",
            "--child-mib",
            "512",
            "--report",
            &report,
        ],
        |_| {
            // Mid-run: the energy counter moves on by 12345.678 J and the GPU gets busier.
            wait_for_workload(&double);
            double.edit(|s| {
                s["devices"][0]["energy_mj"] = json!(1_000_000_000u64 + 12_345_678);
                s["devices"][0]["util_gpu"] = json!(99);
            });
        },
    );
    run.assert_code(0);
    let pids = workload_pids(&double);
    assert_eq!(pids.len(), 2, "{run:?}");
    let tree: Vec<u64> = run.processes().iter().map(|p| u64::from(p.pid)).collect();
    for (pid, _) in &pids {
        assert!(tree.contains(pid), "pid {pid} is not in the tree {tree:?}");
    }

    // gpu_processes.parquet: the two pids, each with exactly what it held, and no other pid.
    let rows = duckdb_query(&format!(
        "SELECT pid, source, min(gpu_memory_bytes) AS lo, max(gpu_memory_bytes) AS hi, \
         count(*) AS n FROM read_parquet('{}') GROUP BY pid, source ORDER BY pid",
        parquet(&run, "gpu_processes")
    ));
    let mut expected = pids.clone();
    expected.sort();
    assert_eq!(rows.rows.len(), 2, "{rows:?}");
    for (i, (pid, mib)) in expected.iter().enumerate() {
        assert_eq!(rows.u64(i, "pid"), Some(*pid), "{rows:?}");
        assert_eq!(rows.str(i, "source"), Some("sample"));
        let bytes = (mib + 500) * MIB;
        assert_eq!(rows.u64(i, "lo"), Some(bytes), "pid {pid}: {rows:?}");
        assert_eq!(rows.u64(i, "hi"), Some(bytes), "pid {pid}: {rows:?}");
        // Timing: the workload holds its memory for its 2 s (`--seconds`, a sleep that never
        // returns early), swept every 100 ms: about 20 rows each. A busy machine delays a sweep,
        // never skips one; 5 needs montrace on a CPU 5 times in those 2 s.
        assert!(rows.u64(i, "n").unwrap() >= 5, "{rows:?}");
    }
    let json = run.run_json();
    let gpu = &json["gpu"];
    assert_eq!(gpu["status"], "monitored", "{gpu}");
    // Both at once: 1524 + 1012 MiB; the outsider's 3 GiB are not the tree's.
    assert_eq!(gpu["tree_peak_memory_bytes"], (1524 + 1012) * MIB, "{gpu}");
    assert_eq!(gpu["attribution_unavailable"], Value::Null, "{gpu}");

    // gpu.parquet carries the scripted figures exactly.
    let rows = duckdb_query(&format!(
        "SELECT name, uuid, utilization_memory_percent, memory_total_bytes, power_watts, \
         temperature_c, sm_clock_mhz, memory_clock_mhz, \
         array_to_string(throttle_reasons, ',') AS throttle, \
         min(utilization_gpu_percent) AS ulo, max(utilization_gpu_percent) AS uhi, \
         max(memory_used_bytes) AS used, max(energy_joules) AS energy, count(*) AS n \
         FROM read_parquet('{}') GROUP BY ALL",
        parquet(&run, "gpu")
    ));
    assert_eq!(rows.rows.len(), 1, "one set of fixed figures: {rows:?}");
    assert_eq!(rows.str(0, "name"), Some("NVIDIA H100 80GB HBM3"));
    assert_eq!(rows.str(0, "uuid"), Some(UUID0));
    assert_eq!(rows.f64(0, "utilization_memory_percent"), Some(41.0));
    assert_eq!(rows.u64(0, "memory_total_bytes"), Some(81559 * MIB));
    assert_eq!(rows.f64(0, "power_watts"), Some(312.5));
    assert_eq!(rows.u64(0, "temperature_c"), Some(44));
    assert_eq!(rows.u64(0, "sm_clock_mhz"), Some(1980));
    assert_eq!(rows.u64(0, "memory_clock_mhz"), Some(2619));
    assert_eq!(
        rows.str(0, "throttle"),
        Some("sw_power_cap,hw_thermal_slowdown")
    );
    assert_eq!(rows.f64(0, "ulo"), Some(87.0));
    assert_eq!(rows.f64(0, "uhi"), Some(99.0));
    assert_eq!(
        rows.u64(0, "used"),
        Some(BASE_USED + (3 << 30) + (1524 + 1012) * MIB)
    );
    assert_eq!(rows.f64(0, "energy"), Some(12345.678));
    let samples = rows.u64(0, "n").unwrap();

    // run.json agrees with the table.
    let dev = &gpu["devices"][0];
    assert_eq!(dev["name"], "NVIDIA H100 80GB HBM3");
    assert_eq!(dev["uuid"], UUID0);
    assert_eq!(dev["samples"], samples);
    assert_eq!(dev["memory_total_bytes"], 81559 * MIB);
    assert_eq!(dev["utilization_gpu_max_percent"], 99.0);
    assert_eq!(dev["power_max_watts"], 312.5);
    assert_eq!(dev["energy_joules"], 12345.678);
    assert_eq!(gpu["energy_joules"], 12345.678);
    assert_eq!(dev["mig_mode"], Value::Null);
    assert_eq!(dev["lost_time"], Value::Null);
    assert_eq!(dev["accounting_mode"], false);
    assert!(run.stdout.contains("NVIDIA H100 80GB HBM3") || run.stderr.contains("NVIDIA H100"));

    // The report draws the GPU.
    let report = std::fs::read_to_string(run.dir.join("report.html")).unwrap();
    assert!(report.contains("GPU"), "report.html has no GPU plot");
    // Python's resources and MLflow series (the package's source, python/montrace) read the
    // same figures.
    let out = tests::python(
        "montrace's Python package on the run",
        PYTHON_GPU_FIGURES,
        &[run.dir.to_str().unwrap()],
        &[("PYTHONPATH", workspace().join("python").to_str().unwrap())],
    );
    let figures: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(figures["peak"], (1524 + 1012) * MIB, "{figures}");
    assert_eq!(
        figures["memory_mb_max"].as_f64(),
        Some(((BASE_USED + (3 << 30)) / MIB + 1524 + 1012) as f64)
    );
    // 87 % at montrace's first sweep, made at once, before Python has started the workload
    // that the test waits for before its edit; 99 % in the workload's 2 s after the edit (its
    // sleep never returns early), swept every 100 ms, late on a busy machine, never skipped.
    assert_eq!(figures["utilization"], json!([87.0, 99.0]), "{figures}");
    assert_eq!(figures["steps"], samples, "{figures}");

    // The workload took itself out of the list: the outsider is left.
    let script = double.script();
    assert_eq!(script["devices"][0]["compute"].as_array().unwrap().len(), 1);
}

#[test]
fn the_gpu_mem_limit_stops_the_tree() {
    let double = Double::new(one_gpu());
    let report = double.report().to_string_lossy().into_owned();
    let started = Instant::now();
    let run = double.run(
        &[
            "--interval",
            "100ms",
            "--limit",
            "gpu-mem=1GiB",
            "--kill-grace",
            "1s",
        ],
        &[
            "python3",
            &workload(),
            "--backend",
            "nvml-double",
            "--seconds",
            "30",
            "--mib",
            "1024",
            "--child-mib",
            "0",
            "--report",
            &report,
        ],
        |_| {},
    );
    run.assert_code(124);
    // Timing: an upper bound, not a race. The limit is over at the first sweep after the
    // workload takes its memory (1,524 MiB against 1 GiB) and the tree has 1 s of grace; 15 s is
    // half the workload's own 30 s, so only the limit can have ended it, however busy the
    // machine.
    assert!(started.elapsed() < Duration::from_secs(15), "{run:?}");
    let breach = &run.run_json()["limit_breach"];
    assert_eq!(breach["limit"], "gpu-mem", "{breach}");
    assert_eq!(
        breach["value"].as_f64(),
        Some((1524 * MIB) as f64),
        "{breach}"
    );
    assert_eq!(
        breach["threshold"].as_f64(),
        Some((1024 * MIB) as f64),
        "{breach}"
    );
}

#[test]
fn a_lost_gpu_ends_its_sampling_with_a_note_and_the_run_completes() {
    let double = Double::new(json!({"init": "SUCCESS", "devices": [h100(UUID0), h100(UUID1)]}));
    let started = double.dir.path().join("started");
    let script = format!("touch {}; sleep 1.5; echo done", started.display());
    let run = double.run(&["--interval", "50ms"], &["sh", "-c", &script], |_| {
        // Lost once montrace has swept a few times (its start-up over, the command started).
        wait_for_file(&started);
        std::thread::sleep(Duration::from_millis(400));
        double.edit(|s| s["devices"][0]["fail"] = json!({"*": "GPU_IS_LOST"}));
    });
    run.assert_code(0);
    assert_eq!(run.stdout.trim(), "done");
    assert!(
        run.stderr.contains("GPU 0 (NVIDIA H100 80GB HBM3) is lost"),
        "{run:?}"
    );
    let json = run.run_json();
    let devices = &json["gpu"]["devices"];
    let lost = devices[0]["lost_time"].as_str().expect("GPU 0 is lost");
    assert_eq!(devices[1]["lost_time"], Value::Null);
    let lost_ns = tests::rfc3339_ns(lost);
    let rows = duckdb_query(&format!(
        "SELECT gpu_index, count(*) AS n, max(epoch_ns(time)) AS last \
         FROM read_parquet('{}') GROUP BY gpu_index ORDER BY gpu_index",
        parquet(&run, "gpu")
    ));
    assert_eq!(rows.rows.len(), 2, "{rows:?}");
    // GPU 0: rows before it was lost, none after; GPU 1 went on to the end.
    assert!(
        rows.u64(0, "last").unwrap() < lost_ns as u64,
        "{rows:?} lost {lost}"
    );
    assert!(
        rows.u64(1, "last").unwrap() > lost_ns as u64,
        "{rows:?} lost {lost}"
    );
    assert_eq!(devices[0]["samples"].as_u64(), rows.u64(0, "n"));
    // Timing: GPU 0 is lost 400 ms after the command started (the test's sleep never returns
    // early), swept every 50 ms from montrace's start: about 8 rows before; GPU 1 goes on for the
    // command's remaining 1.1 s at least, about 20 more. A busy machine delays sweeps, never
    // skips one; the margins are 3 of 8 and 5 of 20.
    assert!(rows.u64(0, "n").unwrap() >= 3, "{rows:?}");
    assert!(
        rows.u64(1, "n").unwrap() > rows.u64(0, "n").unwrap() + 5,
        "{rows:?}"
    );
}

#[test]
fn mig_mode_is_reported_as_such() {
    let mut mig = h100(UUID0);
    mig["mig"] = json!(1);
    // In MIG mode NVML gives no utilization of the whole GPU.
    mig["util_gpu"] = Value::Null;
    let mut plain = h100(UUID1);
    plain["mig"] = json!(0);
    let double = Double::new(json!({"init": "SUCCESS", "devices": [mig, plain]}));
    let run = double.run(&["--interval", "50ms"], &["sleep", "0.3"], |_| {});
    run.assert_code(0);
    let json = run.run_json();
    let devices = &json["gpu"]["devices"];
    assert_eq!(devices[0]["mig_mode"], true, "{devices}");
    assert_eq!(devices[1]["mig_mode"], false, "{devices}");
    assert_eq!(devices[0]["utilization_gpu_mean_percent"], Value::Null);
    assert!(
        run.stderr.contains("MIG mode") || run.stdout.contains("MIG mode"),
        "{run:?}"
    );
}

/// The driver gives the host's pids. montrace on the host maps a tree whose processes live in
/// a PID namespace of their own (`unshare --pid`) by those pids; montrace inside a PID
/// namespace of its own cannot map them, and attributes nothing rather than the wrong process.
#[test]
fn pids_from_other_pid_namespaces_are_mapped_or_left_unattributed() {
    // The tree in a PID namespace of its own, montrace on the host: exact.
    let double = Double::new(one_gpu());
    let report = double.report().to_string_lossy().into_owned();
    let run = double.run(
        &["--interval", "100ms"],
        &[
            "unshare",
            "--pid",
            "--fork",
            "python3",
            &workload(),
            "--backend",
            "nvml-double",
            "--seconds",
            "1",
            "--mib",
            "100",
            "--child-mib",
            "200",
            "--report",
            &report,
        ],
        |_| {},
    );
    run.assert_code(0);
    let pids = workload_pids(&double);
    assert_eq!(pids.len(), 2, "{run:?}");
    let rows = duckdb_query(&format!(
        "SELECT DISTINCT pid, gpu_memory_bytes FROM read_parquet('{}') ORDER BY pid",
        parquet(&run, "gpu_processes")
    ));
    let mut expected = pids.clone();
    expected.sort();
    assert_eq!(rows.rows.len(), 2, "{rows:?}");
    for (i, (pid, mib)) in expected.iter().enumerate() {
        assert_eq!(rows.u64(i, "pid"), Some(*pid), "{rows:?}");
        assert_eq!(rows.u64(i, "gpu_memory_bytes"), Some((mib + 500) * MIB));
    }

    // montrace itself in a new PID namespace: the driver's pids 1..=4 are host processes, not
    // the tree's processes 1..=4 there.
    let double = Double::new(one_gpu());
    double.edit(|s| {
        s["devices"][0]["compute"] = json!([
            {"pid": 1, "used": MIB}, {"pid": 2, "used": 2 * MIB},
            {"pid": 3, "used": 3 * MIB}, {"pid": 4, "used": 4 * MIB}
        ])
    });
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--fork", "--mount-proc"])
        .arg(tests::montrace_bin())
        .args(["run", "--interval", "100ms", "--out"])
        .arg(&out)
        .args(["--", "sh", "-c", "sleep 0.5 & sleep 0.6; wait"])
        .envs(double.env());
    let finished = run_with_timeout(&mut cmd, tests::TIMEOUT);
    assert_eq!(finished.code(), 0, "{finished:?}");
    assert!(
        finished.stderr.contains("GPU processes not attributed"),
        "{finished:?}"
    );
    let json = tests::read_json(&out.join("run.json")).unwrap();
    let why = json["gpu"]["attribution_unavailable"].as_str().unwrap();
    assert!(why.contains("PID namespace of its own"), "{why}");
    assert!(why.contains("4 GPU process(es)"), "{why}");
    assert_eq!(json["gpu"]["tree_peak_memory_bytes"], Value::Null);
    let rows = duckdb_query(&format!(
        "SELECT count(*) AS n FROM read_parquet('{}')",
        out.join("gpu_processes.parquet").display()
    ));
    assert_eq!(rows.u64(0, "n"), Some(0), "{rows:?}");

    // ... and a gpu-mem limit it could not enforce is refused before the command starts.
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--fork", "--mount-proc"])
        .arg(tests::montrace_bin())
        .args(["run", "--limit", "gpu-mem=1GiB", "--out"])
        .arg(tmp.path().join("refused"))
        .args(["--", "true"])
        .envs(double.env());
    let finished = run_with_timeout(&mut cmd, tests::TIMEOUT);
    assert_eq!(finished.code(), 125, "{finished:?}");
    assert!(finished.stderr.contains("--limit gpu-mem"), "{finished:?}");
}

/// What the driver refuses, montrace records as null, or says why there is no GPU data.
#[test]
fn driver_failures_are_nulls_or_reasons_never_a_lost_run() {
    // A query the GPU does not support, and an older driver without the _v3 process lists or
    // the v2 memory query: the process lists come from the _v2 ones.
    let mut gpu = h100(UUID0);
    gpu["fail"] = json!({"nvmlDeviceGetPowerUsage": "NOT_SUPPORTED"});
    gpu["compute"] = json!([{"pid": 1, "used": MIB}]);
    let double = Double::with_library(json!({"init": "SUCCESS", "devices": [gpu]}), true);
    let run = double.run(
        &["--interval", "50ms", "--gpu", "require"],
        &["sleep", "0.3"],
        |_| {},
    );
    run.assert_code(0);
    let rows = duckdb_query(&format!(
        "SELECT count(*) AS n, count(power_watts) AS power, count(memory_used_bytes) AS used, \
         count(temperature_c) AS temp FROM read_parquet('{}')",
        parquet(&run, "gpu")
    ));
    // Timing: `sleep 0.3` lives at least 300 ms, swept at once and every 50 ms: about 7 rows; a
    // busy machine delays sweeps, never skips one.
    assert!(rows.u64(0, "n").unwrap() >= 3, "{rows:?}");
    assert_eq!(rows.u64(0, "power"), Some(0), "{rows:?}");
    assert_eq!(rows.u64(0, "used"), Some(0), "no v2 memory query: {rows:?}");
    assert_eq!(rows.u64(0, "temp"), rows.u64(0, "n"), "{rows:?}");
    // pid 1 is not the tree's, but the list was read: the tree held 0 bytes, not "unknown".
    assert_eq!(run.run_json()["gpu"]["tree_peak_memory_bytes"], 0);

    // NVML does not start: --gpu auto says why and records; --gpu require refuses.
    let double = Double::new(json!({"init": "DRIVER_NOT_LOADED", "devices": []}));
    let run = double.run(&[], &["true"], |_| {});
    run.assert_code(0);
    let gpu = &run.run_json()["gpu"];
    assert_eq!(gpu["status"], "unavailable", "{gpu}");
    assert!(
        gpu["reason"]
            .as_str()
            .unwrap()
            .contains("driver is not loaded"),
        "{gpu}"
    );
    assert!(run.stderr.contains("no GPU data"), "{run:?}");
    let run = double.run(&["--gpu", "require"], &["true"], |_| {});
    run.assert_code(125);
    assert!(run.stderr.contains("--gpu require"), "{run:?}");
}

/// A monitored run's gpu.parquet: its rows (`n`) and how long after montrace's start (run.json,
/// before which NVML's opening cannot have begun) the first was read (`late_ms`).
fn gpu_rows_after_start(run: &Run) -> tests::QueryResult {
    let info = run.run_json();
    assert_eq!(info["gpu"]["status"], "monitored", "{info}");
    duckdb_query(&format!(
        "SELECT count(*) AS n, \
         (epoch_us(min(time)) - epoch_us(TIMESTAMPTZ '{}')) / 1e3 AS late_ms \
         FROM read_parquet('{}')",
        info["start_time"].as_str().unwrap(),
        parquet(run, "gpu")
    ))
}

/// `--gpu auto` opens NVML beside the run: a driver slow to start holds neither a short run
/// (it ends with the command's status, run.json says why there is no GPU data) nor the sweeps
/// of a longer one: montrace sweeps when NVML has opened, and at every sweep from then on.
#[test]
fn a_slow_nvml_start_holds_neither_a_short_run_nor_the_sweeps() {
    let mut script = one_gpu();
    // nvmlInit answers after 3 s: `sh -c 'exit 3'` is long done by then.
    script["init_ms"] = json!(3000);
    let double = Double::new(script.clone());
    let run = double.run(&[], &["sh", "-c", "exit 3"], |_| {});
    run.assert_code(3);
    let info = run.run_json();
    assert_ne!(
        info["tracking_mode"], "polling",
        "polling takes NVML first: {info}"
    );
    // Not a speed target: montrace either waited out the driver's 3 s or it did not.
    assert!(
        run.wall < Duration::from_millis(2500),
        "montrace waited for NVML to open: {run:?}"
    );
    assert_eq!(info["gpu"]["status"], "unavailable", "{info}");
    assert!(
        info["gpu"]["reason"]
            .as_str()
            .unwrap()
            .contains("the run ended before NVML had opened"),
        "{info}"
    );
    assert!(!run.dir.join("gpu.parquet").exists(), "{run:?}");
    assert!(!run.stderr.contains("panicked"), "{run:?}");

    // 400 ms to start, a command of 1.5 s swept every 100 ms: the GPU is read from the sweep
    // when NVML opened, at every sweep from then on.
    script["init_ms"] = json!(400);
    double.edit(|s| *s = script);
    let run = double.run(&["--interval", "100ms"], &["sleep", "1.5"], |_| {});
    run.assert_code(0);
    let rows = gpu_rows_after_start(&run);
    let late_ms = rows.f64(0, "late_ms").unwrap();
    // The double answers nvmlInit 400 ms after it was called, after montrace started: no GPU
    // row comes before (1 ms for the timestamps' rounding). Sweeps are 100 ms apart, and 1.5 s
    // of command leaves room for several after.
    assert!(
        late_ms >= 399.0,
        "the GPU was read before NVML opened: {rows:?}"
    );
    assert!(rows.u64(0, "n").unwrap() >= 3, "{rows:?}");

    // 300 ms to start, a command of 0.8 s and no sweep due after the first: montrace sweeps
    // when NVML has opened, while the command runs, and reads the GPU then.
    double.edit(|s| s["init_ms"] = json!(300));
    let run = double.run(&["--interval", "30s"], &["sleep", "0.8"], |_| {});
    run.assert_code(0);
    let rows = gpu_rows_after_start(&run);
    assert_eq!(rows.u64(0, "n"), Some(1), "one read: {rows:?}");
    let late_ms = rows.f64(0, "late_ms").unwrap();
    // After NVML opened, and before the command's end (at least 800 ms after the start).
    assert!((299.0..750.0).contains(&late_ms), "{rows:?}");
}

/// `gpu-check`'s comparison, through the double and its nvidia-smi: what the lead runs on a
/// real GPU works here, and its table says `ok` where montrace and the driver agree.
#[test]
fn gpu_check_compares_montrace_with_nvidia_smi() {
    let double = Double::new(one_gpu());
    double.edit(|s| s["devices"][0]["energy_follows_power"] = json!(true));
    let tmp = tempfile::tempdir().unwrap();
    // The double's nvidia-smi first on PATH.
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(
        workspace().join("tests/nvml-double/nvidia-smi"),
        bin.join("nvidia-smi"),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = tmp.path().join("gpu.json");
    let mut cmd = Command::new("python3");
    cmd.arg(workspace().join("xtask/gpu-check/gpu_check.py"))
        .arg("--montrace")
        .arg(tests::montrace_bin())
        .args(["--framework", "nvml-double", "--seconds", "3", "--json"])
        .arg(&out)
        .env("PATH", path)
        .envs(double.env());
    let finished = run_with_timeout(&mut cmd, Duration::from_secs(120));
    assert_eq!(finished.code(), 0, "{finished:?}");
    let doc = tests::read_json(&out).unwrap();
    assert_eq!(doc["exit"], 0, "{doc}");
    assert_eq!(doc["errors"], json!([]), "{doc}");
    let verdict = |figure: &str| -> String {
        let row = doc["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["figure"].as_str().unwrap().starts_with(figure))
            .unwrap_or_else(|| panic!("no row `{figure}`: {doc}"));
        row["verdict"].as_str().unwrap().to_owned()
    };
    for figure in [
        "run.json gpu.status",
        "pids with GPU memory (tree)",
        "GPU memory of pid",
        "run.json tree_peak_memory_bytes",
        "GPU 0 name",
        "GPU 0 memory used (steady median)",
        "GPU 0 utilization (steady median)",
        "GPU 0 power (steady median)",
        "GPU 0 temperature (steady median)",
        "GPU 0 SM clock",
        "GPU 0 throttle reasons",
        "GPU 0 energy vs montrace's own power integrated",
        "--limit gpu-mem",
        "  breach in run.json",
    ] {
        assert_eq!(verdict(figure), "ok", "{figure}: {doc}");
    }
    // The start-up runs (a timing: its verdict may be `check` on a busy machine): each of the
    // 10 a mode gave its start-up.
    for mode in ["off", "auto"] {
        let got = doc["startup_ms"][mode].as_array().unwrap();
        assert!(
            got.len() == 10 && got.iter().all(|ms| ms.as_f64().unwrap() > 0.0),
            "{mode}: {doc}"
        );
    }
    verdict("start-up of /bin/true, --gpu auto");
    assert!(finished.stdout.contains("| figure"), "{finished:?}");
}
