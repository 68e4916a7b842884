//! One recording, the sequence `run` and `attach` share once the tree's root is known: the
//! recorder and what feeds it (the waits map, OTLP, the task iterator), the event loop, the end
//! of the tree (the programs' figures, the tables closed, git's status), run.json, the report,
//! the stream's `end` line and the printed summary.
//!
//! ```text
//!  run: fork the command, held; cgroup ─┐
//!                                       ├─> Session::start ─> (run: release the command;
//!  attach: find the tree in /proc ──────┘    attach: seed the tree found) ─> Session::follow
//!      ─> Followed ─> (run: the cgroup's totals) ─> Followed::finish ─> RunInfo
//! ```
//!
//! What differs stays with each command: `run` launches, holds, moves into a cgroup and repeats;
//! `attach` finds a tree that is already running and checks it may follow it. The session knows
//! only which of the two its [`Root`] is.
use std::{ffi::OsStr, path::Path, time::Duration};

use anyhow::Context as _;

use crate::{
    fleet::context::Capture,
    follow::{
        end::{self, Ended},
        launch::{self, Identity},
        marks::MarkServer,
        recorder::Recorder,
        stream::Stream,
        FollowConfig, Options, Outcome, Source,
    },
    host,
    kernel::ebpf::{Events, KernelBtf, Load, Probes, TrackingMode},
    sampling::gpu::{GpuMonitor, GpuStatus},
    store::run_json::{CgroupReport, RunInfo},
    tracking::tracker::{Clock, Tracker},
};

/// Loads and attaches the eBPF programs, and says what they cannot count. A failure falls back to
/// polling /proc (said once), unless `required` (`run --require-ebpf`) makes it an error.
pub fn load_probes(
    offsets: &KernelBtf,
    load: &Load,
    quiet: bool,
    required: bool,
) -> anyhow::Result<Option<(Probes, Events)>> {
    match Probes::load(offsets, load) {
        Ok(loaded) => {
            if let (Some(note), TrackingMode::TpBtf) = (&loaded.0.net_note, loaded.0.mode) {
                if !quiet {
                    crate::say!("montrace: note: no socket byte counts: {note}");
                }
            }
            Ok(Some(loaded))
        }
        Err(err) if !required => {
            crate::say!("montrace: warning: {err:#}; following the tree by polling /proc instead");
            Ok(None)
        }
        Err(err) => Err(err),
    }
}

/// The root of the recorded tree.
pub enum Root<'o> {
    /// `run`: the command montrace started (its child, waited for), as `identity` (None: as
    /// montrace itself).
    Launched {
        pid: u32,
        program: &'o OsStr,
        identity: Option<&'o Identity>,
    },
    /// `attach`: a process montrace did not start (nothing waits for it, and a SIGINT, SIGTERM
    /// or SIGHUP to montrace ends the monitoring instead of being forwarded).
    Attached { pid: u32 },
}

impl Root<'_> {
    fn pid(&self) -> u32 {
        match *self {
            Root::Launched { pid, .. } | Root::Attached { pid } => pid,
        }
    }

    /// The user whose git status the run's context reads.
    fn user(&self) -> Option<(u32, u32)> {
        match self {
            Root::Launched { identity, .. } => identity.map(|i| (i.uid, i.gid)),
            Root::Attached { .. } => crate::store::userfs::owner().map(|o| (o.uid, o.gid)),
        }
    }
}

/// How one recording runs: what `run` and `attach` each know, less what only one of them uses.
pub struct Config<'o> {
    pub options: &'o Options,
    pub out_dir: &'o Path,
    pub root: Root<'o>,
    /// `run --linger`: how long to wait for descendants once the root exited.
    pub linger: Option<Duration>,
    /// `attach --duration`: stop after this long.
    pub stop_after: Option<Duration>,
    /// When the recording started: boot-clock and wall-clock ns.
    pub started: (u64, i64),
    /// The last recording of a series: the stream closes after its `end` line.
    pub last: bool,
    /// Print the summary on stderr at the end.
    pub print_summary: bool,
}

/// A recording under way: the recorder, the programs that feed it and the run's context.
pub struct Session<'o, 'r> {
    config: Config<'o>,
    runtime: tokio::runtime::Runtime,
    capture: Capture,
    probes: Option<Probes>,
    recorder: Recorder<'r>,
}

impl<'o, 'r> Session<'o, 'r> {
    /// Opens the run's tables (the root in the tracker when montrace started it) and what feeds
    /// them besides the tree's events: the waits map and the OTLP export.
    pub fn start(
        config: Config<'o>,
        mut probes: Option<Probes>,
        gpu: Option<&'r mut GpuMonitor>,
        stream: Option<&'r mut Stream>,
    ) -> anyhow::Result<Session<'o, 'r>> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .context("starting the event loop")?;
        let capture = Capture::start(host::realtime_ns(), config.root.user());
        let mut tracker = Tracker::new(Clock {
            boot_to_wall_ns: host::boot_to_wall_ns(),
        });
        if let Root::Launched { pid, program, .. } = config.root {
            let approx_start = crate::sampling::procstat::proc_start_boot_ns(pid)
                .unwrap_or_else(|_| host::boottime_ns());
            tracker.add_root(pid, approx_start, &program.to_string_lossy());
        }
        let mut recorder = Recorder::create(
            config.out_dir,
            tracker,
            config.root.pid(),
            config.options.memory_detail,
            gpu,
            stream,
        )?;
        recorder.set_waits(probes.as_mut().and_then(|p| p.take_waits()));
        end::start_otlp(&mut recorder, config.options, &capture.run_id);
        Ok(Session {
            config,
            runtime,
            capture,
            probes,
            recorder,
        })
    }

    /// The recorder, for what a command adds before the tree is followed (the cgroup's readers,
    /// the tree found at an attach).
    pub fn recorder(&mut self) -> &mut Recorder<'r> {
        &mut self.recorder
    }

    /// The loaded programs, if any.
    pub fn probes(&mut self) -> Option<&mut Probes> {
        self.probes.as_mut()
    }

    /// Follows the tree until it is done (or `--duration`, a limit, Ctrl-C), then closes the
    /// recording. A launched command whose following failed is still montrace's to supervise:
    /// the recording stops and montrace waits for it; an attach fails.
    pub fn follow(
        mut self,
        source: Source,
        marks: Option<MarkServer>,
    ) -> anyhow::Result<Followed<'o>> {
        // Loaded while the command started (see `run`'s `load_probes`), for the sweeps.
        if self.config.options.task_iter {
            self.recorder
                .set_task_iter(self.probes.as_mut().and_then(|p| p.take_task_iter().ok()));
        }
        let signals = launch::signal_fd().context("creating the signal fd")?;
        // While the command starts, for the end: the closing of the tables, and the machine's
        // facts for run.json.
        self.recorder.start_closer();
        self.capture.read_machine();
        let root_pid = self.config.root.pid();
        // Through the agent, the programs are the agent's: its mode is the run's.
        let agent_mode = match &source {
            Source::Agent(stream) => Some(stream.mode),
            _ => None,
        };
        let cfg = FollowConfig {
            opts: self.config.options,
            root_pid,
            root_is_child: matches!(self.config.root, Root::Launched { .. }),
            linger: self.config.linger,
            stop_after: self.config.stop_after,
            started_boot_ns: self.config.started.0,
        };
        let followed = self.runtime.block_on(super::follow(
            source,
            signals,
            marks,
            &mut self.recorder,
            &cfg,
        ));
        let outcome = match (followed, &self.config.root) {
            (Ok(outcome), _) => outcome,
            (Err(err), Root::Launched { .. }) => {
                // The command is still montrace's to supervise: record no more, wait for it.
                self.recorder.stop_recording(&format!("{err:#}"));
                Outcome {
                    wait_status: launch::wait_status(root_pid)
                        .unwrap_or(crate::exit_code::EXIT_MONTRACE_FAILED << 8),
                    ..Outcome::default()
                }
            }
            (Err(err), Root::Attached { .. }) => return Err(err),
        };
        let agent_lost = outcome.agent_lost;
        let mut closed = end::close(
            self.recorder,
            self.probes,
            &mut self.capture,
            (self.config.started.0, self.config.options.flush_interval),
        );
        if let Some(mode) = agent_mode {
            // Its losses too: what its ring lost while this run was followed (not known: 0, and
            // the run said so).
            closed.tracking_mode = mode;
            closed.lost = agent_lost.unwrap_or_default();
        }
        Ok(Followed {
            config: self.config,
            outcome,
            closed,
            capture: self.capture,
        })
    }
}

/// Longest wait, once a run is written, for the mark thread to remove its socket (a removal, and
/// a close of the descriptors senders left queued in it, that takes longer is left to the exit).
const MARK_SOCKET_REMOVAL_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// A recording whose tree is done and whose tables are closed.
pub struct Followed<'o> {
    config: Config<'o>,
    outcome: Outcome,
    closed: end::Closed,
    capture: Capture,
}

/// What the command that recorded says of the run at its end.
pub struct Ending {
    pub argv: Vec<String>,
    pub executable: String,
    pub cgroup: CgroupReport,
}

impl Followed<'_> {
    /// The tree's CPU time (user + system), as the recorder counted it.
    pub fn tree_cpu_ns(&self) -> u64 {
        let totals = &self.closed.finished.totals;
        totals.cpu_user_ns + totals.cpu_system_ns
    }

    /// Whether the recording's files were synced (its tables) and are to be (run.json).
    pub fn durability(&self) -> crate::store::Durability {
        self.closed.durability
    }

    /// run.json, the report, the stream's `end` line and the printed summary; `gpu` says what
    /// run.json holds under `gpu` when the recorder had no monitor.
    pub fn finish(self, gpu: &GpuStatus, stream: Option<&mut Stream>, ending: Ending) -> RunInfo {
        let Followed {
            config,
            mut outcome,
            closed,
            capture,
        } = self;
        let mark_socket = outcome.mark_socket.take();
        let end::Closed {
            ended_boot_ns,
            ended_wall_ns,
            lost,
            tracking_mode,
            ebpf_load_ms,
            mut finished,
            durability,
        } = closed;
        let gpu_summary = finished.gpu.take().unwrap_or_else(|| gpu.summary());
        let (exit_code, exit_signal, exit_status, identity) = match config.root {
            Root::Launched { identity, .. } => {
                let (code, signal, status) = end::exit_of(&outcome);
                (code, signal, status, identity)
            }
            // Stopped by a limit: 124 like `run`; otherwise attach itself succeeded.
            Root::Attached { .. } => {
                let status = if outcome.breach.is_some() {
                    crate::exit_code::EXIT_LIMIT_BREACHED
                } else {
                    0
                };
                (None, None, status, None)
            }
        };
        let (run_id, context) = capture.finish();
        let info = end::build_run_info(Ended {
            argv: ending.argv,
            executable: ending.executable,
            started_boot_ns: config.started.0,
            started_wall_ns: config.started.1,
            ended_boot_ns,
            ended_wall_ns,
            gpu: gpu_summary,
            tracking_mode,
            lost,
            ebpf_load_ms,
            identity,
            exit_code,
            exit_signal,
            exit_status,
            outcome,
            finished,
            cgroup: ending.cgroup,
            interval: config.options.interval,
            out_dir: config.out_dir,
            run_id,
            labels: config.options.labels.iter().cloned().collect(),
            context: Some(context),
        });
        end::publish(
            &info,
            stream,
            config.last,
            (config.out_dir, durability),
            (config.print_summary, config.options.report),
        );
        if let Some(removal) = mark_socket {
            removal.wait(MARK_SOCKET_REMOVAL_WAIT);
        }
        info
    }
}
