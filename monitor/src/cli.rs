//! The command line, in one place: every subcommand and flag (the exit statuses montrace gives
//! are `exit_code`'s; a command's own status is passed through).
use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    time::Duration,
};

use clap::{Args, Parser, Subcommand};

use crate::kernel::ebpf::TracepointChoice;
use crate::sampling::gpu::GpuMode;
use crate::sampling::sampler::MemoryDetail;
use crate::units;

#[derive(Debug, Parser)]
#[command(
    name = "montrace",
    version,
    about = "Records the exact process tree of a command and what every process in it used",
    after_help = "Exit status: the command's own (128+N when a signal N killed it); 127 when the \
                  command is not found, 126 when it cannot be executed, 125 when montrace itself \
                  fails, 2 for usage errors."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// Parses montrace's own command line; see [`Cli::parse_args`].
    pub fn parse_command_line() -> Cli {
        Cli::parse_args(std::env::args_os().collect())
    }

    /// Parses `args` (the program's name first), and on an error says it (with the usage, a
    /// suggestion) and exits with status 2, or 0 for `--help` and `--version`.
    ///
    /// `montrace run ...`, whose parse is part of every run's start-up, is parsed against
    /// `run`'s arguments alone: clap builds every argument of every subcommand before it parses,
    /// which took a spaced run 0.36 ms of its start-up on the 2-core test machine (about 0.1 ms
    /// with `run`'s alone). Where that parse fails (a typo, `--help`), the whole command line
    /// parses again, so that errors, suggestions and help are the full CLI's.
    fn parse_args(args: Vec<OsString>) -> Cli {
        Cli::run_only(&args).unwrap_or_else(|| Cli::parse_from(args))
    }

    /// `args` parsed as `montrace run ...` against `run`'s arguments alone; None for anything
    /// else, or anything that does not parse.
    fn run_only(args: &[OsString]) -> Option<Cli> {
        use clap::FromArgMatches as _;
        if args.get(1).is_none_or(|word| word != "run") {
            return None;
        }
        let run = RunArgs::augment_args(clap::Command::new("run"));
        let matches = run.try_get_matches_from(&args[1..]).ok()?;
        let args = RunArgs::from_arg_matches(&matches).ok()?;
        Some(Cli {
            command: Command::Run(args),
        })
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command and follow every process it creates (eBPF needs root: use sudo)
    Run(RunArgs),
    /// Follow a running process and all its descendants until they are gone (needs root)
    Attach(AttachArgs),
    /// Decide whether a candidate run used more than a baseline (exit 1 when it regressed)
    Compare(CompareArgs),
    /// Measure two commands in pairs (A B, B A, ...), each repetition recorded as `run` does,
    /// until a paired test decides (exit 0 pass, 1 regressed, 3 inconclusive)
    Bench(BenchArgs),
    /// Copy run directories into one Hive-partitioned dataset (one folder per table, by date,
    /// host and run id, plus a `runs` table) that DuckDB, Spark and Trino query as it is
    Publish(PublishArgs),
    /// Write the HTML and Markdown report of a run directory
    Report(ReportArgs),
    /// Export a run directory to a Perfetto/Chrome trace, CSV files, or Bencher Metric Format
    Export(ExportArgs),
    /// Mark a phase of a monitored program (run it inside `montrace run`)
    Mark(MarkArgs),
    /// Give this binary the two capabilities (CAP_BPF, CAP_PERFMON) that let every user of the
    /// machine track their own commands exactly, without sudo (run once, with sudo)
    Setcap(SetcapArgs),
    /// Load the eBPF programs once and follow trees for every user's runs, over a unix socket
    /// (needs root; a service: see dist/montrace-agent.service)
    Agent(AgentArgs),
    /// Batch jobs: `montrace slurm task` records one task of a Slurm job step (what the SPANK
    /// plugin of dist/slurm runs as every task; docs/cluster.md)
    Slurm(SlurmArgs),
    /// What ran on this machine and what it used, one row per process that exited, from the
    /// agent's flight recorder (`montrace agent --history`): yours only (root: everyone's)
    History(HistoryArgs),
    /// Say which tracking mode a run would get here, and why: kernel, BTF, capabilities,
    /// cgroups, NVIDIA GPUs
    Doctor,
    /// Print a shell completion script (e.g. `montrace completions bash >
    /// /etc/bash_completion.d/montrace`)
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print a man page, roff (e.g. `montrace man > /usr/local/share/man/man1/montrace.1`,
    /// `montrace man run`), or write every page with --dir
    Man(ManArgs),
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// The subcommand whose page to print (its page is montrace-COMMAND(1)); default: montrace(1)
    pub command: Option<String>,
    /// Write montrace.1 and one page per subcommand (montrace-run.1, ...) into DIR instead
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct SlurmArgs {
    #[command(subcommand)]
    pub command: SlurmCommand,
}

#[derive(Debug, Subcommand)]
pub enum SlurmCommand {
    /// Run this Slurm task's command as `montrace run` would, into DIR/USER/JOB/STEP.TASK,
    /// labelled with the job (id, step, user, partition, account, array index, what it asked
    /// for); when that directory cannot be made, the command runs unrecorded
    Task(SlurmTaskArgs),
    /// Publish the runs of the job that just ended into the site's dataset (what Slurm's
    /// Epilog runs, as root, with the job in its environment). Reads the job's runs with the
    /// job user's identity; always exits 0, since a failing epilog drains the node
    Epilog(SlurmEpilogArgs),
}

#[derive(Debug, Args)]
pub struct SlurmEpilogArgs {
    /// The site's directory for job runs (as given to the plugin's dir=)
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,

    /// The dataset to publish into: a directory, or s3://, gs:// or az://BUCKET/PREFIX
    #[arg(long, value_name = "DEST")]
    pub dataset: String,
}

#[derive(Debug, Args)]
pub struct SlurmTaskArgs {
    /// The site's directory for job runs (each user's part is made by that user, mode 0700)
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,

    /// The node's montrace agent (as MONTRACE_AGENT_SOCKET), unless the job's environment
    /// names one
    #[arg(long, value_name = "PATH")]
    pub agent: Option<PathBuf>,

    /// The task's command, and its arguments
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Where to listen (default: $MONTRACE_AGENT_SOCKET, else /run/montrace/agent.sock); clients
    /// find it there, or where MONTRACE_AGENT_SOCKET names
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,

    /// Size of the kernel-to-agent ring buffer, shared by every run: a power of two (e.g. 64MiB)
    #[arg(long, value_name = "BYTES", default_value = "32MiB", value_parser = parse_ring_size)]
    pub ring_buffer_size: u32,

    /// Which kernel tracepoints to attach: BTF ones (falling back to classic), or force one kind
    #[arg(long, value_enum, default_value = "auto")]
    pub tracepoints: TracepointChoice,

    /// Bytes of records waiting for one client before it is cut off (its run is then followed
    /// through /proc); a client that takes none for 5 s is cut too; the others go on
    #[arg(long, value_name = "BYTES", default_value = "64MiB", value_parser = crate::units::parse_bytes)]
    pub client_buffer: u64,

    /// Keep the flight recorder: every process that exits on the machine (kernel threads
    /// aside), with its exit figures, uid and cgroup, in rolling Parquet files under DIR
    /// (default /var/lib/montrace; made root's alone, 0700), which `montrace history` asks
    /// about. The programs then follow every user process, not only the clients' trees
    #[arg(long, value_name = "DIR", num_args = 0..=1, default_missing_value = "/var/lib/montrace")]
    pub history: Option<PathBuf>,

    /// With --history: the most bytes its files take; the oldest go first
    #[arg(long, value_name = "BYTES", default_value = "1GiB", value_parser = crate::units::parse_bytes)]
    pub history_max_bytes: u64,

    /// With --history: how long a row is kept (e.g. 30d, 12h)
    #[arg(long, value_name = "DURATION", default_value = "30d", value_parser = parse_age)]
    pub history_max_age: Duration,

    /// With --history: how long rows wait in memory before they are written as a file (what a
    /// crash of the agent can lose at most)
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = parse_history_period)]
    pub history_period: Duration,
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// From when: a duration before now (3h, 90m, 2d) or a UTC time (2026-11-26T03:12:00Z)
    #[arg(long, value_name = "WHEN", default_value = "1h", value_parser = parse_when)]
    pub since: i64,

    /// Until when (default: now), as --since
    #[arg(long, value_name = "WHEN", value_parser = parse_when)]
    pub until: Option<i64>,

    /// Only the processes for which every term holds: FIELD OP VALUE, e.g. `comm=make`,
    /// `cpu>1s`, `exit!=0`, `rss>=1GiB`, `cmd~train.py` (fields: pid, ppid, uid, comm, exe, cmd,
    /// cgroup, exit, signal, cpu, user, sys, wall, rss, read, write; `~` is contains)
    #[arg(long = "where", value_name = "FILTER")]
    pub filter: Option<String>,

    /// How to print the rows (json: one object a line)
    #[arg(long, value_enum, default_value = "table")]
    pub format: HistoryFormat,

    /// The most rows to print (the agent answers at most 100000)
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub limit: u32,
}

/// `montrace history --format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum HistoryFormat {
    Table,
    Csv,
    Json,
}

/// A duration that may be given in days too (`30d`): what `--history-max-age` and `--since`
/// take.
fn parse_age(text: &str) -> Result<Duration, String> {
    match text.trim().strip_suffix('d') {
        Some(days) => {
            let days: f64 = days
                .parse()
                .map_err(|_| format!("`{text}` is not a duration: use e.g. 30d, 12h, 90m"))?;
            units::parse_duration(&format!("{}h", days * 24.0))
        }
        None => units::parse_duration(text),
    }
}

fn parse_history_period(text: &str) -> Result<Duration, String> {
    let period = units::parse_duration(text)?;
    if period < Duration::from_millis(100) {
        return Err(format!(
            "--history-period {text} is too short: use at least 100ms"
        ));
    }
    Ok(period)
}

/// `--since`/`--until`: a UTC time, or a duration before now; ns since the Unix epoch.
fn parse_when(text: &str) -> Result<i64, String> {
    if let Some(ns) = units::parse_rfc3339(text.trim()) {
        return Ok(ns);
    }
    let ago =
        parse_age(text).map_err(|e| format!("{e} (or give a UTC time: 2026-11-26T03:12:00Z)"))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Ok(now.saturating_sub(ago).as_nanos() as i64)
}

#[derive(Debug, Args)]
pub struct SetcapArgs {
    /// The installed binary to grant (default: this montrace)
    pub path: Option<PathBuf>,
}

/// `--otlp URL`: an http:// collector address.
fn parse_otlp_url(text: &str) -> Result<String, String> {
    let rest = text.strip_prefix("http://").ok_or_else(|| {
        format!(
            "`{text}`: give the collector's http:// address, e.g. http://127.0.0.1:4318 (this \
             montrace does not speak TLS or gRPC: put a local collector in front)"
        )
    })?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(format!("`{text}`: no host"));
    }
    Ok(text.to_string())
}

/// `--samples-from`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SamplesFrom {
    Auto,
    Procfs,
}

/// How a run is recorded: shared by `run` and `attach`.
#[derive(Debug, Args)]
pub struct RecordOptions {
    /// Run directory to write (default: ./montrace-runs/<UTC time>-<command name>)
    #[arg(long, short = 'o', value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// How often to sample every live process and the system from /proc (at least 10ms)
    #[arg(long, short = 'i', value_name = "DURATION", default_value = "200ms", value_parser = parse_interval)]
    pub interval: Duration,

    /// `full` adds USS/PSS/swap from smaps_rollup, read again when a process's RSS moved or every
    /// 2 s (about 20 µs for a small process, 6 ms more per GiB resident); `basic` skips it. A
    /// process-sample costs about 14 µs besides
    #[arg(long, value_enum, default_value = "full")]
    pub memory_detail: MemoryDetail,

    /// Where the sweeps read each process's CPU, memory, faults and I/O: `auto` from montrace's
    /// task iterator (one binary read of the whole tree, where the BTF tracepoints run; /proc
    /// otherwise), `procfs` from /proc's text files always (descriptors and USS/PSS always
    /// come from /proc)
    #[arg(long, value_enum, default_value = "auto")]
    pub samples_from: SamplesFrom,

    /// Longest time recorded rows stay in memory before they are written to closed Parquet parts
    /// (a crash or kill -9 of montrace loses at most this much). A run shorter than this is not
    /// synced to the disk at its end (docs/schema.md)
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_flush_interval)]
    pub flush_interval: Duration,

    /// Size of the kernel-to-montrace ring buffer: a power of two, at least 4KiB (e.g. 16MiB)
    #[arg(long, value_name = "BYTES", default_value = "8MiB", value_parser = parse_ring_size)]
    pub ring_buffer_size: u32,

    /// Which kernel tracepoints to attach: BTF ones (falling back to classic), or force one kind
    #[arg(long, value_enum, default_value = "auto")]
    pub tracepoints: TracepointChoice,

    /// NVIDIA GPU monitoring through NVML
    #[arg(long, value_enum, default_value = "auto")]
    pub gpu: GpuMode,

    /// Do not write report.html / report.md into the run directory at the end
    #[arg(long)]
    pub no_report: bool,
    /// Write the run as it goes to PATH (a new file), one JSON object per line: each sampling
    /// sweep with the tree's totals, each process start, exec and exit, marks, limit breaches,
    /// and a final line at the end (docs/schema.md, "The live stream"). Not `-`: stdout is the
    /// command's too (use --stream-fd)
    #[arg(long, value_name = "PATH", conflicts_with = "stream_fd", value_parser = crate::follow::stream::parse_path)]
    pub stream: Option<PathBuf>,
    /// Write the live stream to file descriptor N, which the command does not get (e.g.
    /// `--stream-fd 3 3>&1 >&2 | jq`: the stream alone on the pipe)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(3..))]
    pub stream_fd: Option<i32>,

    /// Stop the whole tree when it crosses a limit: `rss=2GiB` (the tree's resident memory,
    /// each memory image once: run.json `tree_memory_peaks.source`),
    /// `cpu=60s` (user + system of the tree), `wall=5m`, `procs=500` (processes started),
    /// `gpu-mem=10GiB` (GPU memory of the tree's processes; needs an NVIDIA GPU).
    /// Repeatable. montrace then exits with 124 and records the breach.
    #[arg(long = "limit", value_name = "KEY=VALUE", value_parser = crate::follow::limits::parse_limit)]
    pub limits: Vec<crate::follow::limits::Limit>,

    /// Send the run as it goes to an OpenTelemetry collector over OTLP/HTTP (protobuf), e.g.
    /// `http://127.0.0.1:4318`: each sweep's process metrics and one span per process. A
    /// collector that is down costs a warning, never the run (docs/fleet.md)
    #[arg(long, value_name = "URL", value_parser = parse_otlp_url)]
    pub otlp: Option<String>,

    /// A label for this run, in run.json, summary.json and a published dataset's `runs` table
    /// (e.g. `--label branch=main --label suite=unit`). Repeatable; a key is letters, digits,
    /// `_`, `-`, `.`
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = crate::fleet::context::parse_label)]
    pub labels: Vec<(String, String)>,

    /// After SIGTERM on a limit breach, how long to wait before SIGKILL
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = units::parse_duration)]
    pub kill_grace: Duration,

    /// Do not print the live status line, the summary, and the notes on what the run goes
    /// without (no run cgroup, no GPU); warnings and errors still print
    #[arg(long, short)]
    pub quiet: bool,
}

impl RecordOptions {
    /// What the recording itself reads of these options.
    pub fn recording(&self) -> crate::follow::Options {
        crate::follow::Options {
            interval: self.interval,
            flush_interval: self.flush_interval,
            memory_detail: self.memory_detail,
            task_iter: self.samples_from == SamplesFrom::Auto,
            gpu: self.gpu,
            report: !self.no_report,
            limits: self.limits.clone(),
            otlp: self.otlp.clone(),
            labels: self.labels.clone(),
            kill_grace: self.kill_grace,
            quiet: self.quiet,
        }
    }
}

#[derive(Debug, Args)]
pub struct AttachArgs {
    /// The process to follow, with every descendant it has now or creates later
    pub pid: u32,

    /// Stop after this long (e.g. 30s, 10m) even if the tree is still running
    #[arg(long, value_name = "DURATION", value_parser = units::parse_duration)]
    pub duration: Option<Duration>,

    /// Where to bind the phase-mark socket (a new name; default: a private directory under /tmp,
    /// said on stderr): the attached program sends its marks there (docs/marks.md)
    #[arg(long, value_name = "PATH")]
    pub mark_socket: Option<PathBuf>,

    #[command(flatten)]
    pub record: RecordOptions,
}

// `montrace report` formats: the report's own type (analysis::report).
pub use crate::analysis::report::ReportFormat;

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A run directory written by `montrace run`
    pub run_dir: PathBuf,
    #[arg(long, value_enum, default_value = "both")]
    pub format: ReportFormat,
    /// Group processes by executable (`exe`), by `comm`, or by a regular expression over the
    /// command line whose first capture group (or whole match) names the group
    #[arg(long, value_name = "exe|comm|REGEX", default_value = "exe")]
    pub group_by: String,
}

/// `montrace export` formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// Chrome/Perfetto trace JSON (open in ui.perfetto.dev)
    Perfetto,
    /// One CSV file per table
    Csv,
    /// Bencher Metric Format (JSON) of the run's summary.json, on stdout unless --out: the
    /// median, min and max of each metric over its repetitions
    Bmf,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// A run directory written by `montrace run`
    pub run_dir: PathBuf,
    #[arg(long, value_enum)]
    pub format: ExportFormat,
    /// Where to write (default: RUN_DIR/trace.json for perfetto, RUN_DIR/csv/ for csv, stdout
    /// for bmf)
    #[arg(long, short = 'o', value_name = "PATH")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct PublishArgs {
    /// Run directories (or `--repeat` series, whose repetitions are published), then the
    /// dataset: a directory (created if missing) or s3://, gs:// or az://BUCKET/PREFIX, e.g.
    /// `montrace publish runs/* /data/montrace`
    #[arg(required = true, num_args = 2.., value_name = "RUN... DEST")]
    pub paths: Vec<String>,
}

#[derive(Debug, Args)]
pub struct MarkArgs {
    /// The phase's name
    pub label: String,
    /// The phase begins here (pair it with `--end LABEL`)
    #[arg(long, conflicts_with = "end")]
    pub begin: bool,
    /// The phase ends here
    #[arg(long)]
    pub end: bool,
}

// `montrace compare` output formats: the verdict's own type (analysis::compare).
pub use crate::analysis::compare::CompareFormat;

/// How a comparison decides and what it prints: shared by `compare` and `bench`.
#[derive(Debug, Args)]
pub struct GateOptions {
    /// Largest allowed increase of a metric, e.g. `cpu=+5%`, `peak_rss=+10%`, `wall=+10%` (wall
    /// time is not gated unless given), or `read=off` to report a metric without gating on it
    /// (repeatable; metrics not named keep their defaults)
    #[arg(long = "max", value_name = "METRIC=+N%")]
    pub max: Vec<String>,
    /// Confidence of the gate's intervals (paired, or Welch's when both sides have at least 2
    /// samples), shared among the gated metrics
    #[arg(long, default_value_t = 0.95, value_parser = parse_confidence)]
    pub confidence: f64,
    /// Output format
    #[arg(long, value_enum, default_value = "text")]
    pub format: CompareFormat,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Exit status: 0 when nothing regressed, 1 when a metric regressed, 2 for usage \
                        errors (missing or unreadable files, different commands), 3 when the \
                        runs could not decide whether a metric regressed (inconclusive). With 2+ \
                        samples a side, Welch's interval of the change of the means decides; the \
                        same runs on both sides (a run compared with itself) pass without a test: \
                        their difference is exactly 0. See docs/ci.md."
)]
pub struct CompareArgs {
    /// BASELINE CANDIDATE, or CANDIDATE alone with --baseline. Each is a run directory, its
    /// summary.json or a directory holding several run directories; the baseline may also be
    /// a dataset written by `montrace publish`
    #[arg(value_name = "[BASELINE] CANDIDATE", required = true, num_args = 1..=2)]
    pub sides: Vec<PathBuf>,
    /// The baseline, e.g. a dataset written by `montrace publish` (its newest runs of the
    /// candidate's command on the candidate's kind of host: see --where, --last, --any-host):
    /// `montrace compare --baseline /data/montrace --where branch=main --last 20 CANDIDATE`
    #[arg(long, value_name = "DEST")]
    pub baseline: Option<PathBuf>,
    #[command(flatten)]
    pub gate: GateOptions,
    /// Compare runs of different commands (an error otherwise)
    #[arg(long)]
    pub allow_different_commands: bool,
    /// With a dataset baseline: only its runs with this label (or `host`, `branch`, `commit`,
    /// `cpu_model`, `ci`), e.g. `--where branch=main` (repeatable: all must match)
    #[arg(long = "where", value_name = "KEY=VALUE", value_parser = crate::fleet::context::parse_label)]
    pub conditions: Vec<(String, String)>,
    /// With a dataset baseline: its newest N matching runs
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub last: u32,
    /// With a dataset baseline: runs from any host, not only those with the candidate's CPU
    /// model and count
    #[arg(long)]
    pub any_host: bool,
}

impl CompareArgs {
    /// The baseline and the candidate: `BASELINE CANDIDATE`, or `--baseline DEST CANDIDATE`.
    pub fn sides(&self) -> Result<(&Path, &Path), String> {
        match (&self.baseline, self.sides.as_slice()) {
            (Some(baseline), [candidate]) => Ok((baseline, candidate)),
            (None, [baseline, candidate]) => Ok((baseline, candidate)),
            (Some(_), _) => Err(
                "with --baseline DEST, give the candidate alone: `montrace compare --baseline \
                 DEST CANDIDATE`"
                    .into(),
            ),
            (None, _) => Err(
                "compare needs a baseline: `montrace compare BASELINE CANDIDATE` or `montrace \
                 compare --baseline DEST CANDIDATE`"
                    .into(),
            ),
        }
    }
}

#[derive(Debug, Args)]
#[command(
    after_help = "Each repetition is a `montrace run` of `/bin/sh -c CMD` in OUT/baseline/rep-NNN \
                  or OUT/candidate/rep-NNN (warm-ups in OUT/warmup/); the commands and the hooks \
                  see MONTRACE_BENCH_SIDE=baseline|candidate, and their output goes to \
                  OUT/bench.log. OUT/verdict.md, verdict.json and bmf.json are the verdict; \
                  stdout has it in --format. Exit status: 0 pass, 1 a metric regressed, 2 usage \
                  error, 3 inconclusive (the budget ended first), 4 a measured command failed, 5 \
                  a hook failed, 6 the repetitions measured a no-op (see --allow-no-op), 125 \
                  montrace failed."
)]
pub struct BenchArgs {
    /// The baseline's command line, run by /bin/sh (e.g. 'make -C base -j2')
    #[arg(long, short = 'a', value_name = "CMD")]
    pub baseline: String,
    /// The candidate's command line
    #[arg(long, short = 'b', value_name = "CMD")]
    pub candidate: String,
    /// Measured repetitions of each side (hyperfine's -r/--runs)
    #[arg(long, short = 'n', visible_alias = "runs", visible_short_alias = 'r', value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(2..))]
    pub repeat: u32,
    /// Unmeasured runs of each side first
    #[arg(long, short = 'w', value_name = "K", default_value_t = 1)]
    pub warmup: u32,
    /// Before every run of either side, this shell command, unrecorded (e.g. 'make clean')
    #[arg(long, short = 'p', value_name = "CMD")]
    pub prepare: Option<String>,
    /// After every run of either side, this shell command, unrecorded
    #[arg(long, short = 'c', value_name = "CMD")]
    pub cleanup: Option<String>,
    /// Also write the verdict as JSON to FILE (as OUT/verdict.json; hyperfine's flag)
    #[arg(long, value_name = "FILE")]
    pub export_json: Option<PathBuf>,
    /// Also write the verdict as Markdown to FILE (as OUT/verdict.md; hyperfine's flag)
    #[arg(long, value_name = "FILE")]
    pub export_markdown: Option<PathBuf>,
    /// Directory to write (default: ./montrace-bench/<UTC time>)
    #[arg(long, short = 'o', value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub gate: GateOptions,
    // -- The gate's (issue 31) flags, together. --
    /// Keep adding pairs past --repeat, up to this many runs of each side, until every gated
    /// metric is decided (pass or regressed); default: --repeat (no more). The series looks at
    /// growing steps (--repeat, then half as many again each time) and divides its level among
    /// the looks (docs/ci.md)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(2..=1000))]
    pub max_runs: Option<u32>,
    /// Stop adding pairs once this much time has passed since the first warm-up (e.g. 20m);
    /// without --max-runs, up to 1000 runs a side: give --max-runs too
    #[arg(long, value_name = "DURATION", value_parser = units::parse_duration)]
    pub max_time: Option<Duration>,
    /// The baseline's directory (its checkout): its command and the hooks run there, and its
    /// git commit and dirty state are recorded
    #[arg(long, value_name = "DIR")]
    pub baseline_dir: Option<PathBuf>,
    /// The candidate's directory (see --baseline-dir)
    #[arg(long, value_name = "DIR")]
    pub candidate_dir: Option<PathBuf>,
    /// The benchmark's name in the verdict and in Bencher (default: the commands, where they
    /// differ `*`)
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Show the commands' and hooks' output on stderr as they run (it goes to OUT/bench.log
    /// otherwise, shown when one fails)
    #[arg(long)]
    pub show_output: bool,
    /// Give a verdict even when the repetitions seem to measure a no-op (much faster than the
    /// warm-up, with less work: a build that is up to date); an error (exit 6) otherwise
    #[arg(long)]
    pub allow_no_op: bool,
}

fn parse_confidence(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number"))?;
    if !(0.5..1.0).contains(&value) {
        return Err(format!(
            "--confidence {text}: use a value between 0.5 and 1, e.g. 0.95"
        ));
    }
    Ok(value)
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub record: RecordOptions,

    /// After the run, publish its directory into the dataset DEST (a directory, or
    /// s3://, gs:// or az://BUCKET/PREFIX), as `montrace publish` does; a failure is a warning
    /// (docs/fleet.md)
    #[arg(long, value_name = "DEST")]
    pub publish: Option<String>,

    /// After the command exits, wait at most this long for its remaining descendants
    /// (e.g. 10s, 2m); those still running are recorded as alive at the end.
    /// Default: wait for all of them.
    #[arg(long, value_name = "DURATION", value_parser = units::parse_duration)]
    pub linger: Option<Duration>,

    /// Run the command as root even when montrace was started through sudo (by default it runs
    /// as the invoking user: SUDO_UID/SUDO_GID); under sudo only where the site allows it
    /// (/etc/montrace/allow-sudo-as-root)
    #[arg(long)]
    pub as_root: bool,

    /// Fail instead of falling back to polling /proc when eBPF cannot be used (not root, no BTF)
    #[arg(long)]
    pub require_ebpf: bool,

    /// Run the command N times into one run directory (rep-001, rep-002, ...); summary.json
    /// holds each repetition's figures and their mean, median and spread
    #[arg(long, short = 'n', value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,

    /// Runs before the measured repetitions, recorded under warmup-NN and left out of the figures
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub warmup: u32,
    /// Before every run (each warm-up and repetition), this shell command, unrecorded, as the
    /// command's user (e.g. 'make clean', so that every repetition does the whole build); a
    /// failure ends the series with its status
    #[arg(long, value_name = "CMD")]
    pub prepare: Option<String>,
    /// After every run, this shell command, unrecorded; a failure ends the series
    #[arg(long, value_name = "CMD")]
    pub cleanup: Option<String>,

    /// The command to run, and its arguments
    // No allow_hyphen_values: a misspelt flag before the command must be a usage error, not the
    // command; once the command's name is seen, everything after it is its arguments.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    let interval = units::parse_duration(text)?;
    if interval < Duration::from_millis(10) {
        return Err(format!("--interval {text} is too short: use at least 10ms"));
    }
    Ok(interval)
}

fn parse_flush_interval(text: &str) -> Result<Duration, String> {
    let interval = units::parse_duration(text)?;
    if interval < Duration::from_millis(100) {
        return Err(format!(
            "--flush-interval {text} is too short: use at least 100ms"
        ));
    }
    Ok(interval)
}

fn parse_ring_size(text: &str) -> Result<u32, String> {
    let bytes = units::parse_bytes(text)?;
    if bytes < 4096 || !bytes.is_power_of_two() || bytes > (1 << 30) {
        return Err(format!(
            "{text} is not a valid ring buffer size: use a power of two between 4KiB and 1GiB"
        ));
    }
    Ok(bytes as u32)
}

#[cfg(test)]
mod tests {
    /// `montrace run ...` parsed against `run`'s arguments alone gives what the whole CLI gives,
    /// and whatever does not parse that way (help, a typo, another subcommand) is left to it.
    #[test]
    fn a_run_parsed_alone_is_the_run_the_whole_cli_parses() {
        let same = [
            vec!["run", "true"],
            vec!["run", "-q", "--no-report", "--out", "x", "--", "ls", "-l"],
            vec![
                "run", "--linger", "2s", "-n", "3", "--warmup", "1", "make", "-j8",
            ],
            vec![
                "run",
                "--interval",
                "25ms",
                "--gpu",
                "off",
                "sh",
                "-c",
                "exit 3",
            ],
            vec!["run", "ls", "-l", "--out", "x"],
            vec![
                "run",
                "--label",
                "a=b",
                "--label",
                "c=d",
                "--",
                "--weird-name",
            ],
        ];
        for argv in same {
            let args: Vec<OsString> = std::iter::once("montrace")
                .chain(argv.clone())
                .map(Into::into)
                .collect();
            let alone = Cli::run_only(&args).unwrap_or_else(|| panic!("{argv:?} not parsed alone"));
            let whole = Cli::try_parse_from(&args).unwrap();
            assert_eq!(format!("{alone:?}"), format!("{whole:?}"), "{argv:?}");
        }
        let left_to_the_cli = [
            vec!["run"],
            vec!["run", "--help"],
            vec!["run", "-h"],
            vec!["run", "--version"],
            vec!["run", "--intervall", "1s", "true"],
            vec!["run", "--repeat", "0", "true"],
            vec!["report", "x"],
            vec!["--help"],
            vec![],
        ];
        for argv in left_to_the_cli {
            let args: Vec<OsString> = std::iter::once("montrace")
                .chain(argv.clone())
                .map(Into::into)
                .collect();
            assert!(Cli::run_only(&args).is_none(), "{argv:?}");
        }
    }

    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn compare_takes_its_baseline_first_or_from_the_baseline_flag() {
        let compare = |argv: &[&str]| {
            let cli = Cli::try_parse_from(["montrace", "compare"].iter().chain(argv)).unwrap();
            let Command::Compare(args) = cli.command else {
                panic!("not compare")
            };
            args.sides()
                .map(|(b, c)| (b.to_path_buf(), c.to_path_buf()))
        };
        let sides = |b: &str, c: &str| Ok((PathBuf::from(b), PathBuf::from(c)));
        assert_eq!(compare(&["base", "cand"]), sides("base", "cand"));
        assert_eq!(
            compare(&["--baseline", "/data/montrace", "cand", "--last", "20"]),
            sides("/data/montrace", "cand")
        );
        assert_eq!(
            compare(&["cand", "--where", "branch=main", "--baseline", "/d"]),
            sides("/d", "cand")
        );
        assert!(compare(&["cand"]).unwrap_err().contains("needs a baseline"));
        assert!(compare(&["--baseline", "/d", "a", "b"])
            .unwrap_err()
            .contains("give the candidate alone"));
        assert!(Cli::try_parse_from(["montrace", "compare", "a", "b", "c"]).is_err());
    }

    #[test]
    fn run_takes_command_with_hyphen_args() {
        let cli =
            Cli::try_parse_from(["montrace", "run", "--linger", "2s", "--", "ls", "-l"]).unwrap();
        let Command::Run(run) = cli.command else {
            panic!("not run")
        };
        assert_eq!(run.command, ["ls", "-l"]);
        assert_eq!(run.linger, Some(Duration::from_secs(2)));
        assert_eq!(run.record.ring_buffer_size, 8 << 20);
        assert_eq!(run.record.interval, Duration::from_millis(200));
        assert_eq!(run.record.flush_interval, Duration::from_secs(5));
        assert_eq!(run.record.memory_detail, MemoryDetail::Full);
        // Without `--`, everything after the command's name is its arguments.
        let cli = Cli::try_parse_from(["montrace", "run", "ls", "-l", "--out", "x"]).unwrap();
        let Command::Run(run) = cli.command else {
            panic!("not run")
        };
        assert_eq!(run.command, ["ls", "-l", "--out", "x"]);
        assert_eq!(run.record.out, None);
    }

    #[test]
    fn short_flags_for_the_frequent_options() {
        let cli = Cli::try_parse_from([
            "montrace", "run", "-o", "d", "-i", "50ms", "-n", "3", "-q", "--", "make",
        ])
        .unwrap();
        let Command::Run(run) = cli.command else {
            panic!("not run")
        };
        assert_eq!(run.record.out, Some(PathBuf::from("d")));
        assert_eq!(run.record.interval, Duration::from_millis(50));
        assert_eq!((run.repeat, run.record.quiet), (3, true));
        let cli =
            Cli::try_parse_from(["montrace", "bench", "-a", "x", "-b", "y", "-o", "o"]).unwrap();
        let Command::Bench(bench) = cli.command else {
            panic!("not bench")
        };
        assert_eq!((bench.baseline.as_str(), bench.repeat), ("x", 5));
        // hyperfine's habits: -w, -r/--runs, -p, -c.
        let cli = Cli::try_parse_from([
            "montrace",
            "bench",
            "-a",
            "x",
            "-b",
            "y",
            "-w",
            "2",
            "-r",
            "7",
            "-p",
            "make clean",
            "-c",
            "true",
        ])
        .unwrap();
        let Command::Bench(bench) = cli.command else {
            panic!("not bench")
        };
        assert_eq!((bench.warmup, bench.repeat), (2, 7));
        assert_eq!(bench.prepare.as_deref(), Some("make clean"));
        assert_eq!(bench.cleanup.as_deref(), Some("true"));
        let cli = Cli::try_parse_from(["montrace", "bench", "-a", "x", "-b", "y", "--runs", "9"])
            .unwrap();
        let Command::Bench(bench) = cli.command else {
            panic!("not bench")
        };
        assert_eq!(bench.repeat, 9);
    }

    #[test]
    fn rejects_bad_flags() {
        assert!(Cli::try_parse_from(["montrace", "run", "--linger", "soon", "--", "ls"]).is_err());
        assert!(
            Cli::try_parse_from(["montrace", "run", "--ring-buffer-size", "3000", "--", "ls"])
                .is_err()
        );
        assert!(Cli::try_parse_from(["montrace", "run"]).is_err());
        assert!(Cli::try_parse_from(["montrace", "run", "--quite", "--", "true"]).is_err());
        assert!(Cli::try_parse_from(["montrace", "run", "--interval", "5ms", "--", "ls"]).is_err());
        assert!(
            Cli::try_parse_from(["montrace", "run", "--memory-detail", "some", "--", "ls"])
                .is_err()
        );
    }
}
