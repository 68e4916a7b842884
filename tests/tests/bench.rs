//! CI gates that do not cry wolf: `--prepare` makes every repetition do the work, the too-fast
//! warning fires without it (and `bench` refuses the no-op), identical runs never fail in any
//! format, `export --format bmf` gives one run's figures, docs/ci.md's recipe runs as written
//! (`montrace bench` over two git checkouts) and catches a candidate that builds three times as
//! much with only the verdict on stdout and each side's commit recorded, failing commands and
//! hooks have exit codes of their own, and the gate's rates: at most 1 of 20 A/A comparisons
//! (10 of a small C build with `--prepare 'make clean'`, 10 of a pair of CPU burners, a noisy
//! neighbour during half) fails, +10 % CPU and +20 % peak memory are caught (inconclusive only
//! where the budget ended, never a pass).
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use tests::{
    git, montrace_bin, read_json, require_root, run_with_timeout, write_c_project as write_project,
    Finished, TIMEOUT,
};

fn montrace(cwd: &Path, args: &[&str]) -> Finished {
    let mut cmd = Command::new(montrace_bin());
    cmd.current_dir(cwd).args(args);
    run_with_timeout(&mut cmd, TIMEOUT)
}

fn processes_per_repetition(summary: &serde_json::Value) -> Vec<f64> {
    summary["repetitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["metrics"]["processes"].as_f64().unwrap())
        .collect()
}

#[test]
fn prepare_makes_every_repetition_a_full_build_and_without_it_the_warning_fires() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("p");
    write_project(&project, 3);
    let dir = project.display().to_string();

    let prepared = tmp.path().join("prepared");
    let run = montrace(
        tmp.path(),
        &[
            "run",
            "--no-report",
            "-q",
            "--repeat",
            "3",
            "--warmup",
            "1",
            "--prepare",
            &format!("make -C {dir} clean >/dev/null"),
            "--out",
            prepared.to_str().unwrap(),
            "--",
            "make",
            "-C",
            &dir,
        ],
    );
    assert_eq!(run.code(), 0, "{run:?}");
    let summary = read_json(&prepared.join("summary.json")).unwrap();
    let procs = processes_per_repetition(&summary);
    // make, then per file: cc, cc1, as (at least 3 processes for each of the 3 files).
    assert_eq!(procs.len(), 3, "{summary}");
    assert!(
        procs.iter().all(|&p| p == procs[0] && p >= 10.0),
        "{procs:?}"
    );
    // (A busy machine may be warned about; a no-op may not.)
    assert!(
        !summary
            .to_string()
            .contains("warm-up probably did the work"),
        "{summary}"
    );
    assert!(
        !run.stderr.contains("warm-up probably did the work"),
        "{run:?}"
    );

    // Without it, the warm-up builds and the repetitions find nothing to do.
    let clean = Command::new("make")
        .args(["-C", &dir, "clean"])
        .output()
        .unwrap();
    assert!(clean.status.success());
    let run = montrace(
        tmp.path(),
        &[
            "run",
            "--no-report",
            "-q",
            "--repeat",
            "3",
            "--warmup",
            "1",
            "--out",
            tmp.path().join("noop").to_str().unwrap(),
            "--",
            "make",
            "-C",
            &dir,
        ],
    );
    assert_eq!(run.code(), 0, "{run:?}");
    let summary = read_json(&tmp.path().join("noop/summary.json")).unwrap();
    let warnings = summary["warnings"]
        .as_array()
        .expect("warnings in summary.json");
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains("--prepare 'make clean'")),
        "{summary}"
    );
    assert!(
        run.stderr.contains("warm-up probably did the work"),
        "{run:?}"
    );
    // A failing prepare ends the series with its status.
    let run = montrace(
        tmp.path(),
        &[
            "run",
            "--no-report",
            "-q",
            "--repeat",
            "3",
            "--prepare",
            "exit 7",
            "--out",
            tmp.path().join("failed").to_str().unwrap(),
            "--",
            "true",
        ],
    );
    assert_eq!(run.code(), 7, "{run:?}");
    assert!(run.stderr.contains("--prepare `exit 7` failed"), "{run:?}");
}

#[test]
fn identical_runs_pass_in_every_format_and_bmf_gives_one_runs_figures() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let run_dir = tmp.path().join("base");
    let run = montrace(
        tmp.path(),
        &[
            "run",
            "--no-report",
            "-q",
            "--repeat",
            "3",
            "--out",
            run_dir.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done",
        ],
    );
    assert_eq!(run.code(), 0, "{run:?}");
    let base = run_dir.to_str().unwrap();
    // The run against itself: one sample, not two, whose every difference is exactly 0 — a
    // pass however noisy its 3 repetitions were (as two independent samples, ±26 % CPU noise
    // over 3 runs gave a Welch interval of ±75 %: inconclusive).
    for format in ["text", "md", "json", "bmf"] {
        let cmp = montrace(tmp.path(), &["compare", base, base, "--format", format]);
        assert_eq!(cmp.code(), 0, "{format}: {cmp:?}");
        if format == "text" || format == "md" {
            assert!(
                cmp.stdout.contains("the same runs on both sides"),
                "{format}: {cmp:?}"
            );
        }
        if format == "text" {
            let wall = cmp
                .stdout
                .lines()
                .find(|l| l.starts_with("wall_s"))
                .unwrap();
            assert!(wall.ends_with("not gated"), "{wall}");
            assert!(cmp.stdout.contains("no regression"), "{cmp:?}");
        }
        if format == "json" {
            let json: serde_json::Value = serde_json::from_str(&cmp.stdout).unwrap();
            assert_eq!(json["regressed"], false);
            assert_eq!(json["outcome"], "pass", "{json}");
            let cpu = json["metrics"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["metric"] == "cpu_s")
                .unwrap_or_else(|| panic!("{json}"));
            assert_eq!(cpu["method"], "same_runs", "{json}");
            assert_eq!(cpu["change"], 0.0, "{json}");
        }
    }
    let bmf = montrace(tmp.path(), &["export", "--format", "bmf", base]);
    assert_eq!(bmf.code(), 0, "{bmf:?}");
    let json: serde_json::Value = serde_json::from_str(&bmf.stdout).unwrap();
    let summary = read_json(&run_dir.join("summary.json")).unwrap();
    let command = summary["command"].as_str().unwrap();
    // Bencher's measures by slug.
    assert_eq!(
        json[command]["cpu-s"]["value"], summary["stats"]["cpu_s"]["median"],
        "{json}"
    );
    assert_eq!(
        json[command]["processes"]["value"].as_f64(),
        Some(1.0),
        "{json}"
    );
}

/// The ```sh block that follows the recipe marker in docs/ci.md.
fn ci_recipe() -> String {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/ci.md");
    let text = std::fs::read_to_string(&doc).unwrap();
    let after = text
        .split_once("<!-- recipe:")
        .expect("docs/ci.md marks its recipe with <!-- recipe: ... -->")
        .1;
    let block = after
        .split_once("```sh\n")
        .expect("a ```sh block after the marker")
        .1;
    block.split_once("```").unwrap().0.to_string()
}

#[test]
fn the_ci_recipe_runs_as_written_and_catches_a_heavier_build() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("project");
    write_project(&project, 2);
    git(&project, &["init", "-q"]);
    git(&project, &["add", "."]);
    git(&project, &["commit", "-qm", "base"]);
    let base = git(&project, &["rev-parse", "HEAD"]);
    // The candidate builds three times as many files.
    write_project(&project, 6);
    git(&project, &["add", "."]);
    git(&project, &["commit", "-qm", "heavier"]);

    let bin_dir: PathBuf = montrace_bin().parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("bash");
    cmd.current_dir(&project)
        .args(["-e", "-c", &ci_recipe()])
        .env("PATH", path)
        .env("BASE", &base);
    let run = run_with_timeout(&mut cmd, TIMEOUT * 3);
    assert_eq!(run.code(), 1, "the heavier build regressed: {run:?}");
    let verdict = std::fs::read_to_string(project.join("verdict.md")).unwrap();
    assert!(
        run.stdout.contains("regressed"),
        "the recipe prints the verdict: {run:?}"
    );
    // Only the verdict: the build's output is in the log.
    assert!(verdict.starts_with("### montrace bench: ❌ "), "{verdict}");
    assert!(!verdict.contains("cc -O2"), "{verdict}");
    let log = std::fs::read_to_string(project.join("runs/bench.log")).unwrap();
    assert!(log.contains("cc -O2 -c u5.c"), "{log}");
    assert!(verdict.contains("| `processes` |"), "{verdict}");
    assert!(project.join("runs/verdict.md").is_file());
    // The benchmark is named after the command, not the checkouts' paths; each side's commit.
    let json = read_json(&project.join("runs/verdict.json")).unwrap();
    assert_eq!(json["outcome"], "regressed", "{json}");
    assert_eq!(json["name"], "make -j2", "{json}");
    assert_eq!(
        json["baseline"]["commit"].as_str(),
        Some(base.as_str()),
        "{json}"
    );
    let head = git(&project, &["rev-parse", "HEAD"]);
    assert_eq!(
        json["candidate"]["commit"].as_str(),
        Some(head.as_str()),
        "{json}"
    );
    assert_eq!(json["candidate"]["dirty"], false, "{json}");
    let bmf = read_json(&project.join("runs/bmf.json")).unwrap();
    assert!(
        bmf["make -j2"]["processes"]["value"].as_f64().unwrap() >= 18.0,
        "{bmf}"
    );
    // Five repetitions a side, each a full build of its checkout.
    for (side, files) in [("baseline", 2.0), ("candidate", 6.0)] {
        let mut procs = Vec::new();
        for rep in 1..=5 {
            let summary =
                read_json(&project.join(format!("runs/{side}/rep-{rep:03}/summary.json"))).unwrap();
            procs.extend(processes_per_repetition(&summary));
        }
        assert!(
            procs.iter().all(|&p| p == procs[0] && p >= 3.0 * files),
            "{side}: {procs:?}"
        );
    }
}

/// Spins until this process has used MS milliseconds of CPU; with a second argument MIB, first
/// touches MIB MiB and holds them.
const BURN_C: &str = r#"
#include <stdlib.h>
#include <string.h>
#include <time.h>
int main(int argc, char **argv) {
    long long want = atoll(argv[1]) * 1000000LL;
    if (argc > 2) { size_t n = (size_t)atol(argv[2]) << 20; char *p = malloc(n); memset(p, 1, n); if (p[n - 1] != 1) return 1; }
    volatile unsigned long x = 0;
    for (;;) {
        for (int i = 0; i < 10000; i++) x += i;
        struct timespec t;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
        if ((long long)t.tv_sec * 1000000000LL + t.tv_nsec >= want) return 0;
    }
}
"#;

/// A CPU hog on CPU 0 while it lives: the noisy neighbour of a shared runner.
struct Neighbour(std::process::Child);

impl Neighbour {
    fn start(burn: &str) -> Neighbour {
        use std::os::unix::process::CommandExt as _;
        let mut cmd = Command::new(burn);
        cmd.arg("100000000");
        // SAFETY: sched_setaffinity on the child itself, between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(0, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
                Ok(())
            });
        }
        Neighbour(cmd.spawn().unwrap())
    }
}

impl Drop for Neighbour {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `montrace bench --repeat 3 --warmup 0 -a A -b B` `n` times (with `--prepare` when given; a
/// neighbour during every other one): the metrics each comparison flagged, and its exit status.
/// (`cargo xtask bench` measures the same rates with 5 repetitions a side after a warm-up, as
/// docs/ci.md runs it.)
fn comparisons(
    dir: &Path,
    n: usize,
    (a, b): (&str, &str),
    prepare: Option<&str>,
    burn: &str,
) -> Vec<(i32, Vec<String>)> {
    std::fs::create_dir_all(dir).unwrap();
    (0..n)
        .map(|i| {
            let _neighbour = (i % 2 == 1).then(|| Neighbour::start(burn));
            let out = dir.join(format!("cmp-{i:02}"));
            let mut args = vec![
                "bench",
                "--repeat",
                "3",
                "--max-runs",
                "8",
                "--warmup",
                "0",
                "--format",
                "json",
                "--out",
                out.to_str().unwrap(),
                "-a",
                a,
                "-b",
                b,
            ];
            if let Some(prepare) = prepare {
                args.extend(["--prepare", prepare]);
            }
            let run = montrace(dir, &args);
            let code = run.code();
            // Pass, regressed, or inconclusive (the budget ended first).
            assert!(matches!(code, 0 | 1 | 3), "{run:?}");
            let json: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
            let flagged = json["metrics"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["verdict"] == "regressed")
                .map(|m| m["metric"].as_str().unwrap().to_string())
                .collect();
            (code, flagged)
        })
        .collect()
}

/// [`comparisons`], 20 of them.
fn twenty_comparisons(dir: &Path, a: &str, b: &str, burn: &str) -> Vec<(i32, Vec<String>)> {
    comparisons(dir, 20, (a, b), None, burn)
}

#[test]
fn identical_code_fails_at_most_once_in_twenty_and_real_changes_are_caught() {
    require_root();
    let burn = tests::compile_c("burn", BURN_C);
    let b = burn.as_str();
    let tmp = tempfile::tempdir().unwrap();
    // Two burners side by side: the candidate's second one adds 10% of the first's CPU on the
    // other core, so CPU grows by 10% and wall time stays.
    let pair = |extra: u32| format!("{b} {extra} & {b} 150; wait");

    // A/A, the issue's two workloads: 10 comparisons of a small C build, each repetition a full
    // build (`--prepare 'make clean'`), and 10 of the CPU burners; one of the 20 may fail.
    let project = tmp.path().join("project");
    write_project(&project, 4);
    let build = format!("make -s -j2 -C {}", project.display());
    let clean = format!("make -s -C {} clean", project.display());
    let mut aa = comparisons(
        &tmp.path().join("aa-build"),
        10,
        (&build, &build),
        Some(&clean),
        b,
    );
    // make, then per file at least cc, cc1 and as: every repetition of every comparison
    // built all 4 files.
    let builds: Vec<f64> = (0..10)
        .flat_map(|i| ["baseline", "candidate"].map(|side| (i, side)))
        .flat_map(|(i, side)| (1..=3).map(move |r| (i, side, r)))
        .chain(
            // Pairs the series added past --repeat.
            (0..10)
                .flat_map(|i| ["baseline", "candidate"].map(|side| (i, side)))
                .flat_map(|(i, side)| (4..=8).map(move |r| (i, side, r))),
        )
        .filter(|(i, side, r)| {
            tmp.path()
                .join(format!("aa-build/cmp-{i:02}/{side}/rep-{r:03}"))
                .is_dir()
        })
        .flat_map(|(i, side, r)| {
            let summary = tmp.path().join(format!(
                "aa-build/cmp-{i:02}/{side}/rep-{r:03}/summary.json"
            ));
            processes_per_repetition(&read_json(&summary).unwrap())
        })
        .collect();
    assert!(
        builds.len() >= 60 && builds.iter().all(|&p| p == builds[0] && p >= 13.0),
        "{builds:?}"
    );
    aa.extend(comparisons(
        &tmp.path().join("aa-burn"),
        10,
        (&pair(0), &pair(0)),
        None,
        b,
    ));
    // Which of them (0-9 the builds, 10-19 the burners) and what each flagged.
    let failed: Vec<_> = aa
        .iter()
        .enumerate()
        .filter(|(_, (code, _))| *code == 1)
        .collect();
    assert!(
        failed.len() <= 1,
        "identical code failed the gate: {failed:?}"
    );

    let cpu = twenty_comparisons(&tmp.path().join("cpu"), &pair(0), &pair(15), b);
    let caught = cpu
        .iter()
        .filter(|(_, f)| f.iter().any(|m| m == "cpu_s"))
        .count();
    assert!(caught >= 19, "+10% CPU caught in {caught} of 20: {cpu:?}");

    let mem = twenty_comparisons(
        &tmp.path().join("mem"),
        &format!("{b} 50 50"),
        &format!("{b} 50 60"),
        b,
    );
    let caught = mem
        .iter()
        .filter(|(_, f)| f.iter().any(|m| m == "peak_rss_bytes"))
        .count();
    assert_eq!(
        caught, 20,
        "+20% peak memory caught in {caught} of 20: {mem:?}"
    );
}

/// An inconclusive verdict.json says how many pairs in all would decide it: more than the
/// `kept` it decided on, for every undecided paired metric. (At the spread of a few pairs, the
/// count is below the million the gate looks ahead, whatever the change: the two bounds are a
/// quarter of the limit apart. Only a figure that is 0 in every baseline run, decided by
/// threshold, has no interval to extrapolate.)
fn assert_pairs_needed_beyond(json: &serde_json::Value, kept: u64) {
    let undecided: Vec<&serde_json::Value> = json["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["verdict"] == "inconclusive")
        .collect();
    assert!(!undecided.is_empty(), "{json}");
    for m in &undecided {
        if m["method"] == "paired" {
            // None would mean not before the million pairs the gate looks ahead (a stress run
            // beside a memory toucher once got it here; what is printed says which metric).
            let needed = m["pairs_needed"].as_u64();
            assert!(needed.is_some_and(|n| n > kept), "{m} in {json}");
        } else {
            assert_eq!(m["method"], "threshold", "{m}");
        }
    }
    if undecided.iter().any(|m| m["method"] == "paired") {
        let needed = json["pairs_needed"].as_u64();
        assert!(needed.is_some_and(|n| n > kept), "{json}");
    }
}

fn bench(dir: &Path, args: &[&str]) -> Finished {
    let mut all = vec!["bench", "--warmup", "0", "--repeat", "2"];
    all.extend(args);
    montrace(dir, &all)
}

#[test]
fn failing_commands_and_hooks_have_exit_codes_of_their_own_and_stdout_is_the_verdict() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let out = |name: &str| tmp.path().join(name).to_str().unwrap().to_string();
    // The candidate's command fails: 4, not the command's 1 (which would read "regressed").
    let failed = bench(
        tmp.path(),
        &[
            "-o",
            &out("cmd"),
            "-a",
            "true",
            "-b",
            "echo broken >&2; exit 1",
        ],
    );
    assert_eq!(failed.code(), 4, "{failed:?}");
    assert!(
        failed
            .stderr
            .contains("the candidate command failed (exit 1)"),
        "{failed:?}"
    );
    // Its output is shown from the log.
    assert!(failed.stderr.contains("broken"), "{failed:?}");
    assert!(failed.stdout.is_empty(), "{failed:?}");
    // A hook fails: 5, not its 2 (which would read "usage error").
    let hook = bench(
        tmp.path(),
        &[
            "-o",
            &out("hook"),
            "-a",
            "true",
            "-b",
            "true",
            "--prepare",
            "exit 2",
        ],
    );
    assert_eq!(hook.code(), 5, "{hook:?}");
    assert!(hook.stderr.contains("--prepare hook failed"), "{hook:?}");
    let hook = bench(
        tmp.path(),
        &[
            "-o",
            &out("cleanup"),
            "-a",
            "true",
            "-b",
            "true",
            "--cleanup",
            "exit 1",
        ],
    );
    assert_eq!(hook.code(), 5, "{hook:?}");
    assert!(hook.stderr.contains("--cleanup hook failed"), "{hook:?}");

    // Identical commands that talk: stdout is the JSON verdict alone, the talk is in the log.
    let noisy = "echo NOISE-OUT; echo NOISE-ERR >&2; sleep 0.05";
    let ok = bench(
        tmp.path(),
        &[
            "-o",
            &out("ok"),
            "-a",
            noisy,
            "-b",
            noisy,
            "--format",
            "json",
        ],
    );
    // Identical commands: never regressed. Two pairs are evidence of nothing much: a metric
    // passes with them only when its interval is within the limit or the floor (a 5 ms CPU
    // figure whose two runs differ by 1 ms twice is not within the 10 ms floor with 99 %
    // confidence), so on any machine this fixed series may end inconclusive; it then says so,
    // with its budget and how many pairs would decide.
    assert!(matches!(ok.code(), 0 | 3), "{ok:?}");
    let json: serde_json::Value = serde_json::from_str(&ok.stdout).expect("stdout is JSON");
    assert_eq!(
        json["series"]["pairs"].as_array().unwrap().len(),
        2,
        "{json}"
    );
    // Of 2 pairs, both are used (one left out would leave fewer than 2).
    assert_eq!(json["series"]["kept"], 2, "{json}");
    match ok.code() {
        0 => assert_eq!(json["outcome"], "pass", "{json}"),
        _ => {
            assert_eq!(json["outcome"], "inconclusive", "{json}");
            assert_eq!(json["series"]["stopped_by"], "fixed", "{json}");
            assert_pairs_needed_beyond(&json, 2);
        }
    }
    let pair = &json["series"]["pairs"][0];
    assert!(pair["baseline"]["other_cpu_share"].is_number(), "{pair}");
    assert!(!ok.stderr.lines().any(|l| l.starts_with("NOISE")), "{ok:?}");
    assert!(!ok.stdout.contains("\nNOISE"), "{ok:?}");
    let log = std::fs::read_to_string(tmp.path().join("ok/bench.log")).unwrap();
    // Each run's output, after a header naming the run.
    assert_eq!(
        log.lines().filter(|l| *l == "NOISE-OUT").count(),
        4,
        "{log}"
    );
    assert_eq!(
        log.lines().filter(|l| *l == "NOISE-ERR").count(),
        4,
        "{log}"
    );
    assert!(
        log.contains("==> candidate/rep-002 (.): echo NOISE-OUT"),
        "{log}"
    );
    for file in ["verdict.md", "verdict.json", "bmf.json"] {
        assert!(tmp.path().join("ok").join(file).is_file(), "{file}");
    }
    // --show-output: on stderr, never on stdout.
    let shown = bench(
        tmp.path(),
        &[
            "-o",
            &out("shown"),
            "-a",
            noisy,
            "-b",
            noisy,
            "--show-output",
        ],
    );
    assert!(matches!(shown.code(), 0 | 3), "{shown:?}");
    assert!(shown.stderr.lines().any(|l| l == "NOISE-OUT"), "{shown:?}");
    // (The verdict names the command, which holds the words; never their output.)
    assert!(
        !shown.stdout.lines().any(|l| l.starts_with("NOISE")),
        "{shown:?}"
    );
    assert!(
        shown.stdout.contains("no regression") || shown.stdout.contains("inconclusive after"),
        "{shown:?}"
    );
}

#[test]
fn a_no_op_series_is_an_error_unless_allowed() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("p");
    // The warm-up's build must take more than twice an up-to-date `make` even when a busy CI
    // machine slows the repetitions: three files built in 47 ms here, and a CI run's no-op
    // repetitions took 26 ms, so the warning did not fire. Ten files build in about 150 ms.
    write_project(&project, 10);
    let build = format!("make -C {}", project.display());
    let out = tmp.path().join("noop");
    let run = montrace(
        tmp.path(),
        &[
            "bench",
            "--warmup",
            "1",
            "--repeat",
            "2",
            "-o",
            out.to_str().unwrap(),
            "-a",
            &build,
            "-b",
            &build,
        ],
    );
    assert_eq!(run.code(), 6, "{run:?}");
    assert!(run.stderr.contains("--allow-no-op"), "{run:?}");
    assert!(!out.join("verdict.json").exists());
    // The same from a clean tree, allowed.
    let clean = Command::new("make")
        .args(["-C", project.to_str().unwrap(), "clean"])
        .output()
        .unwrap();
    assert!(clean.status.success());
    let out = tmp.path().join("allowed");
    let run = montrace(
        tmp.path(),
        &[
            "bench",
            "--warmup",
            "1",
            "--repeat",
            "2",
            "--allow-no-op",
            "-o",
            out.to_str().unwrap(),
            "-a",
            &build,
            "-b",
            &build,
        ],
    );
    assert!(matches!(run.code(), 0 | 3), "{run:?}");
    let json = read_json(&out.join("verdict.json")).unwrap();
    assert!(
        json["warnings"]
            .to_string()
            .contains("warm-up probably did the work"),
        "{json}"
    );
}

#[test]
fn pairs_are_added_until_the_verdict_is_confident_or_the_budget_ends() {
    require_root();
    let burn = tests::compile_c("burn", BURN_C);
    let b = burn.as_str();
    let tmp = tempfile::tempdir().unwrap();
    // +10 % CPU (two burners, the candidate's second one 15 ms longer than nothing): decided
    // as regressed within the budget, on the pairs.
    let pair = |extra: u32| format!("{b} {extra} & {b} 150; wait");
    let out = tmp.path().join("cpu");
    let run = bench(
        tmp.path(),
        &[
            "--max-runs",
            "16",
            "--format",
            "json",
            "-o",
            out.to_str().unwrap(),
            "-a",
            &pair(0),
            "-b",
            &pair(15),
        ],
    );
    assert_eq!(run.code(), 1, "{run:?}");
    let json: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(json["outcome"], "regressed", "{json}");
    assert_eq!(json["series"]["stopped_by"], "decided", "{json}");
    let pairs = json["series"]["pairs"].as_array().unwrap().len();
    // At one of its looks: 2 (--repeat), 3, 5, 8, 12 or 16 pairs.
    assert!([2, 3, 5, 8, 12, 16].contains(&pairs), "{json}");
    assert_eq!(json["series"]["looks"], 6, "{json}");
    let cpu = json["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == "cpu_s")
        .unwrap();
    assert_eq!(cpu["verdict"], "regressed", "{cpu}");
    assert!(cpu["change_low"].as_f64().unwrap() > 0.025, "{cpu}");

    // Wall time gated at +5 % on sleeps of 0.10 to 0.99 s at random: 3 pairs cannot decide,
    // and the verdict says so, with what would, never "no regression". (The floor passes a
    // metric only when its interval times the baseline's mean is within ±10 ms: sleeps that
    // land close in 2 or 3 pairs by chance are far from that.)
    let random = "sleep 0.$(( $(od -An -N1 -tu1 /dev/urandom) % 90 + 10 ))";
    let out = tmp.path().join("undecided");
    let run = montrace(
        tmp.path(),
        &[
            "bench",
            "--warmup",
            "0",
            "--repeat",
            "3",
            "--max",
            "wall=+5%",
            "-o",
            out.to_str().unwrap(),
            "-a",
            random,
            "-b",
            random,
        ],
    );
    assert_eq!(run.code(), 3, "{run:?}");
    assert!(!run.stdout.contains("no regression"), "{run:?}");
    assert!(
        run.stdout
            .contains("inconclusive after 3 pairs (--repeat ended it): "),
        "{run:?}"
    );
    let json = read_json(&out.join("verdict.json")).unwrap();
    // Wall time among the undecided (the others may be too: 2 or 3 pairs of peak RSS within
    // 1 MiB of each other are not yet within the floor with confidence).
    let wall = json["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == "wall_s")
        .unwrap();
    assert_eq!(wall["verdict"], "inconclusive", "{wall}");
    // Listed first among them: on the headline's line when alone, else on the next.
    let headline = run.stdout.find("not decided:").unwrap() + "not decided:".len();
    let listed = &run.stdout[headline..];
    assert!(
        listed.starts_with(" wall_s ") || listed.starts_with("\n  wall_s "),
        "{run:?}"
    );
    // More pairs than it kept (a pair run under different interference on its two sides is
    // left out, so it may have kept 2 of 3).
    let kept = json["series"]["kept"].as_u64().unwrap();
    assert!(kept == 2 || kept == 3, "{json}");
    assert_pairs_needed_beyond(&json, kept);
    let md = std::fs::read_to_string(out.join("verdict.md")).unwrap();
    assert!(
        md.starts_with("### montrace bench: ⚠️ inconclusive"),
        "{md}"
    );
}
