//! The tree's memory counts each memory image once: a 350 MiB Python that runs `/bin/true`
//! through `subprocess` (a vfork child shares its address space until its exec) or that forks a
//! child which only sleeps (the child shares its pages until it writes) is one 350 MiB image,
//! not two. `--limit rss=500MiB` must not stop it, and the tree's peak in run.json must agree
//! with the run cgroup's own peak.
use std::collections::BTreeMap;

use tests::{launch_montrace, Run, MIB};

/// 350 MiB, written (so resident), then 200 `/bin/true` through subprocess (vfork + exec).
const SUBPROCESS: &str = r#"
import subprocess
held = b"\x01" * (350 << 20)
for _ in range(200):
    subprocess.run(["/bin/true"], check=True)
print(len(held))
"#;

/// 350 MiB, written, then a forked child that sleeps 1 s without writing anything.
const FORK: &str = r#"
import os, time
held = b"\x01" * (350 << 20)
pid = os.fork()
if pid == 0:
    time.sleep(1.0)
    os._exit(0)
_, status = os.waitpid(pid, 0)
assert status == 0, status
print(len(held))
"#;

fn run_python(script: &str) -> Run {
    let run = launch_montrace(
        &["--interval", "10ms", "--limit", "rss=500MiB"],
        &["python3", "-c", script],
    )
    .run();
    run.assert_code(0);
    run
}

/// The tree's peak (run.json) against the run cgroup's own (the kernel's), which the test reads
/// from run.json's cgroup totals: within 5 %, and from the run cgroup.
fn assert_peak_matches_the_cgroup(run: &Run) {
    let json = run.run_json();
    assert!(json["limit_breach"].is_null(), "{json}");
    let cgroup = &json["cgroup"];
    assert!(
        cgroup["version"].is_string() && cgroup["error"].is_null(),
        "these tests run as root, where montrace makes a run cgroup: {cgroup}"
    );
    let kernel_peak = cgroup["totals"]["memory_peak_bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("the run cgroup's peak: {cgroup}"));
    let peaks = &json["tree_memory_peaks"];
    assert_eq!(peaks["source"], "cgroup", "{peaks}");
    let tree_peak = peaks["rss_bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("the tree's peak: {peaks}"));
    eprintln!(
        "tree peak {} MiB, cgroup peak {} MiB",
        tree_peak / MIB,
        kernel_peak / MIB
    );
    assert!(tree_peak >= 350 * MIB, "{tree_peak} < 350 MiB: {peaks}");
    let off = (tree_peak as f64 - kernel_peak as f64).abs() / kernel_peak as f64;
    assert!(
        off <= 0.05,
        "tree peak {tree_peak} vs the cgroup's {kernel_peak}: {:.1} % apart",
        off * 100.0
    );
    // USS and PSS are summed over address spaces: the image counts once there too.
    for figure in ["uss_bytes", "pss_bytes"] {
        let value = peaks[figure].as_u64().unwrap_or(0);
        assert!(
            value as f64 <= kernel_peak as f64 * 1.05,
            "{figure} {value} against the cgroup's {kernel_peak}: {peaks}"
        );
    }
    let summary = run.summary_json();
    let metric = &summary["repetitions"][0]["metrics"]["peak_tree_rss_bytes"];
    assert_eq!(metric.as_f64(), Some(tree_peak as f64), "{summary}");
}

/// The largest sum of RSS over the processes of one sweep (what the tree's figure was before
/// it counted each address space once), and how many sweeps had two processes over 300 MiB.
fn naive_sums(run: &Run) -> (u64, usize) {
    let mut sweeps: BTreeMap<i64, Vec<u64>> = BTreeMap::new();
    for s in run.samples().iter().filter(|s| s.source != "exit") {
        sweeps
            .entry(s.time)
            .or_default()
            .push(s.rss_bytes.unwrap_or(0));
    }
    let largest = sweeps.values().map(|v| v.iter().sum()).max().unwrap_or(0);
    let doubled = sweeps
        .values()
        .filter(|v| v.iter().filter(|&&rss| rss > 300 * MIB).count() >= 2)
        .count();
    (largest, doubled)
}

#[test]
fn subprocess_from_a_350_mib_python_is_not_counted_twice() {
    let run = run_python(SUBPROCESS);
    assert_eq!(run.stdout.trim(), (350 * MIB).to_string(), "{run:?}");
    let processes = run.processes();
    assert_eq!(
        processes
            .iter()
            .filter(|p| p.has_filename("/bin/true"))
            .count(),
        200,
        "{run:?}"
    );
    let (largest, doubled) = naive_sums(&run);
    eprintln!(
        "{doubled} sweeps caught a child before its exec; largest plain sum {} MiB",
        largest / MIB
    );
    assert_peak_matches_the_cgroup(&run);
}

#[test]
fn a_forked_child_that_only_sleeps_is_not_counted_twice() {
    let run = run_python(FORK);
    assert_eq!(run.stdout.trim(), (350 * MIB).to_string(), "{run:?}");
    let (largest, doubled) = naive_sums(&run);
    // The child was sampled beside its parent, each showing the shared 350 MiB: a plain sum
    // of RSS would have crossed the limit.
    assert!(
        doubled >= 10 && largest > 500 * MIB,
        "{doubled} sweeps with both, largest plain sum {largest}"
    );
    assert_peak_matches_the_cgroup(&run);
}

/// Without a run cgroup (`attach` moves nothing into one), the tree's figure is PSS summed over
/// its address spaces: a forked child's shared pages are split with its parent, not doubled.
const FORK_WHEN_READY: &str = r#"
import os, sys, time
held = b"\x01" * (350 << 20)
open(sys.argv[1], "w").close()
time.sleep(3.0)  # montrace attaches meanwhile
pid = os.fork()
if pid == 0:
    time.sleep(1.5)
    os._exit(0)
_, status = os.waitpid(pid, 0)
assert status == 0, status
time.sleep(0.3)
"#;

#[test]
fn without_a_run_cgroup_a_forked_child_is_counted_by_pss() {
    tests::require_root();
    let work = tempfile::tempdir().unwrap();
    let ready = work.path().join("ready");
    let mut python = std::process::Command::new("python3")
        .args(["-c", FORK_WHEN_READY])
        .arg(&ready)
        .spawn()
        .unwrap();
    tests::wait_for_file(&ready);
    let run = tests::attach_montrace(
        python.id(),
        &["--interval", "10ms", "--limit", "rss=500MiB", "-q"],
    );
    let status = python.wait().unwrap();
    run.assert_code(0);
    assert!(status.success(), "{status:?}");
    let json = run.run_json();
    assert!(json["limit_breach"].is_null(), "{json}");
    assert!(json["cgroup"]["version"].is_null(), "{json}");
    let peaks = &json["tree_memory_peaks"];
    assert_eq!(peaks["source"], "pss", "{peaks}");
    let (largest, doubled) = naive_sums(&run);
    assert!(
        doubled >= 10 && largest > 600 * MIB,
        "the child was sampled beside its parent: {doubled} sweeps, largest plain sum {largest}"
    );
    let peak = peaks["rss_bytes"].as_u64().unwrap();
    eprintln!(
        "tree peak (PSS) {} MiB; plain RSS sum {} MiB",
        peak / MIB,
        largest / MIB
    );
    assert!(
        (350 * MIB..=400 * MIB).contains(&peak),
        "the tree holds one 350 MiB image: {peaks}"
    );
}
