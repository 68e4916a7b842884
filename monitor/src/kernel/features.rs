//! What this kernel gave montrace, feature by feature: the table `montrace doctor` prints and
//! run.json records (`features`), so that a run on an older kernel says what it could not measure
//! instead of leaving a reader to guess why a column is null.
//!
//! The facts come from the load (`ebpf::Probes::load` notes them in [`LOADED`]: which
//! tracepoints, whether the socket programs and the task iterator loaded, where exit peaks come
//! from) and from the run (its cgroup, pressure files); [`table`] turns them into rows (pure).

use crate::kernel::ebpf::TrackingMode;
pub use crate::store::model::Feature;

/// The features, in the table's order, with what each one is.
pub const NAMES: [(&str, &str); 7] = [
    ("tree", "every process of the tree, however short"),
    (
        "exit_figures",
        "each process's CPU, peak memory, faults and I/O at its exit",
    ),
    ("waits", "run-queue, blocked and sleep time per process"),
    (
        "socket_bytes",
        "bytes sent and received through sockets per process",
    ),
    (
        "task_iterator",
        "the sweeps read the tree's tasks in binary, not /proc's text",
    ),
    (
        "psi",
        "pressure stall totals (/proc/pressure, the run cgroup's own)",
    ),
    ("run_cgroup", "the kernel's totals for the whole tree"),
];

/// Where a process's peak resident memory at exit comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitPeak {
    /// Its own address space, still there at the exit tracepoint (Linux 6.16 and later).
    AddressSpace,
    /// `signal->maxrss` (getrusage's figure): the exit tracepoint fires after the address space
    /// is gone (before Linux 6.16); it counts the images run before the last exec too.
    MaxRss,
}

/// What a load of the eBPF programs got (see [`LOADED`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loaded {
    pub mode: TrackingMode,
    /// Why socket bytes are not counted, when they are not.
    pub net: Option<String>,
    /// The task iterator: None until known (it loads beside the command's start).
    pub task_iter: Option<Result<(), String>>,
    pub exit_peak: ExitPeak,
}

/// The last load of this process (a `run`, an `attach` or `doctor` loads once).
pub static LOADED: std::sync::Mutex<Option<Loaded>> = std::sync::Mutex::new(None);

/// Notes what a load got.
pub fn note_load(loaded: Loaded) {
    if let Ok(mut slot) = LOADED.lock() {
        *slot = Some(loaded);
    }
}

/// Notes whether the task iterator loaded.
pub fn note_task_iter(result: Result<(), String>) {
    if let Ok(mut slot) = LOADED.lock() {
        if let Some(loaded) = slot.as_mut() {
            loaded.task_iter = Some(result);
        }
    }
}

/// What the load got, if there was one.
pub fn loaded() -> Option<Loaded> {
    LOADED.lock().ok().and_then(|slot| slot.clone())
}

/// What the run's setting gave, beside the load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setting {
    /// The eBPF load, or why there was none (polling).
    pub load: Result<Loaded, String>,
    /// The run cgroup ("v2 at /sys/fs/cgroup/...") or why not.
    pub cgroup: Result<String, String>,
    /// Whether /proc/pressure exists and is readable, and whether the run cgroup is v2 (its
    /// own pressure files).
    pub psi: Result<(), String>,
    pub cgroup_v2: bool,
}

/// A load's error in a line: a verifier's log is cut to its cause (its last message).
pub fn brief(why: &str) -> String {
    let Some((head, log)) = why.split_once("Verifier output:") else {
        return why.to_owned();
    };
    let cause = log
        .lines()
        .map(str::trim)
        .rfind(|l| {
            !l.is_empty()
                && !l.starts_with(':')
                && !l.starts_with("verification time")
                && !l.starts_with("stack depth")
                && !l.starts_with("processed ")
        })
        .unwrap_or("");
    format!("{} the verifier says: {cause}", head.trim_end())
}

/// The table (pure).
pub fn table(s: &Setting) -> Vec<Feature> {
    let row = |name: &str, result: Result<String, String>| {
        let (available, detail) = match result {
            Ok(detail) => (true, detail),
            Err(why) => (false, why),
        };
        Feature {
            name: name.to_owned(),
            available,
            detail,
        }
    };
    let polling = |what: &str| match &s.load {
        Ok(_) => unreachable!("only called without a load"),
        Err(why) => Err(format!("{what}: no eBPF ({why})")),
    };
    let mut rows = Vec::new();
    match &s.load {
        Ok(l) => {
            let mode = l.mode.described();
            rows.push(row(
                "tree",
                Ok(format!("eBPF ({mode}): every fork, exec and exit")),
            ));
            rows.push(row(
                "exit_figures",
                Ok(match l.exit_peak {
                    ExitPeak::AddressSpace => {
                        "read at each exit; the peak is the process's own address space's".into()
                    }
                    ExitPeak::MaxRss => "read at each exit; the peak is the kernel's maxrss (as \
                                         getrusage reports it: it counts the images run before \
                                         the last exec too), as this kernel frees the address \
                                         space before the exit tracepoint"
                        .into(),
                }),
            ));
            rows.push(row(
                "waits",
                match l.mode {
                    TrackingMode::TpBtf => Ok("from sched_switch and sched_wakeup".into()),
                    _ => Err("the classic tracepoints have no task pointers: null".into()),
                },
            ));
            rows.push(row(
                "socket_bytes",
                match &l.net {
                    None => Ok("from sock_send_length and sock_recv_length".into()),
                    Some(why) => Err(format!(
                        "not available on this kernel: {}: null",
                        brief(why)
                    )),
                },
            ));
            rows.push(row(
                "task_iterator",
                match &l.task_iter {
                    Some(Ok(())) => Ok("iter/task".into()),
                    Some(Err(why)) => Err(format!("{}: the sweeps read /proc", brief(why))),
                    None => Err("not loaded: the sweeps read /proc".into()),
                },
            ));
        }
        Err(_) => {
            rows.push(row(
                "tree",
                polling("polling /proc: processes shorter than the interval may be missed"),
            ));
            rows.push(row(
                "exit_figures",
                polling("the last figures /proc showed before the process was reaped"),
            ));
            rows.push(row("waits", polling("null")));
            rows.push(row("socket_bytes", polling("null")));
            rows.push(row("task_iterator", polling("the sweeps read /proc")));
        }
    }
    rows.push(row(
        "psi",
        match (&s.psi, s.cgroup_v2) {
            (Ok(()), true) => Ok("/proc/pressure and the run cgroup's own".into()),
            (Ok(()), false) => Ok("/proc/pressure (the machine's; no v2 run cgroup)".into()),
            (Err(why), _) => Err(why.clone()),
        },
    ));
    rows.push(row("run_cgroup", s.cgroup.clone()));
    rows
}

/// Whether the kernel's pressure stall information can be read here.
pub fn psi_readable() -> Result<(), String> {
    match crate::host::read_small_file("/proc/pressure/cpu") {
        Ok(_) => Ok(()),
        Err(e) => Err(format!(
            "/proc/pressure/cpu: {e} (a kernel without CONFIG_PSI, or booted without psi=1): null"
        )),
    }
}

/// The table of a run that ended (run.json): its mode, what its load noted, its cgroup.
pub fn of_run(mode: TrackingMode, cgroup: &crate::store::run_json::CgroupReport) -> Vec<Feature> {
    let load = match (mode, loaded()) {
        (TrackingMode::Polling, _) => Err("this run polled /proc".to_string()),
        (_, Some(loaded)) => Ok(loaded),
        (mode, None) => Ok(Loaded {
            mode,
            net: Some("not noted by the load".into()),
            task_iter: None,
            exit_peak: ExitPeak::AddressSpace,
        }),
    };
    let run_cgroup = match (&cgroup.version, &cgroup.path) {
        (Some(version), Some(path)) => Ok(format!("{version:?} at {path}")),
        _ => Err(cgroup
            .error
            .clone()
            .unwrap_or_else(|| "no run cgroup".into())),
    };
    table(&Setting {
        load,
        cgroup: run_cgroup,
        psi: psi_readable(),
        cgroup_v2: cgroup.version == Some(crate::store::model::CgroupVersion::V2),
    })
}

/// The table's text, one line a feature (doctor, the tier's log).
pub fn render(rows: &[Feature]) -> String {
    rows.iter()
        .map(|f| {
            format!(
                "{:<14} {:<3} {}\n",
                f.name,
                if f.available { "yes" } else { "no" },
                f.detail
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting(load: Result<Loaded, String>) -> Setting {
        Setting {
            load,
            cgroup: Ok("v2 at /sys/fs/cgroup/montrace/x".into()),
            psi: Ok(()),
            cgroup_v2: true,
        }
    }

    #[test]
    fn every_feature_has_a_row_in_order() {
        for load in [
            Err("no privilege".to_string()),
            Ok(Loaded {
                mode: TrackingMode::TpBtf,
                net: None,
                task_iter: Some(Ok(())),
                exit_peak: ExitPeak::AddressSpace,
            }),
        ] {
            let rows = table(&setting(load));
            let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
            let expected: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
            assert_eq!(names, expected);
        }
    }

    #[test]
    fn an_old_kernel_says_what_it_lacks() {
        let rows = table(&setting(Ok(Loaded {
            mode: TrackingMode::TpBtf,
            net: Some("tp_btf/sock_send_length: unknown tracepoint".into()),
            task_iter: Some(Ok(())),
            exit_peak: ExitPeak::MaxRss,
        })));
        let get = |name: &str| rows.iter().find(|r| r.name == name).unwrap();
        assert!(get("tree").available && get("waits").available);
        let net = get("socket_bytes");
        assert!(!net.available);
        assert!(
            net.detail.contains("not available on this kernel"),
            "{net:?}"
        );
        assert!(get("exit_figures").detail.contains("maxrss"));
        let text = render(&rows);
        assert!(text.contains("socket_bytes   no  not available"), "{text}");
    }

    #[test]
    fn a_verifiers_log_is_cut_to_its_cause() {
        let why = "loading iter/task: the BPF_PROG_LOAD syscall returned Invalid argument (os \
                   error 22). Verifier output: reg type unsupported\n0: R1=ctx()\n76: (79) r9 = \
                   *(u64 *)(r4 +0)\nType 'atomic_long_t' is not a struct\nverification time 8107 \
                   usec\nstack depth 344+0\nprocessed 73 insns\n: Invalid argument (os error 22)";
        assert_eq!(
            brief(why),
            "loading iter/task: the BPF_PROG_LOAD syscall returned Invalid argument (os error \
             22). the verifier says: Type 'atomic_long_t' is not a struct"
        );
        assert_eq!(brief("one line"), "one line");
    }

    #[test]
    fn classic_tracepoints_and_polling_name_what_is_null() {
        let rows = table(&setting(Ok(Loaded {
            mode: TrackingMode::Tracepoint,
            net: Some("the classic tracepoints do not count them".into()),
            task_iter: Some(Err(
                "the task iterator needs the BTF tracepoints' kernel".into()
            )),
            exit_peak: ExitPeak::AddressSpace,
        })));
        let waits = rows.iter().find(|r| r.name == "waits").unwrap();
        assert!(!waits.available && waits.detail.contains("null"));
        let rows = table(&setting(Err("no privilege".into())));
        assert!(rows[..5].iter().all(|r| !r.available), "{rows:?}");
        assert!(rows[0].detail.contains("no privilege"));
    }
}
