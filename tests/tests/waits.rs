//! Where the time went, per process, from montrace's `sched_switch`/`sched_wakeup` programs:
//! four CPU burners started together on two cores wait for a CPU as long as they are not on one
//! (run-queue delay = wall - CPU, within 10 %), a lone burner hardly waits, and a `sleep 0.5` and
//! a `cat` blocked on an empty pipe for 0.5 s each report at least 495 ms sleeping.
use tests::{require_root, run_montrace, Proc};

fn wall_ns(p: &Proc) -> u64 {
    (p.end_time.unwrap() - p.start_time) as u64
}

fn with_argv<'a>(rows: &'a [Proc], argv: &[&str]) -> Vec<&'a Proc> {
    rows.iter()
        .filter(|p| p.argv.as_deref().is_some_and(|a| a == argv))
        .filter(|p| p.end_time.is_some())
        .collect()
}

#[test]
fn run_queue_delay_is_the_time_off_the_cpu_of_competing_burners() {
    require_root();
    let cores = std::thread::available_parallelism().unwrap().get();
    let burners = 2 * cores;
    let script = format!(
        "for i in $(seq {burners}); do timeout 1 sh -c 'while :; do :; done' & done; wait; \
         timeout 0.5 sh -c 'while :; do :; done'; true"
    );
    let run = run_montrace(&["--tracepoints", "btf"], &["sh", "-c", &script]);
    run.assert_code(0);
    let rows = run.processes();
    let burn = with_argv(&rows, &["sh", "-c", "while :; do :; done"]);
    assert_eq!(burn.len(), burners + 1, "{rows:?}");
    let (lone, together) = burn.split_last().map(|(l, t)| (*l, t)).unwrap();
    for p in together {
        let off_cpu = wall_ns(p) - p.cpu_ns();
        let waited = p
            .run_queue_ns
            .unwrap_or_else(|| panic!("no run_queue_ns: {p:?}"));
        assert!(
            (waited as f64 - off_cpu as f64).abs() <= 0.1 * off_cpu as f64,
            "waited {waited} ns for a CPU, off it {off_cpu} ns: {p:?}"
        );
        // Half the time on a CPU at most, when twice as many burners as cores compete.
        assert!(off_cpu as f64 >= 0.3 * wall_ns(p) as f64, "{p:?}");
        assert_eq!(p.blocked_ns, Some(0), "{p:?}");
    }
    let lone_wait = lone.run_queue_ns.unwrap();
    assert!(
        (lone_wait as f64) < 0.15 * wall_ns(lone) as f64,
        "a lone burner waited {lone_wait} ns: {lone:?}"
    );
}

#[test]
fn sleeping_and_waiting_on_a_pipe_count_as_sleep() {
    require_root();
    let run = run_montrace(
        &["--tracepoints", "btf"],
        &["sh", "-c", "sleep 0.5; sleep 0.5 | cat"],
    );
    run.assert_code(0);
    let rows = run.processes();
    let sleeps = with_argv(&rows, &["sleep", "0.5"]);
    let cats = with_argv(&rows, &["cat"]);
    assert_eq!((sleeps.len(), cats.len()), (2, 1), "{rows:?}");
    for p in sleeps.iter().chain(&cats) {
        let slept = p.sleep_ns.unwrap_or_else(|| panic!("no sleep_ns: {p:?}"));
        assert!(slept >= 495_000_000, "{slept} ns asleep: {p:?}");
        // On a CPU, waiting for one, blocked and asleep: the whole of its wall time.
        let sum = p.cpu_ns() + p.run_queue_ns.unwrap() + p.blocked_ns.unwrap() + slept;
        let wall = wall_ns(p);
        assert!(
            (sum as f64 - wall as f64).abs() <= 0.02 * wall as f64 + 2e6,
            "parts {sum} ns, wall {wall} ns: {p:?}"
        );
    }
    // The shell waited for its children: asleep most of the time.
    let shell = run.root(&rows);
    assert!(shell.sleep_ns.unwrap() >= 990_000_000, "{shell:?}");
}

#[test]
fn classic_tracepoints_leave_the_waits_unknown() {
    require_root();
    let run = run_montrace(&["--tracepoints", "classic"], &["sleep", "0.1"]);
    run.assert_code(0);
    for p in run.processes() {
        assert_eq!(
            (p.run_queue_ns, p.blocked_ns, p.sleep_ns),
            (None, None, None)
        );
    }
}
