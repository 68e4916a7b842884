use super::fake::{FakeBackend, FakeDevice};
use super::monitor::pid_attribution;
use super::*;

const SEC: i64 = 1_000_000_000;
/// 2023-11-14T22:13:20Z: the run's first sweep.
const T0: i64 = 1_700_000_000 * SEC;

fn h100(index: u32) -> GpuDevice {
    GpuDevice {
        index,
        uuid: Some(format!("GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd")),
        name: Some("NVIDIA H100 80GB HBM3".into()),
        memory_total_bytes: Some(80 << 30),
        mig_mode: None,
    }
}

fn full_reading() -> DeviceReading {
    DeviceReading {
        utilization_gpu_percent: Some(90),
        utilization_memory_percent: Some(40),
        memory_used_bytes: Some(10 << 30),
        memory_total_bytes: Some(80 << 30),
        power_mw: Some(350_500),
        energy_mj: Some(5_000_000),
        temperature_c: Some(61),
        sm_clock_mhz: Some(1980),
        memory_clock_mhz: Some(2619),
        throttle_reasons: Some(0x4 | 0x40),
        lost: false,
    }
}

fn device(index: u32) -> FakeDevice {
    FakeDevice {
        info: h100(index),
        reading: full_reading(),
        processes: Some(Vec::new()),
        utilization: Some(Vec::new()),
        ..Default::default()
    }
}

fn monitor(fake: &FakeBackend) -> GpuMonitor {
    GpuMonitor::new(fake.boxed()).unwrap()
}

fn holder(pid: u32, bytes: u64) -> GpuProcess {
    GpuProcess {
        pid,
        used_memory_bytes: Some(bytes),
    }
}

fn util(pid: u32, time_ns: i64, sm: u32, memory: u32) -> ProcessUtilization {
    ProcessUtilization {
        pid,
        timestamp_us: (time_ns / 1000) as u64,
        sm_percent: sm,
        memory_percent: memory,
    }
}

/// The tracked processes: pid -> start time.
fn tree(processes: &[(u32, i64)]) -> impl Fn(u32) -> Option<i64> + '_ {
    move |pid| processes.iter().find(|(p, _)| *p == pid).map(|(_, s)| *s)
}

#[test]
fn a_sweep_reads_every_figure_of_every_gpu() {
    let fake = FakeBackend::new(vec![device(0), device(1)]);
    let mut gpus = monitor(&fake);
    let (rows, processes) = gpus.sample(T0, tree(&[]));
    assert!(processes.is_empty());
    assert_eq!(rows.len(), 2);
    assert_eq!(
        rows[0],
        GpuRecord {
            time_ns: T0,
            gpu_index: 0,
            uuid: Some("GPU-00000000-aaaa-bbbb-cccc-dddddddddddd".into()),
            name: Some("NVIDIA H100 80GB HBM3".into()),
            utilization_gpu_percent: Some(90.0),
            utilization_memory_percent: Some(40.0),
            memory_used_bytes: Some(10 << 30),
            memory_total_bytes: Some(80 << 30),
            power_watts: Some(350.5),
            // Relative to the first reading.
            energy_joules: Some(0.0),
            temperature_c: Some(61),
            sm_clock_mhz: Some(1980),
            memory_clock_mhz: Some(2619),
            throttle_reasons: Some(vec!["sw_power_cap".into(), "hw_thermal_slowdown".into()]),
        }
    );
    assert_eq!(rows[1].gpu_index, 1);

    // The counter goes on: 1234.5 J later.
    fake.devices.lock().unwrap()[0].reading.energy_mj = Some(5_000_000 + 1_234_500);
    fake.devices.lock().unwrap()[0]
        .reading
        .utilization_gpu_percent = Some(30);
    let (rows, _) = gpus.sample(T0 + SEC, tree(&[]));
    assert_eq!(rows[0].energy_joules, Some(1234.5));
    assert_eq!(rows[1].energy_joules, Some(0.0));

    let summary = gpus.summary();
    assert_eq!(summary.status, GpuState::Monitored);
    assert_eq!(summary.energy_joules, Some(1234.5));
    let gpu0 = &summary.devices[0];
    assert_eq!(gpu0.samples, 2);
    assert_eq!(gpu0.utilization_gpu_mean_percent, Some(60.0));
    assert_eq!(gpu0.utilization_gpu_max_percent, Some(90.0));
    assert_eq!(gpu0.energy_joules, Some(1234.5));
    assert_eq!(gpu0.power_max_watts, Some(350.5));
    assert_eq!(gpu0.memory_used_max_bytes, Some(10 << 30));
    assert_eq!(gpu0.name.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    assert_eq!(summary.devices[1].energy_joules, Some(0.0));
    // No GPU process at all: the tree held none.
    assert_eq!(summary.tree_peak_memory_bytes, Some(0));
}

#[test]
fn what_a_gpu_does_not_support_is_null() {
    let mut bare = device(0);
    bare.info.uuid = None;
    bare.info.name = None;
    bare.info.memory_total_bytes = None;
    bare.reading = DeviceReading::default();
    bare.processes = None;
    bare.utilization = None;
    let fake = FakeBackend::new(vec![bare]);
    let mut gpus = monitor(&fake);
    let (rows, processes) = gpus.sample(T0, tree(&[(7, T0 - SEC)]));
    assert_eq!(
        rows,
        [GpuRecord {
            time_ns: T0,
            ..Default::default()
        }]
    );
    assert!(processes.is_empty());
    let summary = gpus.summary();
    assert_eq!(summary.energy_joules, None);
    assert_eq!(summary.tree_peak_memory_bytes, None);
    assert_eq!(summary.devices[0].utilization_gpu_mean_percent, None);
    assert_eq!(summary.devices[0].samples, 1);
    assert_eq!(gpus.last_tree_memory_bytes(), None);
    let json = serde_json::to_value(&summary).unwrap();
    assert_eq!(json["devices"][0]["energy_joules"], serde_json::Value::Null);

    // The row writes as nulls (every nullable column).
    let batch = crate::store::schema::gpu_batch(&rows).unwrap();
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        assert_eq!(
            column.null_count() == 1,
            field.is_nullable(),
            "{}",
            field.name()
        );
    }
}

#[test]
fn processes_are_attributed_only_to_the_tree() {
    let mut gpu0 = device(0);
    // 10: in the tree; 20: someone else's job; 30: in the tree, no memory figure.
    gpu0.processes = Some(vec![
        holder(10, 3 << 30),
        holder(20, 40 << 30),
        GpuProcess {
            pid: 30,
            used_memory_bytes: None,
        },
    ]);
    gpu0.utilization = Some(vec![
        util(10, T0 - SEC / 2, 80, 30),
        util(10, T0 - SEC / 4, 100, 50),
        util(20, T0 - SEC / 4, 99, 99),
    ]);
    let mut gpu1 = device(1);
    gpu1.processes = Some(vec![holder(10, 1 << 30)]);
    let fake = FakeBackend::new(vec![gpu0, gpu1]);
    let mut gpus = monitor(&fake);
    let started = [(10, T0 - 5 * SEC), (30, T0 - 5 * SEC)];

    let (_, rows) = gpus.sample(T0, tree(&started));
    assert_eq!(
        rows,
        [
            GpuProcessRecord {
                time_ns: T0,
                gpu_index: 0,
                pid: 10,
                start_time_ns: T0 - 5 * SEC,
                source: GpuProcessSource::Sample,
                gpu_memory_bytes: Some(3 << 30),
                // The mean of its two samples.
                sm_utilization_percent: Some(90.0),
                memory_utilization_percent: Some(40.0),
                ..Default::default()
            },
            GpuProcessRecord {
                time_ns: T0,
                gpu_index: 0,
                pid: 30,
                start_time_ns: T0 - 5 * SEC,
                ..Default::default()
            },
            GpuProcessRecord {
                time_ns: T0,
                gpu_index: 1,
                pid: 10,
                start_time_ns: T0 - 5 * SEC,
                gpu_memory_bytes: Some(1 << 30),
                ..Default::default()
            },
        ]
    );
    assert!(rows.iter().all(|r| r.pid != 20));
    // The tree's memory is its own processes' on both GPUs, not pid 20's.
    assert_eq!(gpus.last_tree_memory_bytes(), Some(4 << 30));

    // The next sweep asks only for newer utilization samples, and gets none: null.
    fake.devices.lock().unwrap()[0].processes = Some(vec![holder(10, 6 << 30)]);
    fake.devices.lock().unwrap()[1].processes = Some(Vec::new());
    let (_, rows) = gpus.sample(T0 + SEC, tree(&started));
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].gpu_memory_bytes, Some(6 << 30));
    assert_eq!(rows[0].sm_utilization_percent, None);
    let since = (T0 - SEC / 4) as u64 / 1000;
    assert_eq!(
        fake.utilization_queries.lock().unwrap()[2..],
        [Some(since), None],
        "GPU 0 asks from its newest sample, GPU 1 (none yet) for all"
    );

    fake.devices.lock().unwrap()[0].processes = Some(vec![holder(10, 2 << 30)]);
    gpus.sample(T0 + 2 * SEC, tree(&started));
    let summary = gpus.summary();
    assert_eq!(summary.tree_peak_memory_bytes, Some(6 << 30));
    assert_eq!(
        summary.tree_peak_memory_time.as_deref(),
        Some("2023-11-14T22:13:21.000000Z")
    );
    assert_eq!(gpus.last_tree_memory_bytes(), Some(2 << 30));
    assert_eq!(
        summary.metrics()[0],
        ("gpu_peak_memory_bytes", Some((6u64 << 30) as f64))
    );
}

#[test]
fn utilization_from_before_a_process_started_is_not_its() {
    let mut gpu = device(0);
    gpu.processes = Some(vec![holder(10, 1 << 30)]);
    // A sample of an earlier process that had pid 10, then one of ours.
    gpu.utilization = Some(vec![
        util(10, T0 - 3 * SEC, 100, 100),
        util(10, T0 - SEC / 2, 20, 10),
    ]);
    let fake = FakeBackend::new(vec![gpu]);
    let mut gpus = monitor(&fake);
    let (_, rows) = gpus.sample(T0, tree(&[(10, T0 - SEC)]));
    assert_eq!(rows[0].sm_utilization_percent, Some(20.0));
    assert_eq!(rows[0].memory_utilization_percent, Some(10.0));
}

#[test]
fn a_process_with_both_contexts_is_one_row() {
    let merged = merge_processes(
        [
            holder(5, 100),
            holder(6, 7),
            GpuProcess {
                pid: 5,
                used_memory_bytes: None,
            },
        ]
        .into_iter(),
    );
    assert_eq!(merged, [holder(5, 100), holder(6, 7)]);
}

fn accounting_device(stats: &[(u32, AccountingReading)]) -> FakeDevice {
    FakeDevice {
        accounting: true,
        accounting_stats: stats.iter().copied().collect(),
        ..device(0)
    }
}

fn finished(start_ns: i64) -> AccountingReading {
    AccountingReading {
        gpu_utilization_percent: Some(75),
        memory_utilization_percent: Some(20),
        max_memory_bytes: Some(5 << 30),
        start_time_us: (start_ns / 1000) as u64,
        time_ms: 1500,
        is_running: false,
    }
}

#[test]
fn an_exited_gpu_process_gets_its_accounting_figures() {
    let start = T0 - 10 * SEC;
    // 10 used the GPU; 11 did not (the driver has no figures for it).
    let fake = FakeBackend::new(vec![accounting_device(&[(10, finished(start + SEC))])]);
    let mut gpus = monitor(&fake);
    assert!(gpus.summary().devices[0].accounting_mode);
    gpus.on_exit(10, start, T0 - SEC / 2);
    gpus.on_exit(11, start, T0 - SEC / 2);
    let (_, rows) = gpus.sample(T0, tree(&[]));
    assert_eq!(
        rows,
        [GpuProcessRecord {
            time_ns: T0 - SEC / 2,
            gpu_index: 0,
            pid: 10,
            start_time_ns: start,
            source: GpuProcessSource::Accounting,
            max_gpu_memory_bytes: Some(5 << 30),
            lifetime_gpu_utilization_percent: Some(75.0),
            lifetime_memory_utilization_percent: Some(20.0),
            context_time_ns: Some(1_500_000_000),
            ..Default::default()
        }]
    );
    // Read once.
    assert!(gpus.sample(T0 + SEC, tree(&[])).1.is_empty());
    assert!(gpus.finish(T0 + 2 * SEC).is_empty());
}

#[test]
fn accounting_waits_for_the_driver_to_close_the_context() {
    let start = T0 - 10 * SEC;
    let running = AccountingReading {
        is_running: true,
        time_ms: 0,
        ..finished(start + SEC)
    };
    let fake = FakeBackend::new(vec![accounting_device(&[(10, running), (12, running)])]);
    let mut gpus = monitor(&fake);
    gpus.on_exit(10, start, T0);
    gpus.on_exit(12, start, T0);
    assert!(gpus.sample(T0 + SEC / 5, tree(&[])).1.is_empty());
    // The driver closed 10's context; 12's stays open past the grace time.
    fake.devices.lock().unwrap()[0]
        .accounting_stats
        .insert(10, finished(start + SEC));
    let (_, rows) = gpus.sample(T0 + SEC / 2, tree(&[]));
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].pid, rows[0].context_time_ns),
        (10, Some(1_500_000_000))
    );
    let (_, rows) = gpus.sample(T0 + ACCOUNTING_GRACE_NS, tree(&[]));
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].pid, 12);
    assert_eq!(rows[0].context_time_ns, None);
    assert_eq!(rows[0].max_gpu_memory_bytes, Some(5 << 30));

    // finish() takes what is there, at once.
    gpus.on_exit(12, start, T0 + 3 * SEC);
    assert_eq!(gpus.finish(T0 + 3 * SEC).len(), 1);
}

#[test]
fn accounting_of_an_earlier_process_with_the_same_pid_is_not_taken() {
    let start = T0 - 10 * SEC;
    let fake = FakeBackend::new(vec![accounting_device(&[(10, finished(start - 60 * SEC))])]);
    let mut gpus = monitor(&fake);
    gpus.on_exit(10, start, T0);
    assert!(gpus.sample(T0 + SEC, tree(&[])).1.is_empty());
}

#[test]
fn without_accounting_mode_an_exit_costs_nothing() {
    let mut gpu = device(0);
    gpu.accounting_stats.insert(10, finished(T0));
    let fake = FakeBackend::new(vec![gpu]);
    let mut gpus = monitor(&fake);
    gpus.on_exit(10, T0 - SEC, T0);
    assert!(gpus.pending.is_empty());
    assert!(gpus.finish(T0).is_empty());
}

#[test]
fn reset_starts_a_new_run() {
    let mut gpu = device(0);
    gpu.processes = Some(vec![holder(1, 100)]);
    let fake = FakeBackend::new(vec![gpu]);
    let mut gpus = monitor(&fake);
    gpus.sample(T0, tree(&[(1, T0 - SEC)]));
    fake.devices.lock().unwrap()[0].reading.energy_mj = Some(6_000_000);
    gpus.sample(T0 + SEC, tree(&[(1, T0 - SEC)]));
    assert_eq!(gpus.summary().energy_joules, Some(1000.0));
    gpus.reset();
    let summary = gpus.summary();
    assert_eq!(summary.energy_joules, None);
    assert_eq!(summary.tree_peak_memory_bytes, None);
    assert_eq!(summary.devices[0].samples, 0);
    // The energy baseline is taken again.
    let (rows, _) = gpus.sample(T0 + 2 * SEC, tree(&[]));
    assert_eq!(rows[0].energy_joules, Some(0.0));
}

fn unavailable(reason: &str) -> impl FnOnce() -> Result<Box<dyn GpuBackend>, GpuError> + '_ {
    move || {
        Err(GpuError::Unavailable {
            reason: reason.into(),
        })
    }
}

#[test]
fn auto_without_a_gpu_goes_on_and_says_why() {
    let status = GpuMonitor::open_with(GpuMode::Auto, unavailable("no driver")).unwrap();
    assert_eq!(
        status.notice().as_deref(),
        Some("montrace: no GPU data: no driver")
    );
    let summary = status.summary();
    assert_eq!(
        serde_json::to_value(&summary).unwrap(),
        serde_json::json!({
            "status": "unavailable",
            "reason": "no driver",
            "devices": [],
            "tree_peak_memory_bytes": null,
            "tree_peak_memory_time": null,
            "attribution_unavailable": null,
            "energy_joules": null,
        })
    );
    assert_eq!(
        summary.metrics(),
        [("gpu_peak_memory_bytes", None), ("gpu_energy_joules", None)]
    );
    assert_eq!(
        summary.format_lines(),
        ["  GPU                  unavailable (no driver)"]
    );
}

#[test]
fn require_without_a_gpu_fails() {
    let err = GpuMonitor::open_with(GpuMode::Require, unavailable("no driver")).unwrap_err();
    assert_eq!(
        err,
        GpuError::Required {
            reason: "no driver".into()
        }
    );
    let message = err.to_string();
    assert!(
        message.starts_with("--gpu require: no GPU can be monitored: no driver."),
        "{message}"
    );
    assert!(message.contains("--gpu auto"), "{message}");
}

#[test]
fn a_driver_without_devices_is_no_gpu() {
    let none = FakeBackend::new(Vec::new());
    let status = GpuMonitor::open_with(GpuMode::Auto, || Ok(none.boxed())).unwrap();
    let GpuStatus::Unavailable { reason } = status else {
        panic!("{status:?}");
    };
    assert!(reason.contains("no GPU"), "{reason}");
    assert!(GpuMonitor::open_with(GpuMode::Require, || Ok(none.boxed())).is_err());

    let mut failing = FakeBackend::new(Vec::new());
    failing.failure = Some(GpuError::Unavailable {
        reason: "NVML cannot open any GPU".into(),
    });
    let err = GpuMonitor::open_with(GpuMode::Require, || Ok(failing.boxed())).unwrap_err();
    assert_eq!(err.reason(), "NVML cannot open any GPU");
}

#[test]
fn off_does_not_look_for_a_gpu() {
    let status = GpuMonitor::open_with(GpuMode::Off, || panic!("NVML started")).unwrap();
    assert!(matches!(status, GpuStatus::Off));
    assert_eq!(status.notice(), None);
    assert_eq!(status.summary().status, GpuState::Off);
    assert!(status.summary().format_lines().is_empty());
}

#[test]
fn with_a_gpu_auto_and_require_monitor_it() {
    let fake = FakeBackend::new(vec![device(0)]);
    for mode in [GpuMode::Auto, GpuMode::Require] {
        let mut status = GpuMonitor::open_with(mode, || Ok(fake.boxed())).unwrap();
        assert_eq!(status.notice(), None);
        let gpus = status.monitor_mut().unwrap();
        assert_eq!(gpus.devices(), [&h100(0)]);
    }
}

/// The driver library cannot be loaded: the reason names it (a name that exists nowhere,
/// so this holds on machines with a GPU too).
#[test]
fn a_missing_driver_library_is_named() {
    let err = NvmlBackend::init_from(Some(OsStr::new("libnvidia-ml-montrace-test.so.1")))
        .err()
        .unwrap();
    let reason = err.reason();
    assert!(reason.starts_with("no NVIDIA driver library ("), "{reason}");
    assert!(
        reason.contains("libnvidia-ml-montrace-test.so.1"),
        "{reason}"
    );
}

/// On a machine without the NVIDIA driver (ours), `auto` goes on and `require` fails, both
/// naming the missing library. Where NVML starts, it must find a GPU.
#[test]
fn the_real_nvml_without_a_driver() {
    match NvmlBackend::init() {
        Err(err) => {
            let reason = err.reason().to_owned();
            if !reason.contains("driver is not loaded") {
                assert!(reason.contains("libnvidia-ml.so.1"), "{reason}");
            }
            let status = GpuMonitor::open(GpuMode::Auto).unwrap();
            if reason.starts_with(nvml::NO_DRIVER_LIBRARY) {
                // No NVIDIA driver: nothing to say on every run.
                assert_eq!(status.notice(), None);
            } else {
                assert_eq!(
                    status.notice(),
                    Some(format!("montrace: no GPU data: {reason}"))
                );
            }
            let err = GpuMonitor::open(GpuMode::Require).unwrap_err();
            assert_eq!(err, GpuError::Required { reason });
            assert_eq!(nvml_device_count(), None);
        }
        Ok(_) => eprintln!("NVML is here: the real-NVML test covers it"),
    }
}

#[test]
fn throttle_reasons_have_names() {
    use nvml_wrapper::bitmasks::device::ThrottleReasons as R;
    assert_eq!(throttle_reason_names(0), Vec::<String>::new());
    assert_eq!(throttle_reason_names(0x1 | 0x1000), ["gpu_idle", "0x1000"]);
    // Our table has NVML's bits.
    for (flag, name) in [
        (R::GPU_IDLE, "gpu_idle"),
        (
            R::APPLICATIONS_CLOCKS_SETTING,
            "applications_clocks_setting",
        ),
        (R::SW_POWER_CAP, "sw_power_cap"),
        (R::HW_SLOWDOWN, "hw_slowdown"),
        (R::SYNC_BOOST, "sync_boost"),
        (R::SW_THERMAL_SLOWDOWN, "sw_thermal_slowdown"),
        (R::HW_THERMAL_SLOWDOWN, "hw_thermal_slowdown"),
        (R::HW_POWER_BRAKE_SLOWDOWN, "hw_power_brake_slowdown"),
        (R::DISPLAY_CLOCK_SETTING, "display_clock_setting"),
    ] {
        assert_eq!(throttle_reason_names(flag.bits()), [name]);
    }
}

#[test]
fn summary_lines() {
    let fake = FakeBackend::new(vec![device(0)]);
    let mut gpus = monitor(&fake);
    gpus.sample(T0, tree(&[]));
    assert_eq!(
        gpus.summary().format_lines(),
        [
            "  GPU 0                NVIDIA H100 80GB HBM3: busy 90.0% mean, 90% max, memory 10.0 GiB max, 0.0 J",
            "  GPU memory, tree     0 B peak",
        ]
    );
}

/// The real NVML on a real GPU (`cargo xtask test` runs it where `nvidia-smi -L` lists one).
#[test]
#[ignore = "needs an NVIDIA GPU: run by cargo xtask test when NVML finds one"]
fn real_nvml_samples_a_gpu() {
    let backend = NvmlBackend::init().expect("NVML starts");
    let devices = backend.devices().expect("NVML lists the GPUs");
    assert!(!devices.is_empty(), "NVML found no GPU");
    for d in &devices {
        eprintln!(
            "GPU {}: {:?} {:?} {:?}",
            d.index, d.name, d.uuid, d.memory_total_bytes
        );
        assert!(
            d.uuid
                .as_deref()
                .is_some_and(|u| u.starts_with("GPU-") || u.starts_with("MIG-")),
            "{d:?}"
        );
        assert!(d.name.as_deref().is_some_and(|n| !n.is_empty()), "{d:?}");
    }
    let mut status = GpuMonitor::open(GpuMode::Require).expect("--gpu require works here");
    let gpus = status.monitor_mut().unwrap();
    let now = crate::host::realtime_ns();
    let me = std::process::id();
    let (rows, processes) = gpus.sample(now, |pid| (pid == me).then_some(0));
    std::thread::sleep(std::time::Duration::from_millis(200));
    let (rows2, _) = gpus.sample(now + 200_000_000, |_| None);
    assert_eq!(rows.len(), devices.len());
    for (row, later) in rows.iter().zip(&rows2) {
        eprintln!("{row:?}");
        assert_eq!(row.time_ns, now);
        let total = row.memory_total_bytes.expect("every GPU gives its memory");
        assert!(total >= 1 << 30, "{row:?}");
        let used = row
            .memory_used_bytes
            .expect("every GPU gives its memory use");
        assert!(used <= total, "{row:?}");
        if let Some(u) = row.utilization_gpu_percent {
            assert!((0.0..=100.0).contains(&u), "{row:?}");
        }
        if let Some(w) = row.power_watts {
            assert!(w > 1.0 && w < 2000.0, "{row:?}");
        }
        if let Some(t) = row.temperature_c {
            assert!(t > 0 && t < 120, "{row:?}");
        }
        if let Some(mhz) = row.sm_clock_mhz {
            assert!(mhz < 5000, "{row:?}");
        }
        assert_eq!(
            row.energy_joules.map(|e| e == 0.0),
            row.energy_joules.map(|_| true)
        );
        if let (Some(_), Some(later)) = (row.energy_joules, later.energy_joules) {
            assert!((0.0..1000.0).contains(&later), "{later:?}");
        }
    }
    // This test holds no GPU context, so it is on no GPU.
    assert!(processes.is_empty(), "{processes:?}");
    eprintln!("{}", gpus.summary().format_lines().join("\n"));
}

/// GPU_IS_LOST: the GPU gets no row from then on (the other GPUs go on), the summary says when,
/// and the tree's memory is what the GPUs still answering hold.
#[test]
fn a_lost_gpu_is_sampled_no_more() {
    let mut gpu1 = device(1);
    gpu1.processes = Some(vec![holder(7, 1 << 30)]);
    let fake = FakeBackend::new(vec![device(0), gpu1]);
    let mut gpus = monitor(&fake);
    let tracked = [(7, T0 - SEC)];
    assert_eq!(gpus.sample(T0, tree(&tracked)).0.len(), 2);
    fake.devices.lock().unwrap()[1].reading = DeviceReading {
        lost: true,
        ..Default::default()
    };
    let (rows, processes) = gpus.sample(T0 + SEC, tree(&tracked));
    assert_eq!(rows.iter().map(|r| r.gpu_index).collect::<Vec<_>>(), [0]);
    assert!(processes.is_empty());
    assert_eq!(gpus.last_tree_memory_bytes(), Some(0));
    // Even if it answered again, it stays lost.
    fake.devices.lock().unwrap()[1].reading = full_reading();
    let (rows, _) = gpus.sample(T0 + 2 * SEC, tree(&tracked));
    assert_eq!(rows.len(), 1);
    let summary = gpus.summary();
    assert_eq!(summary.devices[0].lost_time, None);
    assert_eq!(
        summary.devices[1].lost_time.as_deref(),
        Some("2023-11-14T22:13:21.000000Z")
    );
    assert_eq!(summary.devices[1].samples, 1);
    assert_eq!(summary.tree_peak_memory_bytes, Some(1 << 30));
    assert!(summary.format_lines()[1].contains("lost at 2023-11-14T22:13:21.000000Z"));
}

#[test]
fn mig_mode_is_reported_as_such() {
    let mut mig = device(0);
    mig.info.mig_mode = Some(true);
    let fake = FakeBackend::new(vec![mig, device(1)]);
    let summary = monitor(&fake).summary();
    assert_eq!(summary.devices[0].mig_mode, Some(true));
    assert_eq!(summary.devices[1].mig_mode, None);
    assert!(summary.format_lines()[0].ends_with("MIG mode"));
}

/// In a PID namespace of its own, montrace attributes nothing: the driver's pid 7 is not the
/// tree's pid 7.
#[test]
fn pids_from_another_namespace_are_never_attributed() {
    assert_eq!(pid_attribution(Some("pid:[4026531836]")), Ok(()));
    assert!(pid_attribution(Some("pid:[4026532201]"))
        .unwrap_err()
        .contains("PID namespace of its own"));
    assert!(pid_attribution(None).is_err());

    let mut gpu = device(0);
    gpu.processes = Some(vec![holder(7, 1 << 30), holder(8, 1 << 30)]);
    let fake = FakeBackend::new(vec![gpu]);
    let mut gpus = monitor(&fake);
    gpus.set_attribution(pid_attribution(Some("pid:[4026532201]")));
    let (rows, processes) = gpus.sample(T0, tree(&[(7, T0 - SEC)]));
    assert_eq!(rows.len(), 1, "the GPU itself is still read");
    assert!(processes.is_empty());
    assert_eq!(gpus.last_tree_memory_bytes(), None);
    let summary = gpus.summary();
    assert_eq!(summary.tree_peak_memory_bytes, None);
    let why = summary.attribution_unavailable.unwrap();
    assert!(why.contains("2 GPU process(es)"), "{why}");
    let status = GpuStatus::Monitoring(gpus);
    assert!(status.tree_memory_unavailable_reason().is_some());
    assert_eq!(status.unavailable_reason(), None);
    assert!(status.notice().unwrap().contains("not attributed"));
}
