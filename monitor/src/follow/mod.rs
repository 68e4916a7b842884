//! Following a tree, shared by `run` and `attach`: starting the command (`launch`), one
//! recording from its start to its files ([`session`]), the event loop ([`follow`]) and its
//! decisions (`state`), where each input goes (`recorder`), limits, phase marks, the live line,
//! and what happens when the tree is done ([`end`]).
//!
//! ```text
//!  ring buffer / polling ─┐                         ┌─> Recorder (tracker + tables)
//!  sampler tick ──────────┤                         │
//!  mark socket ───────────┼─> follow (select!) ─────┤
//!  signalfd ──────────────┤      │                  └─> Follower (decisions: linger, limits,
//!  the command's exit ────┘      │                        signals, vanished; pure, unit-tested)
//!                                └─> Outcome ─> end::build_run_info ─> run.json, summary.json
//! ```
//! The loop only waits and routes: each input is one call into the [`Recorder`] (guarded: a
//! panic there stops recording, never the supervision of the command) or the [`Follower`].
pub mod agent;
pub mod end;
pub mod launch;
pub mod limits;
pub mod live;
pub mod marks;
pub mod pidfd;
pub mod recorder;
pub mod session;
pub mod state;
pub mod stream;
pub mod summary;

use std::{
    collections::HashSet,
    os::fd::OwnedFd,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use aya::maps::{MapData, RingBuf};
use tokio::io::{unix::AsyncFd, Interest};

use crate::{
    follow::live::LiveLine,
    follow::marks::{MarkReceiver, MarkServer},
    follow::recorder::Recorder,
    host,
    store::summary_json,
    tracking::polling::Poller,
};
use state::{Follower, Next};

/// What the event loop learnt.
#[derive(Debug, Default)]
pub struct Outcome {
    pub wait_status: i32,
    /// The wait ended (--linger, attach's --duration or Ctrl-C) with processes still running.
    pub linger_expired: bool,
    pub signals_forwarded: Vec<i32>,
    pub breach: Option<summary_json::LimitBreach>,
    /// attach: the signal that ended the monitoring.
    pub stopped_by_signal: Option<i32>,
    /// Marks the command sent over the budget (`marks::MarkBudget`), not recorded.
    pub marks_dropped: u64,
    /// Through the agent: what its ring lost while this run was followed, as it said at the end
    /// (None: it did not say, or no agent).
    pub agent_lost: Option<crate::kernel::ebpf::LostEvents>,
    /// The mark socket's removal, still going on: waited for once the run is written.
    pub mark_socket: Option<crate::follow::marks::SocketRemoval>,
}

/// What a recording is asked for: the options `run` and `attach` share, as the recording reads
/// them (`cli::RecordOptions::recording` makes them from the flags). What only the commands
/// read (`--out`, the stream, the ring buffer, the tracepoints) stays with them.
#[derive(Clone, Debug)]
pub struct Options {
    /// How often a sweep samples the tree.
    pub interval: Duration,
    /// Longest time recorded rows stay in memory before they are written; a recording shorter
    /// than this is not synced at its end (`store::Durability`).
    pub flush_interval: Duration,
    pub memory_detail: crate::sampling::sampler::MemoryDetail,
    /// Sweeps read the tree through the task iterator where it loaded (`--samples-from auto`).
    pub task_iter: bool,
    pub gpu: crate::sampling::gpu::GpuMode,
    /// Write the report at the end (no `--no-report`).
    pub report: bool,
    pub limits: Vec<limits::Limit>,
    /// The OTLP collector's URL.
    pub otlp: Option<String>,
    pub labels: Vec<(String, String)>,
    /// After SIGTERM on a limit breach, how long to wait before SIGKILL.
    pub kill_grace: Duration,
    /// No live line, no summary.
    pub quiet: bool,
}

/// Where lifecycle events come from.
pub enum Source {
    Ebpf(crate::kernel::ebpf::Events),
    /// The resident agent's stream of the tree's ring records (`montrace agent`).
    Agent(agent::Stream),
    Polling(Poller),
}

/// How `follow` runs: `run` follows the command it started; `attach` a process it did not.
pub struct FollowConfig<'a> {
    pub opts: &'a Options,
    pub root_pid: u32,
    /// False for `attach`: nothing waits for the root (it is not montrace's child), and a
    /// SIGINT/SIGTERM/SIGHUP to montrace ends the monitoring instead of being forwarded.
    pub root_is_child: bool,
    /// `run --linger`: how long to wait for descendants once the root exited.
    pub linger: Option<Duration>,
    /// `attach --duration`: stop after this long.
    pub stop_after: Option<Duration>,
    pub started_boot_ns: u64,
}

/// The inputs the loop waits on, registered with the event loop.
struct Inputs {
    ring: Option<AsyncFd<RingBuf<MapData>>>,
    /// The agent's stream, in place of a ring of montrace's own; None again once it closed.
    agent: Option<AsyncFd<agent::Stream>>,
    /// What the agent's end frame said when it came with the tree's last exit, and the stream
    /// then closed (protocol 4): the end has nothing more to ask it.
    agent_ended: Option<crate::kernel::ebpf::LostEvents>,
    /// Whether the tree is followed by kernel events (a ring, or the agent's), not by polling.
    events: bool,
    /// Ring buffer records taken in so far (the drain timer's pace follows it).
    taken: u64,
    poller: Option<Poller>,
    marks: Option<MarkReceiver>,
    signals: AsyncFd<OwnedFd>,
}

impl Inputs {
    fn register(
        source: Source,
        signals: OwnedFd,
        marks: Option<MarkServer>,
    ) -> anyhow::Result<Inputs> {
        let mut agent = None;
        let (ring, poller) = match source {
            Source::Agent(stream) => {
                // SAFETY: the stream owns its socket and keeps it open and unchanged until the
                // AsyncFd drops it.
                agent = Some(
                    unsafe { AsyncFd::register_with_interest(stream, Interest::READABLE) }
                        .map_err(|e| e.into_parts().1)
                        .context("watching the agent's stream")?,
                );
                (None, None)
            }
            Source::Ebpf(events) => {
                let ring = events.into_ring()?;
                // SAFETY: the ring buffer owns its map fd and keeps it open and unchanged until
                // the AsyncFd drops it.
                let ring = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }
                    .map_err(|e| e.into_parts().1)
                    .context("watching the ring buffer")?;
                (Some(ring), None)
            }
            Source::Polling(poller) => (None, Some(poller)),
        };
        let marks = match marks {
            Some(server) => Some(MarkReceiver::spawn(server).context("reading the mark socket")?),
            None => None,
        };
        // SAFETY: the signalfd is owned and stays open until the AsyncFd drops it.
        let signals = unsafe { AsyncFd::register_with_interest(signals, Interest::READABLE) }
            .map_err(|e| e.into_parts().1)
            .context("watching signals")?;
        Ok(Inputs {
            events: ring.is_some() || agent.is_some(),
            ring,
            agent,
            agent_ended: None,
            taken: 0,
            poller,
            marks,
            signals,
        })
    }

    /// Takes in every lifecycle event available now. Polling may also find the command reaped,
    /// and returns its wait status then.
    fn drain(&mut self, recorder: &mut Recorder<'_>, root_pid: u32) -> Option<i32> {
        self.take_from_agent(recorder);
        if let Some(ring) = &mut self.ring {
            take_ring(ring.get_mut(), &mut self.taken, recorder);
            return None;
        }
        let poller = self.poller.as_mut()?;
        let now = host::boottime_ns();
        let mut root_status = None;
        // Scan, reap, and scan again after a reap: a process reaped now may have forked a child
        // since the scan, and that child is still in /proc: the second scan finds it before the
        // tree could look empty.
        loop {
            let (events, vanished) = poller.scan(now);
            recorder.guarded(|r| {
                for event in &events {
                    r.on_event(event);
                }
                for gone in vanished {
                    r.tracker
                        .ended_unobserved(gone.pid, now, &gone.figures, gone.exit_code);
                }
            });
            let (exits, status) = poller.reap(root_pid, now);
            recorder.guarded(|r| exits.iter().for_each(|event| r.on_event(event)));
            root_status = root_status.or(status);
            if exits.is_empty() {
                break;
            }
        }
        recorder.guarded(Recorder::store_finished);
        root_status
    }
}

/// Takes in every record in the ring buffer now (counted in `taken`), then stores the processes
/// they finished.
fn take_ring(ring: &mut RingBuf<MapData>, taken: &mut u64, recorder: &mut Recorder<'_>) {
    while let Some(item) = ring.next() {
        recorder.guarded(|r| r.on_record(&item));
        *taken += 1;
    }
    recorder.guarded(Recorder::store_finished);
}

impl Inputs {
    /// Takes in the records the agent sent so far; its stream closing (the agent stopped) is
    /// said once, and the tree is then followed by what /proc shows (`gone_from_proc`).
    fn take_from_agent(&mut self, recorder: &mut Recorder<'_>) {
        let Some(stream) = &mut self.agent else {
            return;
        };
        let mut taken = 0;
        let read = stream.get_mut().take_in(|record| {
            recorder.guarded(|r| r.on_record(record));
            taken += 1;
        });
        self.taken += taken;
        recorder.guarded(Recorder::store_finished);
        if let (Ok(false), Some(lost)) = (&read, stream.get_ref().ended()) {
            // Answered with the tree's last exit, then closed (protocol 4).
            self.agent_ended = Some(lost);
            self.agent = None;
            return;
        }
        let why = match read {
            Ok(true) => return,
            Ok(false) => "it closed the stream (stopped, or cut this run off)".to_string(),
            Err(err) => err.to_string(),
        };
        crate::say!(
            "montrace: warning: the montrace agent stopped sending this run's events: {why}; the \
             processes that end from now on are seen gone from /proc, without their exit figures"
        );
        self.agent = None;
    }

    /// The command was reaped: asks the agent to read its ring now (see `agent::NUDGE`).
    fn nudge_agent(&mut self) {
        if let Some(stream) = &mut self.agent {
            stream.get_mut().nudge();
        }
    }

    /// The tree is done: tells the agent, takes in the records it still sends and returns what
    /// it says its ring lost while this run was followed; a run it does not tell is said to be
    /// possibly short.
    fn end_agent(
        &mut self,
        recorder: &mut Recorder<'_>,
    ) -> Option<crate::kernel::ebpf::LostEvents> {
        let Some(mut stream) = self.agent.take() else {
            return self.agent_ended.take();
        };
        let mut taken = 0;
        let ended = stream.get_mut().finish(AGENT_END_WAIT, |record| {
            recorder.guarded(|r| r.on_record(record));
            taken += 1;
        });
        self.taken += taken;
        recorder.guarded(Recorder::store_finished);
        let why = match ended {
            Ok(Some(lost)) => return Some(lost),
            Ok(None) => format!("no answer within {} s", AGENT_END_WAIT.as_secs()),
            Err(err) => err.to_string(),
        };
        crate::say!(
            "montrace: warning: the montrace agent did not say how many events its ring buffer \
             lost during this run ({why}): counts may be short, and lost_events in run.json does \
             not know"
        );
        None
    }

    /// After the loop: the agent told (and its losses), the last events and marks, what was
    /// dropped; the loop's outcome completed.
    fn finish(
        &mut self,
        mut outcome: Outcome,
        recorder: &mut Recorder<'_>,
        root_pid: u32,
    ) -> Outcome {
        // The mark thread ends while the agent answers.
        if let Some(marks) = &self.marks {
            marks.stop();
        }
        outcome.agent_lost = self.end_agent(recorder);
        if let Some(status) = self.wind_down(recorder, root_pid) {
            outcome.wait_status = status;
        }
        outcome.marks_dropped = self.marks_dropped();
        outcome.mark_socket = self.marks.take().map(MarkReceiver::removal);
        outcome
    }

    /// Marks the command sent over the budget, said once.
    fn marks_dropped(&self) -> u64 {
        let dropped = self.marks.as_ref().map_or(0, |m| m.tally().dropped);
        if dropped > 0 {
            crate::say!(
                "montrace: warning: the command sent more marks than are kept ({} a second, {} \
                 in all): {dropped} were dropped (marks_dropped in run.json)",
                crate::follow::marks::MARK_RATE,
                crate::follow::marks::MAX_MARKS,
            );
        }
        dropped
    }

    /// After the loop: the last events (polling may reap the command here: its status is
    /// returned) and the marks sent just before the tree ended; a word on datagrams that were not
    /// marks.
    fn wind_down(&mut self, recorder: &mut Recorder<'_>, root_pid: u32) -> Option<i32> {
        // Every mark still waiting is kept or counted; a mark thread that does not answer in a
        // second (stuck closing what a sender passed) keeps its marks, not the run.
        let last_marks = self.marks.as_mut().map(|m| m.finish(MARKS_FINISH_WAIT));
        let status = self.drain(recorder, root_pid);
        recorder.guarded(|r| {
            r.store_finished();
            r.on_marks(last_marks.unwrap_or_default());
        });
        if let Some(receiver) = &self.marks {
            let tally = receiver.tally();
            if let Some(first) = tally.first_invalid {
                crate::say!(
                    "montrace: warning: ignored {} datagrams on the mark socket that were not \
                     marks; the first, from pid {}: {}",
                    tally.invalid,
                    first.pid,
                    first.error
                );
            }
            if receiver.stuck() {
                crate::say!(
                    "montrace: warning: the mark socket's reader did not answer at the end (a \
                     sender passed it a descriptor whose close blocks?): marks sent in the last \
                     moments may be missing"
                );
            }
        }
        status
    }
}

/// The tracked processes that are gone: not in /proc, or their pid now another process's (a
/// lost exit event and a reused pid: montrace must not wait for a stranger).
fn gone_from_proc(recorder: &Recorder<'_>) -> HashSet<u32> {
    pidfd::gone(&recorder.tracker.live_identities())
}

fn interval(period: Duration) -> tokio::time::Interval {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick
}

/// [`interval`] whose first tick is one period from now.
fn interval_after(period: Duration) -> tokio::time::Interval {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick
}

/// Follows the tree until the command has exited and every tracked process is gone (or the
/// linger time after the command's exit has passed, or attach's `--duration`, or a signal to an
/// attach), sampling and flushing on the way.
pub async fn follow(
    source: Source,
    signals: OwnedFd,
    marks: Option<MarkServer>,
    recorder: &mut Recorder<'_>,
    cfg: &FollowConfig<'_>,
) -> anyhow::Result<Outcome> {
    let root_pid = cfg.root_pid;
    let opts = cfg.opts;
    let mut inputs = Inputs::register(source, signals, marks)?;
    let mut root_status = std::pin::pin!(root_status(cfg, inputs.poller.is_none()));
    let mut gpu_opened = recorder.gpu_opened();
    let (mut f, started) = start_follower(cfg);
    let live = LiveLine::new(opts.quiet);
    let mut ticks = Ticks::new(opts);
    let ebpf = inputs.events;

    // Takes in the events available now (polling may reap the command on the way).
    macro_rules! take_in {
        () => {
            if let Some(status) = inputs.drain(recorder, root_pid) {
                f.root_exited(status, Instant::now());
            }
        };
    }

    loop {
        tokio::select! {
            guard = readable(inputs.ring.as_mut()) => {
                let mut guard = guard?;
                take_ring(guard.get_inner_mut(), &mut inputs.taken, recorder);
                guard.clear_ready();
            }
            guard = agent_readable(inputs.agent.as_mut()) => {
                let mut guard = guard?;
                guard.clear_ready();
                inputs.take_from_agent(recorder);
            }
            guard = inputs.signals.readable() => {
                let mut guard = guard?;
                let received = launch::read_signals(guard.get_inner());
                guard.clear_ready();
                // Forks still in the ring buffer first: a child forked just before the signal
                // must get it too.
                take_in!();
                if f.on_signals(&received, recorder) == Next::Stop {
                    inputs.drain(recorder, root_pid);
                    f.outcome.linger_expired = recorder.tracker.live_count() > 0;
                    break;
                }
            }
            status = &mut root_status, if !f.root_done() && inputs.poller.is_none() => {
                let status = status.context("waiting for the command")?;
                f.root_exited(status, Instant::now());
                // Its exit event is in the ring now or soon (sent at its last context switch):
                // taken in at once (the agent's too), not at the next drain the end waits for.
                inputs.nudge_agent();
                take_in!();
                ticks.drain.soon(Instant::now());
            }
            _ = ticks.sample.tick() => {
                // Exits first, so a process that just ended is not sampled as gone.
                take_in!();
                recorder.guarded(Recorder::sample);
            }
            () = gpu_opened_wait(gpu_opened.as_deref()), if gpu_opened.is_some() => {
                // NVML has opened: a sweep now reads the GPUs while the command runs.
                gpu_opened = None;
                take_in!();
                recorder.guarded(Recorder::sample);
            }
            _ = sleep_until(f.wall_limit_at()) => {}
            received = next_marks(inputs.marks.as_mut()) => {
                // Every sender forked before it sent: with the events drained, the tracker
                // knows each one (or has just seen it end).
                take_in!();
                recorder.guarded(|r| r.on_marks(received));
            }
            _ = sleep_until(Some(ticks.drain.at)), if ebpf => {
                take_in!();
                ticks.drain.next(inputs.taken, Instant::now());
            }
            _ = ticks.live.tick(), if live.enabled() => {
                let pids = recorder.tracker.live_pids();
                live.show(&recorder.live_status(started.elapsed()), &pids);
            }
            _ = sleep_until(f.kill_at()) => {
                f.on_kill_time(recorder);
            }
            _ = ticks.flush.tick() => {
                take_in!();
                recorder.guarded(Recorder::flush);
            }
            _ = ticks.liveness.tick(), if f.root_done() && ebpf => {
                take_in!();
                f.on_liveness(gone_from_proc(recorder), recorder, host::boottime_ns());
            }
            _ = sleep_until(f.deadline()) => {
                // The command is reaped already (the deadline starts then), or attach's
                // --duration is over.
                inputs.drain(recorder, root_pid);
                if f.on_deadline(recorder, Instant::now()) == Next::Stop {
                    break;
                }
            }
        }
        if after_wake(&mut f, recorder) == Next::Stop {
            break;
        }
    }
    live.clear();
    Ok(inputs.finish(f.outcome, recorder, root_pid))
}

/// The command's wait status, once it has exited: with eBPF (or the agent) and a command
/// montrace started. Never otherwise (polling reaps every child of montrace itself; attach has
/// no child). The loop learns of the exit from a pidfd, which the kernel makes readable then;
/// where there is none (a kernel before 5.3, a seccomp filter that refuses it), from a thread
/// that waits (one thread fewer to start and end: about 0.1 ms of a short run on the 2-core
/// test machine).
async fn root_status(cfg: &FollowConfig<'_>, not_polling: bool) -> std::io::Result<i32> {
    if !(cfg.root_is_child && not_polling) {
        return std::future::pending().await;
    }
    let root_pid = cfg.root_pid;
    // SAFETY: pidfd_open takes a pid and flags; a descriptor it returns is ours.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, root_pid, 0) };
    let pidfd = (raw >= 0)
        .then(|| {
            // SAFETY: a new descriptor, owned from here on; it stays open until the AsyncFd
            // drops it.
            unsafe {
                let fd = <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw as i32);
                AsyncFd::register_with_interest(fd, Interest::READABLE).ok()
            }
        })
        .flatten();
    if let Some(pidfd) = pidfd {
        // Readable once the command has exited: the wait below returns at once.
        let _ = pidfd.readable().await?;
        return launch::wait_status(root_pid);
    }
    let (status_tx, status_rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = status_tx.send(launch::wait_status(root_pid));
    });
    status_rx
        .await
        .unwrap_or_else(|_| Err(std::io::Error::other("the thread that waited ended")))
}

/// NVML's opening ended; never, where nothing is opening.
async fn gpu_opened_wait(opened: Option<&crate::follow::end::GpuOpened>) {
    match opened {
        Some(opened) => opened.wait().await,
        None => std::future::pending().await,
    }
}

/// The loop's state machine, and when montrace started (`cfg.started_boot_ns`, as an instant).
fn start_follower<'c, 's>(cfg: &'c FollowConfig<'c>) -> (Follower<'c, 's>, Instant) {
    let started = Instant::now()
        - Duration::from_nanos(host::boottime_ns().saturating_sub(cfg.started_boot_ns));
    let f = Follower::new(
        cfg,
        started,
        Instant::now(),
        Box::new(|tracked: &[pidfd::Identity], signal| {
            pidfd::signal_tree(tracked, signal);
        }),
    );
    (f, started)
}

/// After every wake-up of the loop: the limits (a breach is streamed when it happens), then
/// whether the tree is done, else a lingering tree said once.
fn after_wake(f: &mut Follower, recorder: &mut Recorder) -> Next {
    let now = Instant::now();
    let unbreached = f.outcome.breach.is_none();
    f.check_limits(recorder, now);
    if let (true, Some(breach)) = (unbreached, &f.outcome.breach) {
        recorder.stream_breach(breach);
    }
    if f.is_done(recorder) {
        return Next::Stop;
    }
    if let Some(notice) = f.lingering_notice(recorder, now) {
        crate::say!("{notice}");
    }
    Next::Continue
}

/// The loop's timers.
struct Ticks {
    /// The live status line, twice a second.
    live: tokio::time::Interval,
    /// A sweep of every live process and the system (`--interval`).
    sample: tokio::time::Interval,
    /// Buffered rows to closed Parquet parts (`--flush-interval`).
    flush: tokio::time::Interval,
    /// After the command's exit: which tracked pids are gone from /proc (see `on_liveness`).
    liveness: tokio::time::Interval,
    /// The eBPF programs wake montrace only once the ring buffer fills up (a quarter of it);
    /// below that, events are drained on this timer: one wake-up per 20 ms, not one per event,
    /// while events come in, and less often while none do (see [`DrainPace`]).
    drain: DrainPace,
}

/// When the ring buffer is drained next: 20 ms after a drain when records came in since the
/// last one, else twice the last wait, up to 640 ms. A quiet tree (200 sleeping processes)
/// then costs a wake-up or two a second instead of fifty; each sweep drains too, so records
/// never wait longer than the sampling interval either.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DrainPace {
    at: Instant,
    every: Duration,
    /// The records taken in at the last drain.
    seen: u64,
}

impl DrainPace {
    const FAST: Duration = Duration::from_millis(20);
    const SLOW: Duration = Duration::from_millis(640);

    fn new(now: Instant) -> DrainPace {
        DrainPace {
            at: now + Self::FAST,
            every: Self::FAST,
            seen: 0,
        }
    }

    /// Drains in a millisecond, then twice as long each time nothing came, until records come:
    /// the command has exited, and the end of the run waits for its last events.
    fn soon(&mut self, now: Instant) {
        self.every = Duration::from_millis(1);
        self.at = now + self.every;
    }

    /// After a drain at `now`, with `taken` records taken in so far.
    fn next(&mut self, taken: u64, now: Instant) {
        self.every = if taken != self.seen {
            Self::FAST
        } else {
            (self.every * 2).min(Self::SLOW)
        };
        self.seen = taken;
        self.at = now + self.every;
    }
}

impl Ticks {
    fn new(opts: &Options) -> Ticks {
        Ticks {
            live: interval(Duration::from_millis(500)),
            sample: interval(opts.interval),
            // Not at once, like the others: a flush at the start wrote parts of a row or two,
            // which finishing a short run then had to read back and merge (finish).
            flush: interval_after(opts.flush_interval),
            liveness: interval(Duration::from_millis(500)),
            drain: DrainPace::new(Instant::now()),
        }
    }
}

/// The ring buffer once it has records; never, when polling.
async fn readable(
    ring: Option<&mut AsyncFd<RingBuf<MapData>>>,
) -> std::io::Result<tokio::io::unix::AsyncFdReadyMutGuard<'_, RingBuf<MapData>>> {
    match ring {
        Some(ring) => ring.readable_mut().await,
        None => std::future::pending().await,
    }
}

/// The agent's stream once it has something; never, without one.
async fn agent_readable(
    stream: Option<&mut AsyncFd<agent::Stream>>,
) -> std::io::Result<tokio::io::unix::AsyncFdReadyMutGuard<'_, agent::Stream>> {
    match stream {
        Some(stream) => stream.readable_mut().await,
        None => std::future::pending().await,
    }
}

/// The next marks from the mark thread; never, without one.
async fn next_marks(marks: Option<&mut MarkReceiver>) -> Vec<crate::follow::marks::ReceivedMark> {
    match marks {
        Some(marks) => marks.next().await,
        None => std::future::pending().await,
    }
}

/// How long the end of a run waits for the agent's end frame (it comes at the agent's next
/// drain, within milliseconds, unless the agent is stuck).
const AGENT_END_WAIT: Duration = Duration::from_secs(5);

/// How long the end of a run waits for the mark thread's last marks.
const MARKS_FINISH_WAIT: Duration = Duration::from_secs(1);

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::DrainPace;
    use std::time::{Duration, Instant};

    #[test]
    fn the_drain_slows_down_while_nothing_comes_and_speeds_up_at_once() {
        let t0 = Instant::now();
        let mut pace = DrainPace::new(t0);
        assert_eq!(pace.at, t0 + Duration::from_millis(20));
        let waits: Vec<u64> = (0..7)
            .map(|_| {
                pace.next(0, t0);
                pace.every.as_millis() as u64
            })
            .collect();
        assert_eq!(waits, [40, 80, 160, 320, 640, 640, 640]);
        assert_eq!(pace.at, t0 + Duration::from_millis(640));
        // A record since the last drain: back to 20 ms, and it stays there while records come.
        pace.next(3, t0);
        assert_eq!(pace.every, Duration::from_millis(20));
        pace.next(9, t0);
        assert_eq!(pace.every, Duration::from_millis(20));
        pace.next(9, t0);
        assert_eq!(pace.every, Duration::from_millis(40));
        // The command exited: 1 ms, then 2, 4... until its exit event comes.
        pace.soon(t0);
        assert_eq!(pace.at, t0 + Duration::from_millis(1));
        pace.next(9, t0);
        assert_eq!(pace.every, Duration::from_millis(2));
        pace.next(10, t0);
        assert_eq!(pace.every, Duration::from_millis(20));
    }
}
