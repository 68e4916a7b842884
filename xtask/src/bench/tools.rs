//! What the benchmark runs with: the montrace binary, the C workload helpers of
//! `bench/workloads/`, a generated C project for `make -j2`, psrecord, and the ways to run
//! commands (bare, under montrace, under psrecord) and read what they left behind.

use crate::util::{self, check_quietly};
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The C helpers in `bench/workloads/`, built with `cc -O2` (`noop` statically).
pub const HELPERS: &[&str] = &[
    "nscount", "selfcost", "mem", "burn", "chain", "storm", "noop",
];

/// Source files of the generated project that `make -j2` builds (completeness, accuracy, the
/// gate and the fleet): about 0.6 s on this 2-core machine.
pub const MAKE_FILES: usize = 50;

/// Source files of the larger project whose build the overhead section times (the performance
/// issue's "2 s build"), and the functions in each: about 2 s on this 2-core machine.
pub const BUILD_FILES: usize = 80;
pub const BUILD_FUNCTIONS: usize = 3;

pub struct Tools {
    /// `target/bench`: helpers, the make project, run directories.
    pub work: PathBuf,
    pub montrace: PathBuf,
    pub make_dir: PathBuf,
    /// The larger project of `BUILD_FILES` files (section 3's build).
    pub build_dir: PathBuf,
    psrecord_script: PathBuf,
    runs: Cell<usize>,
}

impl Tools {
    /// Installs psrecord when missing, builds montrace (release) unless `montrace` is given,
    /// builds the helpers and generates the make project.
    pub fn prepare(verbose: bool, montrace: Option<PathBuf>) -> Result<Tools> {
        if !util::is_root() {
            bail!(
                "the benchmark loads eBPF programs and creates PID namespaces: run it as root \
                 (sudo -E cargo xtask bench)"
            );
        }
        install_psrecord(verbose)?;
        let montrace = match montrace {
            Some(path) => path,
            None => {
                eprintln!("xtask: bench: building montrace (release)");
                check_quietly(
                    util::cargo().args(["build", "--release", "-p", "monitor"]),
                    verbose,
                )
                .context("building montrace (release) failed")?;
                util::target_dir().join("release/montrace")
            }
        };
        if !montrace.is_file() {
            bail!("no montrace binary at {}", montrace.display());
        }
        let work = util::target_dir().join("bench");
        let runs = work.join("runs");
        if runs.exists() {
            std::fs::remove_dir_all(&runs)
                .with_context(|| format!("cannot clear {}", runs.display()))?;
        }
        std::fs::create_dir_all(work.join("bin"))?;
        std::fs::create_dir_all(&runs)?;
        let sources = util::workspace_root().join("bench/workloads");
        for helper in HELPERS {
            let mut cc = Command::new("cc");
            cc.args(["-O2", "-Wall", "-o"])
                .arg(work.join("bin").join(helper))
                .arg(sources.join(format!("{helper}.c")));
            if *helper == "noop" {
                cc.arg("-static");
            }
            check_quietly(&mut cc, verbose).with_context(|| format!("building {helper}.c"))?;
        }
        let make_dir = work.join("make-project");
        generate_make_project(&make_dir)?;
        let build_dir = work.join("build-project");
        generate_build_project(&build_dir)?;
        Ok(Tools {
            work,
            montrace,
            make_dir,
            build_dir,
            psrecord_script: util::workspace_root().join("bench/psrecord_run.py"),
            runs: Cell::new(0),
        })
    }

    /// The build of the generated C project: `make -s -j2 -C DIR`.
    pub fn make_build(&self) -> Vec<String> {
        make_build_in(&self.make_dir)
    }

    /// What runs before every build, so each one compiles every file: `make -s -C DIR clean`.
    pub fn make_clean(&self) -> Vec<String> {
        make_clean_in(&self.make_dir)
    }

    /// The build of the larger project (section 3): `make -s -j2 -C DIR`.
    pub fn big_build(&self) -> Vec<String> {
        make_build_in(&self.build_dir)
    }

    /// `make -s -C DIR clean` of the larger project.
    pub fn big_clean(&self) -> Vec<String> {
        make_clean_in(&self.build_dir)
    }

    /// The path of a compiled helper.
    pub fn helper(&self, name: &str) -> String {
        self.work.join("bin").join(name).display().to_string()
    }

    /// A fresh path under `target/bench/runs/` (not created).
    pub fn fresh(&self, tag: &str) -> PathBuf {
        let n = self.runs.get() + 1;
        self.runs.set(n);
        self.work.join("runs").join(format!("{n:04}-{tag}"))
    }

    /// `montrace run -q --as-root --out OUT OPTIONS... -- CMD...`
    pub fn montrace_argv(&self, out: &Path, options: &[&str], cmd: &[String]) -> Vec<String> {
        let mut argv = vec![
            self.montrace.display().to_string(),
            "run".into(),
            "-q".into(),
            "--as-root".into(),
            "--no-report".into(),
            "--out".into(),
            out.display().to_string(),
        ];
        argv.extend(options.iter().map(|o| o.to_string()));
        argv.push("--".into());
        argv.extend(cmd.iter().cloned());
        argv
    }

    /// `nscount OUT CMD...`: CMD in a PID namespace, counted and timed by the kernel.
    pub fn nscount_argv(&self, out: &Path, cmd: &[String]) -> Vec<String> {
        let mut argv = vec![self.helper("nscount"), out.display().to_string()];
        argv.extend(cmd.iter().cloned());
        argv
    }

    /// `selfcost [-n] [-w START_MS,END_MS] OUT CMD...`: CMD's own CPU and peak memory, without
    /// its children. `poll: false` (`-n`) only waits: no peak memory, and no cost while CMD runs.
    /// `window`: also CMD's CPU in nanoseconds between two moments of its run (its steady state).
    pub fn selfcost_argv(
        &self,
        out: &Path,
        poll: bool,
        window: Option<Window>,
        cmd: &[String],
    ) -> Vec<String> {
        let mut argv = vec![self.helper("selfcost")];
        if !poll {
            argv.push("-n".into());
        }
        if let Some(w) = window {
            argv.push("-w".into());
            argv.push(format!("{},{}", w.start_ms, w.end_ms));
        }
        argv.push(out.display().to_string());
        argv.extend(cmd.iter().cloned());
        argv
    }

    /// CMD under psrecord's own sampling loop at `interval` seconds with children included.
    pub fn psrecord(&self, tag: &str, interval: f64, cmd: &[String]) -> Result<Psrecord> {
        let (argv, out) = self.psrecord_argv(tag, interval, cmd)?;
        run(&argv)?;
        read_psrecord(&out)
    }

    /// The command line of `psrecord` (see `bench/psrecord_run.py`) and the file it writes.
    pub fn psrecord_argv(
        &self,
        tag: &str,
        interval: f64,
        cmd: &[String],
    ) -> Result<(Vec<String>, PathBuf)> {
        let dir = self.fresh(tag);
        std::fs::create_dir_all(&dir)?;
        let out = dir.join("psrecord.json");
        let mut argv = vec![
            "python3".to_string(),
            self.psrecord_script.display().to_string(),
            out.display().to_string(),
            dir.join("psrecord.csv").display().to_string(),
            interval.to_string(),
        ];
        argv.extend(cmd.iter().cloned());
        Ok((argv, out))
    }
}

pub fn read_psrecord(out: &Path) -> Result<Psrecord> {
    let v = read_json(out)?;
    Ok(Psrecord {
        processes_seen: num(&v, "/processes_seen")?,
        cpu_s: num(&v, "/cpu_s")?,
        peak_rss_bytes: num(&v, "/peak_mib")? * (1u64 << 20) as f64,
        samples: num(&v, "/samples")?,
    })
}

/// What psrecord made of a run.
pub struct Psrecord {
    /// Distinct processes (root included) psrecord ever saw in the tree.
    pub processes_seen: f64,
    /// CPU seconds of the tree by psrecord: its CPU% samples integrated over time.
    pub cpu_s: f64,
    /// Its largest "Real (MB)" figure (the sum of the tree's RSS at one sample), in bytes.
    pub peak_rss_bytes: f64,
    /// Rows of its log (one per sample of the whole tree).
    pub samples: f64,
}

/// How a command ended and how long it took (measured here, around the whole process).
pub struct Ran {
    pub wall_s: f64,
}

/// Runs `argv` with stdin and stdout closed to it; fails (with the end of its stderr) unless it
/// exits 0.
pub fn run(argv: &[String]) -> Result<Ran> {
    let start = Instant::now();
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("could not start {}", argv[0]))?;
    let wall_s = start.elapsed().as_secs_f64();
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
        bail!(
            "`{}` failed ({}):\n{}",
            argv.join(" "),
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    Ok(Ran { wall_s })
}

/// Runs a preparation command (e.g. `make clean`) quietly.
pub fn prepare(argv: &[String]) -> Result<()> {
    run(argv).map(|_| ())
}

pub fn read_json(path: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))
}

/// The number at a JSON pointer (`/cgroup/totals/cpu_usage_ns`).
pub fn num(v: &Value, pointer: &str) -> Result<f64> {
    v.pointer(pointer)
        .and_then(Value::as_f64)
        .with_context(|| format!("no number at {pointer} in {}", short(v)))
}

/// The number at a JSON pointer, or `None` when it is missing or null.
pub fn opt_num(v: &Value, pointer: &str) -> Option<f64> {
    v.pointer(pointer).and_then(Value::as_f64)
}

fn short(v: &Value) -> String {
    let text = v.to_string();
    text.chars().take(300).collect()
}

/// Lost-event counters of a run.json, summed.
pub fn lost_events(run_json: &Value) -> f64 {
    ["ringbuf_full", "track_map_full", "read_errors"]
        .iter()
        .filter_map(|k| opt_num(run_json, &format!("/lost_events/{k}")))
        .sum()
}

/// Runs SQL statements through DuckDB's Python package, all in one Python process (it takes
/// about half a second to start); each statement's rows, every row as a JSON array.
pub fn duckdb_batch(statements: &[String]) -> Result<Vec<Vec<Vec<Value>>>> {
    if statements.is_empty() {
        return Ok(Vec::new());
    }
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import duckdb, json, sys\n\
             out = [duckdb.sql(q).fetchall() for q in json.load(sys.stdin)]\n\
             print(json.dumps(out, default=float))",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("could not start python3 (DuckDB)")?;
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().context("no stdin")?;
        stdin.write_all(serde_json::to_string(statements)?.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "DuckDB query failed:\n{}\n{}",
            statements.join("\n"),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    serde_json::from_slice(&out.stdout).context("DuckDB's answer is not JSON")
}

/// The columns of the first row of a statement's rows, as numbers.
pub fn first_numbers(rows: &[Vec<Value>]) -> Vec<Option<f64>> {
    rows.first()
        .map(|row| row.iter().map(Value::as_f64).collect())
        .unwrap_or_default()
}

/// A statement that counts the rows of each table of a run directory:
/// events, processes, samples (all, and `procfs` ones), system.
pub fn table_rows_sql(run_dir: &Path) -> String {
    let d = run_dir.display();
    format!(
        "SELECT (SELECT count(*) FROM '{d}/events.parquet'), \
                (SELECT count(*) FROM '{d}/processes.parquet'), \
                (SELECT count(*) FROM '{d}/samples.parquet'), \
                (SELECT count(*) FROM '{d}/samples.parquet' WHERE source = 'procfs'), \
                (SELECT count(*) FROM '{d}/system.parquet')"
    )
}

/// Rows of each table, from the answer to `table_rows_sql`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TableRows {
    pub events: f64,
    pub processes: f64,
    pub samples: f64,
    pub procfs_samples: f64,
    pub system: f64,
}

impl TableRows {
    pub fn from_answer(rows: &[Vec<Value>]) -> TableRows {
        let n = first_numbers(rows);
        let at = |i: usize| n.get(i).copied().flatten().unwrap_or(0.0);
        TableRows {
            events: at(0),
            processes: at(1),
            samples: at(2),
            procfs_samples: at(3),
            system: at(4),
        }
    }

    pub fn total(&self) -> f64 {
        self.events + self.processes + self.samples + self.system
    }
}

/// What `nscount` wrote: the kernel's own figures for a tree.
pub struct NsCount {
    /// Processes of the tree montrace sees when it runs `nscount`: `nscount` itself, the
    /// namespace's init and everything below (`ns_last_pid` + 1).
    pub processes: f64,
    pub wall_s: f64,
    /// User + system CPU of the whole tree (getrusage: `nscount` itself and everything reaped).
    pub cpu_ns: f64,
}

pub fn read_nscount(path: &Path) -> Result<NsCount> {
    let v = read_json(path)?;
    let last = num(&v, "/ns_last_pid")?;
    if last < 1.0 {
        bail!(
            "{}: nscount could not read the namespace's PID counter",
            path.display()
        );
    }
    Ok(NsCount {
        processes: last + 1.0,
        wall_s: num(&v, "/wall_ns")? / 1e9,
        cpu_ns: num(&v, "/cpu_ns")?,
    })
}

/// A window of a run for `selfcost -w`, in milliseconds after the command's start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    pub start_ms: u64,
    pub end_ms: u64,
}

/// What `selfcost` wrote: montrace's own cost, without the command's tree.
pub struct SelfCost {
    /// The whole run's CPU (start-up and finish included), in clock ticks of 10 ms.
    pub cpu_s: f64,
    /// Peak resident memory (VmHWM, read every 10 ms while it ran); negative when not polled.
    pub peak_rss_bytes: f64,
    pub wall_s: f64,
    /// With a window (`selfcost -w`): CPU (ns precision, every thread) and wall time between its
    /// two readings; `None` without one, or when the command ended before its end.
    pub window_cpu_s: Option<f64>,
    pub window_wall_s: Option<f64>,
    /// The command's threads at the window's start and end, `"2/2"`: a thread that ended
    /// inside the window would take its CPU out of `window_cpu_s`.
    pub window_threads: Option<String>,
}

impl SelfCost {
    /// Share of one core over the whole run, start-up and finish included.
    pub fn whole_share(&self) -> f64 {
        self.cpu_s / self.wall_s
    }

    /// Share of one core inside the window (the steady state).
    pub fn steady_share(&self) -> Option<f64> {
        let (cpu, wall) = (self.window_cpu_s?, self.window_wall_s?);
        (wall > 0.0).then(|| cpu / wall)
    }

    /// Whether the thread count changed inside the window (so the window's CPU may miss a
    /// thread that ended).
    pub fn threads_changed(&self) -> bool {
        self.window_threads
            .as_deref()
            .and_then(|t| t.split_once('/'))
            .is_some_and(|(a, b)| a != b)
    }
}

pub fn read_selfcost(path: &Path) -> Result<SelfCost> {
    let v = read_json(path)?;
    Ok(SelfCost {
        cpu_s: num(&v, "/cpu_ticks")? / num(&v, "/clk_tck")?,
        peak_rss_bytes: num(&v, "/vmhwm_kib")? * 1024.0,
        wall_s: num(&v, "/wall_ns")? / 1e9,
        window_cpu_s: opt_num(&v, "/window_cpu_ns").map(|ns| ns / 1e9),
        window_wall_s: opt_num(&v, "/window_wall_ns").map(|ns| ns / 1e9),
        window_threads: v["window_threads"].as_str().map(String::from),
    })
}

/// `/proc/loadavg`'s three averages.
pub fn loadavg() -> [f64; 3] {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut it = text
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(f64::NAN));
    [
        it.next().unwrap_or(f64::NAN),
        it.next().unwrap_or(f64::NAN),
        it.next().unwrap_or(f64::NAN),
    ]
}

/// psrecord from PyPI, installed with pip when `import psrecord` fails.
fn install_psrecord(verbose: bool) -> Result<()> {
    let have = |m: &str| {
        Command::new("python3")
            .args(["-c", &format!("import {m}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !have("duckdb") {
        bail!("the benchmark reads runs with DuckDB's Python package: run `cargo xtask setup`");
    }
    if have("psrecord") {
        return Ok(());
    }
    eprintln!("xtask: bench: installing psrecord (pip)");
    check_quietly(
        Command::new("python3")
            .args(["-m", "pip", "install", "--quiet", "psrecord"])
            .env("PIP_BREAK_SYSTEM_PACKAGES", "1")
            .env("PIP_ROOT_USER_ACTION", "ignore"),
        verbose,
    )
    .context("pip install psrecord failed")
}

fn make_build_in(dir: &Path) -> Vec<String> {
    let dir = dir.display().to_string();
    ["make", "-s", "-j2", "-C", &dir].map(String::from).to_vec()
}

fn make_clean_in(dir: &Path) -> Vec<String> {
    let dir = dir.display().to_string();
    ["make", "-s", "-C", &dir, "clean"]
        .map(String::from)
        .to_vec()
}

/// The Makefile of both generated projects: every `.c` compiled with `-O2`, then linked.
const MAKEFILE: &str = "OBJS := $(patsubst %.c,%.o,$(sort $(wildcard *.c)))\n\
                        prog: $(OBJS)\n\t$(CC) -o $@ $^\n\
                        %.o: %.c\n\t$(CC) -O2 -c $< -o $@\n\
                        clean:\n\trm -f *.o prog\n";

/// `main.c` calling `f0` ... `f{files-1}`.
fn main_c(files: usize) -> String {
    let calls: String = (0..files).map(|i| format!("    s += f{i}(s);\n")).collect();
    let decls: String = (0..files).map(|i| format!("int f{i}(int);\n")).collect();
    format!("{decls}int main(void) {{\n    int s = 1;\n{calls}    return s < 0;\n}}\n")
}

/// A C project of `MAKE_FILES` small files and a `main.c`, with a Makefile whose `clean`
/// target the benchmark runs before every build.
fn generate_make_project(dir: &Path) -> Result<()> {
    generate_make_project_of(dir, MAKE_FILES)
}

/// A project of `files` small files (as [`generate_make_project_of`]), each of which includes
/// `extra.h`: `extra` unused `static inline` functions (a loop over a `switch`). The compiler
/// parses them and emits nothing of them: the same objects, the same processes, the same bytes
/// written, only more compiler CPU (section 9b's candidates). Measured on the 2-core test
/// machine, idle, six `make clean; make -j2` of 60 files each way: 25 functions +4.9 % of the
/// build's CPU, 50 +8.8 %, 75 +13.1 %.
pub fn make_project_with_extra(dir: &Path, files: usize, extra: usize) -> Result<()> {
    generate_make_project_of(dir, files)?;
    for i in 0..files {
        let path = dir.join(format!("f{i}.c"));
        let source = std::fs::read_to_string(&path)?;
        std::fs::write(&path, format!("#include \"extra.h\"\n{source}"))?;
    }
    let mut header = String::from("#ifndef EXTRA_H\n#define EXTRA_H\n");
    for j in 0..extra {
        header.push_str(&format!(
            "static inline int extra_{j}(int x) {{\n\
             \x20   int acc = x;\n\
             \x20   for (int i = 0; i < 16; i++) {{\n\
             \x20       switch ((acc + i) % 7) {{\n\
             \x20       case 0: acc = acc * 3 + i; break;\n\
             \x20       case 1: acc ^= (acc << 2) | i; break;\n\
             \x20       case 2: acc -= i * {}; break;\n\
             \x20       case 3: acc += (acc >> 1) - i; break;\n\
             \x20       case 4: acc = (acc * 31) % 1009; break;\n\
             \x20       case 5: acc |= i << (i % 5); break;\n\
             \x20       default: acc = ~acc + {j}; break;\n\
             \x20       }}\n\
             \x20   }}\n\
             \x20   return acc;\n}}\n",
            j % 13 + 1
        ));
    }
    header.push_str("#endif\n");
    std::fs::write(dir.join("extra.h"), header)?;
    Ok(())
}

fn generate_make_project_of(dir: &Path, files: usize) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    for i in 0..files {
        let source = format!(
            "#include <stdio.h>\n#include <string.h>\n\
             static int table_{i}[64];\n\
             int f{i}(int x) {{\n\
             \x20   char buf[32];\n\
             \x20   for (int k = 0; k < 64; k++) table_{i}[k] = (k * {i} + x) % 97;\n\
             \x20   snprintf(buf, sizeof buf, \"%d\", table_{i}[x % 64]);\n\
             \x20   return (int)strlen(buf) + {i};\n}}\n"
        );
        std::fs::write(dir.join(format!("f{i}.c")), source)?;
    }
    std::fs::write(dir.join("main.c"), main_c(files))?;
    std::fs::write(dir.join("Makefile"), MAKEFILE)?;
    Ok(())
}

/// The larger project: `BUILD_FILES` files of `BUILD_FUNCTIONS` functions each (a table
/// filled, sorted with `qsort` and folded through a `switch`: work for `-O2`'s optimiser) and a
/// `main.c`, with the same Makefile.
fn generate_build_project(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    for i in 0..BUILD_FILES {
        let mut source =
            String::from("#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n");
        for j in 0..BUILD_FUNCTIONS {
            let (a, b) = (i + 7, j + 3);
            source.push_str(&format!(
                "static int t_{j}[256];\n\
                 static int cmp_{j}(const void *a, const void *b) {{\n\
                 \x20   return *(const int *)a - *(const int *)b;\n}}\n\
                 static int g_{j}(int x) {{\n\
                 \x20   char buf[64] = \"\";\n\
                 \x20   unsigned acc = 0;\n\
                 \x20   for (int k = 0; k < 256; k++) t_{j}[k] = (k * {a} + x * {b}) % 251;\n\
                 \x20   qsort(t_{j}, 256, sizeof(int), cmp_{j});\n\
                 \x20   for (int k = 0; k < 256; k++) {{\n\
                 \x20       switch ((t_{j}[k] + k) % 8) {{\n\
                 \x20       case 0: acc += t_{j}[k] * 3; break;\n\
                 \x20       case 1: acc ^= t_{j}[k] << 2; break;\n\
                 \x20       case 2: acc -= t_{j}[(k * 7) % 256]; break;\n\
                 \x20       case 3: acc += strlen(buf + (k % 8)); break;\n\
                 \x20       case 4: acc = acc * 31 + k; break;\n\
                 \x20       case 5: acc |= t_{j}[k] >> 1; break;\n\
                 \x20       case 6: acc += snprintf(buf, sizeof buf, \"%u-%d\", acc, k); break;\n\
                 \x20       default: acc += {j}; break;\n\
                 \x20       }}\n\
                 \x20   }}\n\
                 \x20   return (int)(acc % 1000);\n}}\n"
            ));
        }
        let calls: String = (0..BUILD_FUNCTIONS)
            .map(|j| format!(" + g_{j}(x)"))
            .collect();
        source.push_str(&format!("int f{i}(int x) {{\n    return x{calls};\n}}\n"));
        std::fs::write(dir.join(format!("f{i}.c")), source)?;
    }
    std::fs::write(dir.join("main.c"), main_c(BUILD_FILES))?;
    std::fs::write(dir.join("Makefile"), MAKEFILE)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lost_events_add_up_and_tolerate_missing_fields() {
        let v: Value = json!({"lost_events": {"ringbuf_full": 2, "read_errors": 1}});
        assert_eq!(lost_events(&v), 3.0);
        assert_eq!(lost_events(&json!({})), 0.0);
    }

    #[test]
    fn table_rows_from_an_answer() {
        let rows = vec![vec![json!(10), json!(3), json!(7), json!(5), json!(2)]];
        let t = TableRows::from_answer(&rows);
        assert_eq!(t.events, 10.0);
        assert_eq!(t.procfs_samples, 5.0);
        assert_eq!(t.total(), 22.0);
        assert_eq!(TableRows::from_answer(&[]), TableRows::default());
        assert_eq!(
            first_numbers(&[vec![Value::Null, json!(2)]]),
            vec![None, Some(2.0)]
        );
    }

    #[test]
    fn numbers_by_pointer() {
        let v: Value = json!({"cgroup": {"totals": {"cpu_usage_ns": 5}}, "x": null});
        assert_eq!(num(&v, "/cgroup/totals/cpu_usage_ns").unwrap(), 5.0);
        assert!(num(&v, "/x").is_err());
        assert_eq!(opt_num(&v, "/x"), None);
    }

    #[test]
    fn the_helpers_have_sources() {
        for helper in HELPERS {
            let path = util::workspace_root().join(format!("bench/workloads/{helper}.c"));
            assert!(path.is_file(), "{}", path.display());
        }
    }

    #[test]
    fn the_make_project_has_a_makefile_with_tabs() {
        let dir = std::env::temp_dir().join(format!("xtask-make-{}", std::process::id()));
        generate_make_project(&dir).unwrap();
        let makefile = std::fs::read_to_string(dir.join("Makefile")).unwrap();
        assert!(makefile.contains("\n\t$(CC) -O2 -c"));
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            MAKE_FILES + 2 // the sources, main.c and the Makefile
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_larger_project_builds_with_make() {
        let dir = std::env::temp_dir().join(format!("xtask-build-{}", std::process::id()));
        generate_build_project(&dir).unwrap();
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            BUILD_FILES + 2 // the sources, main.c and the Makefile
        );
        let f0 = std::fs::read_to_string(dir.join("f0.c")).unwrap();
        assert!(f0.contains("int f0(int x) {\n    return x + g_0(x) + g_1(x) + g_2(x);\n}"));
        // One file and main.c compile without a warning (the whole build takes seconds).
        for file in ["f0.c", "main.c"] {
            let out = Command::new("cc")
                .args(["-O2", "-Wall", "-Werror", "-c", file, "-o", "/dev/null"])
                .current_dir(&dir)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn selfcost_with_and_without_a_window() {
        let dir = std::env::temp_dir().join(format!("xtask-selfcost-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let plain = dir.join("plain.json");
        std::fs::write(
            &plain,
            r#"{"cpu_ticks": 35, "clk_tck": 100, "vmhwm_kib": 2, "wait_maxrss_kib": 3, "wall_ns": 10000000000}"#,
        )
        .unwrap();
        let c = read_selfcost(&plain).unwrap();
        assert_eq!(c.cpu_s, 0.35);
        assert!((c.whole_share() - 0.035).abs() < 1e-12);
        assert_eq!(c.steady_share(), None);
        assert!(!c.threads_changed());
        let windowed = dir.join("windowed.json");
        std::fs::write(
            &windowed,
            r#"{"cpu_ticks": 35, "clk_tck": 100, "vmhwm_kib": 2, "wait_maxrss_kib": 3, "wall_ns": 10000000000,
                "window_cpu_ns": 70000000, "window_wall_ns": 7000000000, "window_threads": "2/3"}"#,
        )
        .unwrap();
        let c = read_selfcost(&windowed).unwrap();
        assert!((c.steady_share().unwrap() - 0.01).abs() < 1e-12);
        assert!(c.threads_changed());
        let ended = dir.join("ended.json");
        std::fs::write(
            &ended,
            r#"{"cpu_ticks": 1, "clk_tck": 100, "vmhwm_kib": 2, "wait_maxrss_kib": 3, "wall_ns": 1,
                "window_cpu_ns": null, "window_wall_ns": null, "window_threads": null}"#,
        )
        .unwrap();
        assert_eq!(read_selfcost(&ended).unwrap().steady_share(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
