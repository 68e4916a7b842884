//! The real GPUs, through NVML (libnvidia-ml.so.1, loaded at run time).
use super::*;

/// How the reason starts on a machine without the NVIDIA driver library: a machine without
/// NVIDIA GPUs, where `--gpu auto` stays silent (run.json and `montrace doctor` say why).
pub const NO_DRIVER_LIBRARY: &str = "no NVIDIA driver library";

/// The real GPUs, through NVML.
pub struct NvmlBackend {
    nvml: Nvml,
}

impl NvmlBackend {
    /// Loads libnvidia-ml.so.1 and starts NVML.
    pub fn init() -> Result<NvmlBackend, GpuError> {
        Self::init_from(None)
    }

    /// `lib`: the driver library to load instead of the default.
    pub(super) fn init_from(lib: Option<&OsStr>) -> Result<NvmlBackend, GpuError> {
        if STATIC_BUILD {
            return Err(GpuError::Unavailable {
                reason: static_build_reason(std::path::Path::new("/proc/driver/nvidia").exists()),
            });
        }
        let mut builder = Nvml::builder();
        if let Some(lib) = lib {
            builder.lib_path(lib);
        }
        builder
            .init()
            .map(|nvml| NvmlBackend { nvml })
            .map_err(|err| GpuError::Unavailable {
                reason: init_failure(&err),
            })
    }

    fn device(&self, index: u32) -> Option<nvml_wrapper::Device<'_>> {
        self.nvml.device_by_index(index).ok()
    }
}

/// Where NVIDIA's kernel driver shows itself: its /proc directory (the host's, and a
/// container's that the NVIDIA container toolkit set up), its control device, and the GPU
/// device of WSL 2, whose driver library talks to the Windows driver through it. NVML starts
/// nowhere without one of them.
const DRIVER_SIGNS: [&str; 3] = ["/proc/driver/nvidia", "/dev/nvidiactl", "/dev/dxg"];

/// The driver library's name, as NVML is loaded.
const DRIVER_LIBRARY: &str = "libnvidia-ml.so.1";

/// Why `--gpu auto` does not load NVML here: no sign of NVIDIA's driver ([`DRIVER_SIGNS`]) and no
/// driver library on `LD_LIBRARY_PATH` (one put there is loaded as today: a container's, or the
/// tests' stand-in for the driver). None where NVML is to be loaded. On a machine without
/// NVIDIA GPUs, loading NVML on its thread only to fail (the library looked for in every
/// directory the loader knows) cost a user's `/bin/true` run through the agent 0.24 ms of wall
/// and 0.15 ms of start-up (100 interleaved runs on the 2-core test machine); these few checks
/// cost a few system calls.
pub fn driver_absent() -> Option<String> {
    driver_absent_from(
        |sign| std::path::Path::new(sign).exists(),
        std::env::var_os("LD_LIBRARY_PATH").as_deref(),
    )
}

/// [`driver_absent`], with `exists` telling which of [`DRIVER_SIGNS`] exist, and
/// `LD_LIBRARY_PATH`'s value.
fn driver_absent_from(
    exists: impl Fn(&str) -> bool,
    ld_library_path: Option<&OsStr>,
) -> Option<String> {
    let shown = DRIVER_SIGNS.iter().any(|sign| exists(sign));
    let on_path = ld_library_path.is_some_and(|dirs| {
        std::env::split_paths(dirs)
            .filter(|dir| !dir.as_os_str().is_empty())
            .any(|dir| dir.join(DRIVER_LIBRARY).exists())
    });
    (!shown && !on_path).then(|| {
        format!(
            "{NO_DRIVER_LIBRARY} loaded: this machine shows no NVIDIA driver (none of {})",
            DRIVER_SIGNS.join(", ")
        )
    })
}

/// The static (musl) build of `cargo xtask dist`: a static program cannot `dlopen`, so NVML's
/// library cannot be loaded.
const STATIC_BUILD: bool = cfg!(target_feature = "crt-static");

/// Why the static build has no GPU figures: loud where an NVIDIA driver is loaded, the usual
/// silence of a machine without one otherwise.
fn static_build_reason(driver_loaded: bool) -> String {
    if driver_loaded {
        "this montrace is the static build, which cannot load the NVIDIA driver library \
         (libnvidia-ml.so.1: a static program has no dlopen); for GPU figures use the wheel's \
         montrace or a build from source"
            .to_string()
    } else {
        format!("{NO_DRIVER_LIBRARY} (and this static build of montrace could not load one)")
    }
}

/// How many GPUs NVML finds here; None where NVML does not start (no driver). For tests that
/// need a real GPU.
pub fn nvml_device_count() -> Option<u32> {
    NvmlBackend::init().ok()?.nvml.device_count().ok()
}

/// Why NVML did not start, for people.
fn init_failure(err: &NvmlError) -> String {
    match err {
        NvmlError::LibloadingError(err) => format!("{NO_DRIVER_LIBRARY} ({err})"),
        NvmlError::DriverNotLoaded => {
            "the NVIDIA driver library is installed but the driver is not loaded".into()
        }
        NvmlError::NoPermission => "no permission to talk to the NVIDIA driver".into(),
        NvmlError::FailedToLoadSymbol(err) => {
            format!("the NVIDIA driver library is too old for montrace ({err})")
        }
        err => format!("NVML failed to start: {err}"),
    }
}

/// The value, or None; sets `lost` when the driver said the GPU is lost.
fn lost_or<T>(lost: &mut bool, result: Result<T, NvmlError>) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(NvmlError::GpuLost) => {
            *lost = true;
            None
        }
        Err(_) => None,
    }
}

fn used_memory(memory: UsedGpuMemory) -> Option<u64> {
    match memory {
        UsedGpuMemory::Used(bytes) => Some(bytes),
        UsedGpuMemory::Unavailable => None,
    }
}

impl GpuBackend for NvmlBackend {
    fn devices(&self) -> Result<Vec<GpuDevice>, GpuError> {
        let count = self
            .nvml
            .device_count()
            .map_err(|err| GpuError::Unavailable {
                reason: format!("NVML cannot count the GPUs: {err}"),
            })?;
        let mut devices = Vec::new();
        let mut failures = Vec::new();
        for index in 0..count {
            match self.nvml.device_by_index(index) {
                Ok(device) => devices.push(GpuDevice {
                    index,
                    uuid: device.uuid().ok(),
                    name: device.name().ok(),
                    memory_total_bytes: device.memory_info().ok().map(|m| m.total),
                    // NOT_SUPPORTED on a GPU without MIG.
                    mig_mode: device.mig_mode().ok().map(|m| m.current == 1),
                }),
                // A GPU this process may not open (a container's device cgroup) is left out.
                Err(err) => failures.push(format!("GPU {index}: {err}")),
            }
        }
        if devices.is_empty() && !failures.is_empty() {
            return Err(GpuError::Unavailable {
                reason: format!("NVML cannot open any GPU ({})", failures.join("; ")),
            });
        }
        Ok(devices)
    }

    fn reading(&self, index: u32) -> DeviceReading {
        let device = match self.nvml.device_by_index(index) {
            Ok(device) => device,
            Err(err) => {
                return DeviceReading {
                    lost: matches!(err, NvmlError::GpuLost),
                    ..DeviceReading::default()
                }
            }
        };
        let mut lost = false;
        // Each figure: None when the GPU does not give it; GPU_IS_LOST noted.
        let utilization = lost_or(&mut lost, device.utilization_rates());
        let memory = lost_or(&mut lost, device.memory_info());
        let power_mw = lost_or(&mut lost, device.power_usage());
        let energy_mj = lost_or(&mut lost, device.total_energy_consumption());
        let temperature_c = lost_or(&mut lost, device.temperature(TemperatureSensor::Gpu));
        let sm_clock_mhz = lost_or(&mut lost, device.clock_info(Clock::SM));
        let memory_clock_mhz = lost_or(&mut lost, device.clock_info(Clock::Memory));
        let throttle_reasons =
            lost_or(&mut lost, device.current_throttle_reasons()).map(|r| r.bits());
        DeviceReading {
            utilization_gpu_percent: utilization.as_ref().map(|u| u.gpu),
            utilization_memory_percent: utilization.as_ref().map(|u| u.memory),
            memory_used_bytes: memory.as_ref().map(|m| m.used),
            memory_total_bytes: memory.as_ref().map(|m| m.total),
            power_mw,
            energy_mj,
            temperature_c,
            sm_clock_mhz,
            memory_clock_mhz,
            throttle_reasons,
            lost,
        }
    }

    fn processes(&self, index: u32) -> Option<Vec<GpuProcess>> {
        let device = self.device(index)?;
        // A driver older than R510 has no _v3 lists: its _v2 ones give the same.
        let compute = match device.running_compute_processes() {
            Err(NvmlError::FailedToLoadSymbol(_)) => device.running_compute_processes_v2(),
            listed => listed,
        };
        let graphics = match device.running_graphics_processes() {
            Err(NvmlError::FailedToLoadSymbol(_)) => device.running_graphics_processes_v2(),
            listed => listed,
        };
        if compute.is_err() && graphics.is_err() {
            return None;
        }
        let listed: Vec<ProcessInfo> = compute
            .unwrap_or_default()
            .into_iter()
            .chain(graphics.unwrap_or_default())
            .collect();
        Some(merge_processes(listed.into_iter().map(|p| GpuProcess {
            pid: p.pid,
            used_memory_bytes: used_memory(p.used_gpu_memory),
        })))
    }

    fn process_utilization(
        &self,
        index: u32,
        since_us: Option<u64>,
    ) -> Option<Vec<ProcessUtilization>> {
        let device = self.device(index)?;
        match device.process_utilization_stats(since_us) {
            Ok(samples) => Some(
                samples
                    .into_iter()
                    .map(|s| ProcessUtilization {
                        pid: s.pid,
                        timestamp_us: s.timestamp,
                        sm_percent: s.sm_util,
                        memory_percent: s.mem_util,
                    })
                    .collect(),
            ),
            // The driver says NOT_FOUND when it took no sample since `since_us`.
            Err(NvmlError::NotFound) => Some(Vec::new()),
            Err(_) => None,
        }
    }

    fn accounting_enabled(&self, index: u32) -> bool {
        self.device(index)
            .and_then(|d| d.is_accounting_enabled().ok())
            .unwrap_or(false)
    }

    fn accounting_pids(&self, index: u32) -> Option<Vec<u32>> {
        self.device(index)?.accounting_pids().ok()
    }

    fn accounting_stats(&self, index: u32, pid: u32) -> Option<AccountingReading> {
        let stats = self.device(index)?.accounting_stats_for(pid).ok()?;
        Some(AccountingReading {
            gpu_utilization_percent: stats.gpu_utilization,
            memory_utilization_percent: stats.memory_utilization,
            max_memory_bytes: stats.max_memory_usage,
            start_time_us: stats.start_time,
            time_ms: stats.time,
            is_running: stats.is_running,
        })
    }
}

/// One entry per pid: a process with both a compute and a graphics context is listed twice,
/// with the same memory.
pub(super) fn merge_processes(listed: impl Iterator<Item = GpuProcess>) -> Vec<GpuProcess> {
    let mut merged: Vec<GpuProcess> = Vec::new();
    for process in listed {
        match merged.iter_mut().find(|p| p.pid == process.pid) {
            Some(seen) => {
                seen.used_memory_bytes = seen.used_memory_bytes.max(process.used_memory_bytes)
            }
            None => merged.push(process),
        }
    }
    merged
}

/// The `nvmlClocksThrottleReason*` bits (nvml.h) and the names montrace writes for them.
const THROTTLE_REASONS: &[(u64, &str)] = &[
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// The names of the reasons set in `bits`, in bit order; bits montrace does not know come last,
/// as one hexadecimal number (`0x1000`). Empty when nothing holds the clocks down.
pub fn throttle_reason_names(bits: u64) -> Vec<String> {
    let mut names: Vec<String> = THROTTLE_REASONS
        .iter()
        .filter(|(bit, _)| bits & bit != 0)
        .map(|(_, name)| (*name).to_owned())
        .collect();
    let known = THROTTLE_REASONS.iter().fold(0, |all, (bit, _)| all | bit);
    if bits & !known != 0 {
        names.push(format!("{:#x}", bits & !known));
    }
    names
}

#[cfg(test)]
mod static_tests {
    use super::*;

    #[test]
    fn auto_looks_for_the_driver_and_a_library_on_ld_library_path_before_loading_nvml() {
        let none = |_: &str| false;
        let reason = driver_absent_from(none, None).unwrap();
        // Silent, as any machine without NVIDIA's driver library.
        assert!(reason.starts_with(NO_DRIVER_LIBRARY), "{reason}");
        assert!(reason.contains("/dev/nvidiactl"), "{reason}");
        for sign in DRIVER_SIGNS {
            assert_eq!(driver_absent_from(|s| s == sign, None), None, "{sign}");
        }
        // A driver library on LD_LIBRARY_PATH (the tests' stand-in's) is loaded; directories
        // without one (cargo's own, for one) change nothing.
        let empty = tempfile::tempdir().unwrap();
        let with = tempfile::tempdir().unwrap();
        std::fs::write(with.path().join(DRIVER_LIBRARY), b"").unwrap();
        let path = |dirs: &[&std::path::Path]| std::env::join_paths(dirs).unwrap();
        assert!(driver_absent_from(none, Some(&path(&[empty.path()]))).is_some());
        assert!(driver_absent_from(none, Some(OsStr::new(""))).is_some());
        assert_eq!(
            driver_absent_from(none, Some(&path(&[empty.path(), with.path()]))),
            None
        );
    }

    #[test]
    fn the_static_build_is_silent_without_a_driver_and_says_why_with_one() {
        // `--gpu auto` stays silent on reasons that start so (a machine without NVIDIA GPUs).
        assert!(static_build_reason(false).starts_with(NO_DRIVER_LIBRARY));
        let loud = static_build_reason(true);
        assert!(!loud.starts_with(NO_DRIVER_LIBRARY));
        assert!(
            loud.contains("static build") && loud.contains("wheel"),
            "{loud}"
        );
    }
}
