//! The decisions of the follow loop, apart from its I/O: when the run is over, when lingering
//! descendants have had their time, what a signal to montrace becomes, when a `--limit` is
//! breached and the stragglers get SIGKILL, and when a tracked process counts as vanished. Each
//! kind of input has its method; time comes in as an argument and signals go out through the
//! `send` function given at creation, so the tests drive it with made-up events and clocks.
use std::{
    collections::HashSet,
    time::{Duration, Instant},
};

use crate::{
    follow::launch::Received, follow::limits, follow::recorder::Recorder, store::summary_json,
    units,
};

use super::{FollowConfig, Outcome};

/// How long after the command's exit montrace says which descendants it still waits for.
pub const LINGER_NOTICE_AFTER: Duration = Duration::from_secs(1);

/// How long after the command was reaped a `--linger` that has run out still waits for the
/// command's own exit event: the forks it made just before it exited come before that event, and
/// reach montrace a drain later (microseconds from its own ring buffer, a drain of the agent's,
/// 2 ms, through the agent). Without it, `--linger 0s` could end the run before the command's
/// last children are known.
pub const ROOT_EXIT_EVENT_WAIT: Duration = Duration::from_millis(500);

/// Whether the loop goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    Continue,
    Stop,
}

/// Sends a signal to the tracked processes, given parents first as (pid, start time): in a run
/// `pidfd::signal_tree`, which signals only those that are still themselves.
pub type Send<'s> = Box<dyn FnMut(&[crate::follow::pidfd::Identity], i32) + 's>;

pub struct Follower<'c, 's> {
    cfg: &'c FollowConfig<'c>,
    pub outcome: Outcome,
    /// When montrace started (elapsed time for `--limit wall` and breaches).
    started: Instant,
    root_done: bool,
    root_exited_at: Option<Instant>,
    /// When the wait ends: `--linger` after the command's exit, or attach's `--duration`.
    deadline: Option<Instant>,
    /// After a limit breach: when the stragglers get SIGKILL.
    kill_at: Option<Instant>,
    wall_limit_at: Option<Instant>,
    /// Interrupting signals received so far (see [`escalation`]).
    interrupts: u32,
    said_lingering: bool,
    /// Tracked pids missing from /proc at the last liveness check.
    missing_before: HashSet<u32>,
    send: Send<'s>,
}

impl<'c, 's> Follower<'c, 's> {
    /// `started`: when montrace started; `now`: the loop's start.
    pub fn new(cfg: &'c FollowConfig<'c>, started: Instant, now: Instant, send: Send<'s>) -> Self {
        let wall_limit_at = cfg.opts.limits.iter().find_map(|l| match l {
            limits::Limit::Wall(d) => Some(now + *d),
            _ => None,
        });
        Follower {
            cfg,
            outcome: Outcome::default(),
            started,
            root_done: !cfg.root_is_child,
            root_exited_at: None,
            deadline: cfg.stop_after.map(|d| now + d),
            kill_at: None,
            wall_limit_at,
            interrupts: 0,
            said_lingering: false,
            missing_before: HashSet::new(),
            send,
        }
    }

    pub fn root_done(&self) -> bool {
        self.root_done
    }
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }
    pub fn kill_at(&self) -> Option<Instant> {
        self.kill_at
    }
    /// When `--limit wall` runs out (once no breach is recorded yet).
    pub fn wall_limit_at(&self) -> Option<Instant> {
        self.wall_limit_at.filter(|_| self.outcome.breach.is_none())
    }

    /// The command was reaped: from now on only its descendants keep the run going, for at most
    /// `--linger`.
    pub fn root_exited(&mut self, status: i32, now: Instant) {
        self.outcome.wait_status = status;
        self.root_done = true;
        self.root_exited_at = Some(now);
        self.deadline = self.cfg.linger.map(|d| now + d);
    }

    /// Signals montrace received. `run` passes them on and escalates; for `attach` (the
    /// processes are not montrace's) any of them ends the monitoring: [`Next::Stop`].
    pub fn on_signals(&mut self, received: &[Received], recorder: &Recorder) -> Next {
        if !self.cfg.root_is_child && !received.is_empty() {
            self.outcome.stopped_by_signal = received.first().map(|r| r.signal);
            return Next::Stop;
        }
        for &received in received {
            self.interrupts += 1;
            let Some(signal) = escalation(self.interrupts, received) else {
                continue;
            };
            let pids = recorder.tracker.live_identities();
            (self.send)(&pids, signal);
            self.outcome.signals_forwarded.push(signal);
            if self.interrupts >= 2 {
                crate::say!(
                    "montrace: {} sent to the {} processes of the tree{}",
                    signal_name(signal),
                    pids.len(),
                    if signal == libc::SIGKILL {
                        ""
                    } else {
                        " (once more: SIGKILL)"
                    }
                );
            }
        }
        Next::Continue
    }

    /// After a breach's grace time: SIGKILL to whatever of the tree is left.
    pub fn on_kill_time(&mut self, recorder: &Recorder) {
        (self.send)(&recorder.tracker.live_identities(), libc::SIGKILL);
        self.kill_at = None;
    }

    /// The liveness check after the command's exit (eBPF only). An exit event is queued at the
    /// process's final context switch, which its parent can beat by microseconds when it reaps
    /// it: a tracked pid missing from /proc on two checks in a row (with drains between) lost
    /// its exit event, and is ended as vanished. `gone`: the live pids missing from /proc now.
    pub fn on_liveness(&mut self, gone: HashSet<u32>, recorder: &mut Recorder, now_boot_ns: u64) {
        let vanished: Vec<u32> = gone.intersection(&self.missing_before).copied().collect();
        recorder.guarded(|r| {
            for pid in vanished {
                r.tracker.vanished(pid, now_boot_ns);
            }
            r.store_finished();
        });
        self.missing_before = gone;
    }

    /// The wait is over (`--linger` or `--duration`): the run ends, with whatever is still
    /// running marked as such, once the command's own exit event is in (at most
    /// [`ROOT_EXIT_EVENT_WAIT`] after it was reaped).
    pub fn on_deadline(&mut self, recorder: &Recorder, now: Instant) -> Next {
        let awaiting_root_event = self
            .root_exited_at
            .is_some_and(|at| now < at + ROOT_EXIT_EVENT_WAIT)
            && recorder.tracker.live_record(self.cfg.root_pid).is_some();
        if awaiting_root_event {
            self.deadline = Some(now + Duration::from_millis(2));
            return Next::Continue;
        }
        self.outcome.linger_expired = recorder.tracker.live_count() > 0;
        Next::Stop
    }

    /// After every input: the first `--limit` breached is recorded, and the tree gets SIGTERM,
    /// parents first (none carries on after a child it waits for is killed), then SIGKILL after
    /// `--kill-grace`.
    pub fn check_limits(&mut self, recorder: &Recorder, now: Instant) {
        let opts = self.cfg.opts;
        if self.outcome.breach.is_some() || opts.limits.is_empty() || recorder.is_broken() {
            return;
        }
        let elapsed = now.saturating_duration_since(self.started);
        let usage = recorder.usage(elapsed);
        if let Some((limit, value)) = limits::first_breach(&opts.limits, &usage) {
            self.outcome.breach = Some(summary_json::LimitBreach {
                limit: limit.name().to_string(),
                threshold: limit.threshold(),
                value,
                time: units::rfc3339(crate::host::realtime_ns()),
                elapsed_s: elapsed.as_secs_f64(),
            });
            (self.send)(&recorder.tracker.live_identities(), libc::SIGTERM);
            self.kill_at = Some(now + opts.kill_grace);
        }
    }

    /// The command is reaped and no process of the tree is left (a broken recorder cannot say
    /// when the descendants are gone: then the command's end is the run's).
    pub fn is_done(&self, recorder: &Recorder) -> bool {
        self.root_done && (recorder.tracker.live_count() == 0 || recorder.is_broken())
    }

    /// Once, [`LINGER_NOTICE_AFTER`] the command's exit while descendants still run (and not
    /// `--quiet`): which ones montrace waits for.
    pub fn lingering_notice(&mut self, recorder: &Recorder, now: Instant) -> Option<String> {
        let at = self.root_exited_at?;
        if self.said_lingering
            || self.cfg.opts.quiet
            || now.saturating_duration_since(at) < LINGER_NOTICE_AFTER
            || recorder.tracker.live_count() == 0
        {
            return None;
        }
        self.said_lingering = true;
        Some(lingering_notice(
            &recorder.tracker.live_names(5),
            recorder.tracker.live_count(),
            self.cfg.linger,
        ))
    }
}

/// What montrace says, once, while it waits for the processes the command left running.
pub fn lingering_notice(oldest: &[(u32, String)], live: usize, linger: Option<Duration>) -> String {
    let mut names: Vec<String> = oldest
        .iter()
        .map(|(pid, comm)| format!("{comm} ({pid})"))
        .collect();
    if live > oldest.len() {
        names.push(format!("and {} more", live - oldest.len()));
    }
    let until = match linger {
        Some(d) => format!("at most {d:?} (--linger)"),
        None => "until they end (--linger DURATION limits the wait)".into(),
    };
    let processes = if live == 1 { "process" } else { "processes" };
    format!(
        "montrace: the command exited; waiting {until} for {live} {processes} it left running: \
         {}. Ctrl-C twice sends them SIGTERM, three times SIGKILL",
        names.join(", ")
    )
}

/// What montrace sends to the tree for the `count`-th interrupting signal it received: the
/// first is passed on as it is (unless the terminal already delivered it to the command's
/// process group), the second becomes SIGTERM to every process of the tree, the third and later
/// SIGKILL. (`pidfd::signal_tree` adds SIGCONT to a terminating signal, for stopped processes.)
pub fn escalation(count: u32, received: Received) -> Option<i32> {
    match count {
        0 | 1 if received.from_terminal => None,
        0 | 1 => Some(received.signal),
        2 => Some(libc::SIGTERM),
        _ => Some(libc::SIGKILL),
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGTERM => "SIGTERM",
        libc::SIGKILL => "SIGKILL",
        libc::SIGINT => "SIGINT",
        libc::SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::RecordOptions;
    use crate::follow::Options;
    use crate::kernel::decode::{ExitStats, KernelEvent};
    use crate::sampling::sampler::MemoryDetail;
    use crate::tracking::tracker::{Clock, Tracker};
    use clap::Parser as _;
    use std::{cell::RefCell, rc::Rc};

    /// Pids above the kernel's largest (2^22): no real process is ever signalled by mistake.
    const ROOT: u32 = 4_194_400;
    const CHILD: u32 = 4_194_401;

    fn options(args: &[&str]) -> Options {
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            record: RecordOptions,
        }
        let argv = std::iter::once("montrace").chain(args.iter().copied());
        Wrap::try_parse_from(argv).unwrap().record.recording()
    }

    fn config(opts: &Options, linger: Option<Duration>) -> FollowConfig<'_> {
        FollowConfig {
            opts,
            root_pid: ROOT,
            root_is_child: true,
            linger,
            stop_after: None,
            started_boot_ns: 0,
        }
    }

    /// A recorder (writing into `dir`) whose tree is ROOT and its child CHILD, both alive.
    fn recorder(dir: &std::path::Path) -> Recorder<'static> {
        let clock = Clock { boot_to_wall_ns: 0 };
        let mut tracker = Tracker::new(clock);
        tracker.add_root(ROOT, 1_000, "sh");
        let mut recorder =
            Recorder::create(dir, tracker, ROOT, MemoryDetail::Basic, None, None).unwrap();
        recorder.on_event(&KernelEvent::Fork {
            time_ns: 2_000,
            pid: CHILD,
            start_ns: 2_000,
            parent_pid: ROOT,
            comm: "sleep".into(),
        });
        recorder
    }

    fn exit(pid: u32, start_ns: u64) -> KernelEvent {
        KernelEvent::Exit {
            time_ns: 5_000,
            pid,
            start_ns,
            whole_process: true,
            comm: "x".into(),
            stats: ExitStats::default(),
        }
    }

    type Sent = Rc<RefCell<Vec<(Vec<u32>, i32)>>>;

    fn sender() -> (Sent, Send<'static>) {
        let sent: Sent = Rc::default();
        let log = sent.clone();
        (
            sent,
            Box::new(move |tracked: &[crate::follow::pidfd::Identity], signal| {
                let pids = tracked.iter().map(|&(pid, _)| pid).collect();
                log.borrow_mut().push((pids, signal))
            }),
        )
    }

    #[test]
    fn a_linger_of_zero_still_waits_for_the_commands_own_exit_event() {
        let dir = tempfile::tempdir().unwrap();
        let mut rec = recorder(dir.path());
        let opts = options(&[]);
        let cfg = config(&opts, Some(Duration::ZERO));
        let t0 = Instant::now();
        let (_, send) = sender();
        let mut f = Follower::new(&cfg, t0, t0, send);
        // Reaped, but its exit event (and the fork just before it) not taken in yet.
        f.root_exited(0, t0);
        let soon = t0 + Duration::from_millis(1);
        assert_eq!(f.on_deadline(&rec, soon), Next::Continue);
        assert_eq!(f.deadline(), Some(soon + Duration::from_millis(2)));
        rec.on_event(&exit(ROOT, 1_000));
        assert_eq!(f.on_deadline(&rec, soon), Next::Stop);
        assert!(f.outcome.linger_expired, "the child is left running");

        // An exit event that never comes (lost) holds the end for a bounded time only.
        let lost = tempfile::tempdir().unwrap();
        let mut rec = recorder(lost.path());
        let mut f = Follower::new(&cfg, t0, t0, Box::new(|_: &[_], _| {}));
        f.root_exited(0, t0);
        assert_eq!(f.on_deadline(&rec, t0 + ROOT_EXIT_EVENT_WAIT), Next::Stop);
        rec.on_event(&exit(CHILD, 2_000));
    }

    #[test]
    fn the_run_waits_for_descendants_until_the_linger_time() {
        let dir = tempfile::tempdir().unwrap();
        let mut rec = recorder(dir.path());
        let opts = options(&[]);
        let cfg = config(&opts, Some(Duration::from_millis(300)));
        let t0 = Instant::now();
        let (_, send) = sender();
        let mut f = Follower::new(&cfg, t0, t0, send);
        assert_eq!(f.deadline(), None, "no deadline before the command exits");
        rec.on_event(&exit(ROOT, 1_000));
        f.root_exited(7 << 8, t0 + Duration::from_secs(1));
        assert!(!f.is_done(&rec), "the child still runs");
        assert_eq!(
            f.deadline(),
            Some(t0 + Duration::from_millis(1_300)),
            "--linger counts from the command's exit"
        );
        assert_eq!(
            f.on_deadline(&rec, t0 + Duration::from_millis(1_300)),
            Next::Stop
        );
        assert!(f.outcome.linger_expired);
        assert_eq!(f.outcome.wait_status, 7 << 8);
    }

    #[test]
    fn the_run_ends_when_the_last_descendant_does() {
        let dir = tempfile::tempdir().unwrap();
        let mut rec = recorder(dir.path());
        let opts = options(&[]);
        let cfg = config(&opts, None);
        let t0 = Instant::now();
        let (_, send) = sender();
        let mut f = Follower::new(&cfg, t0, t0, send);
        rec.on_event(&exit(ROOT, 1_000));
        f.root_exited(0, t0);
        assert_eq!(f.deadline(), None, "without --linger, no deadline");
        assert!(!f.is_done(&rec));
        let notice = f
            .lingering_notice(&rec, t0 + LINGER_NOTICE_AFTER)
            .expect("montrace names what it waits for");
        assert!(notice.contains(&format!("sleep ({CHILD})")), "{notice}");
        assert_eq!(
            f.lingering_notice(&rec, t0 + 2 * LINGER_NOTICE_AFTER),
            None,
            "once"
        );
        rec.on_event(&exit(CHILD, 2_000));
        assert!(f.is_done(&rec));
        assert!(!f.outcome.linger_expired);
    }

    #[test]
    fn a_breached_limit_sends_sigterm_then_sigkill_after_the_grace() {
        let dir = tempfile::tempdir().unwrap();
        let rec = recorder(dir.path());
        let opts = options(&["--limit", "procs=1", "--kill-grace", "2s"]);
        let cfg = config(&opts, None);
        let t0 = Instant::now();
        let (sent, send) = sender();
        let mut f = Follower::new(&cfg, t0, t0, send);
        let later = t0 + Duration::from_millis(500);
        f.check_limits(&rec, later);
        let breach = f.outcome.breach.clone().expect("2 processes > procs=1");
        assert_eq!((breach.limit.as_str(), breach.value), ("procs", 2.0));
        assert_eq!(
            *sent.borrow(),
            [(vec![ROOT, CHILD], libc::SIGTERM)],
            "parents first"
        );
        assert_eq!(f.kill_at(), Some(later + Duration::from_secs(2)));
        // Recorded once: the next input does not breach again.
        f.check_limits(&rec, later + Duration::from_millis(100));
        assert_eq!(sent.borrow().len(), 1);
        f.on_kill_time(&rec);
        assert_eq!(sent.borrow()[1], (vec![ROOT, CHILD], libc::SIGKILL));
        assert_eq!(f.kill_at(), None);
    }

    #[test]
    fn a_pid_missing_from_proc_twice_in_a_row_vanished() {
        let dir = tempfile::tempdir().unwrap();
        let mut rec = recorder(dir.path());
        let opts = options(&[]);
        let cfg = config(&opts, None);
        let t0 = Instant::now();
        let (_, send) = sender();
        let mut f = Follower::new(&cfg, t0, t0, send);
        rec.on_event(&exit(ROOT, 1_000));
        f.root_exited(0, t0);
        // Once missing: its exit event may still be on its way.
        f.on_liveness(HashSet::from([CHILD]), &mut rec, 10_000);
        assert_eq!(rec.tracker.live_count(), 1);
        // Back (a check that raced the exit): the count starts again.
        f.on_liveness(HashSet::new(), &mut rec, 20_000);
        f.on_liveness(HashSet::from([CHILD]), &mut rec, 30_000);
        assert_eq!(rec.tracker.live_count(), 1);
        // Missing twice in a row: vanished, and the run can end.
        f.on_liveness(HashSet::from([CHILD]), &mut rec, 40_000);
        assert_eq!(rec.tracker.live_count(), 0);
        assert_eq!(rec.tracker.vanished_count(), 1);
        assert!(f.is_done(&rec));
    }

    #[test]
    fn interrupting_signals_escalate() {
        let dir = tempfile::tempdir().unwrap();
        let rec = recorder(dir.path());
        let opts = options(&[]);
        let cfg = config(&opts, None);
        let t0 = Instant::now();
        let (sent, send) = sender();
        let mut f = Follower::new(&cfg, t0, t0, send);
        let ctrl_c = Received {
            signal: libc::SIGINT,
            from_terminal: true,
        };
        // The terminal delivered the first Ctrl-C to the command itself.
        assert_eq!(f.on_signals(&[ctrl_c], &rec), Next::Continue);
        assert!(sent.borrow().is_empty());
        f.on_signals(&[ctrl_c], &rec);
        f.on_signals(&[ctrl_c, ctrl_c], &rec);
        let signals: Vec<i32> = sent.borrow().iter().map(|(_, s)| *s).collect();
        assert_eq!(signals, [libc::SIGTERM, libc::SIGKILL, libc::SIGKILL]);
        assert_eq!(sent.borrow()[0].0, [ROOT, CHILD], "the whole tree");
        // A SIGTERM sent to montrace by another process is passed on as it is.
        let (sent, send) = sender();
        let mut f = Follower::new(&cfg, t0, t0, send);
        let term = Received {
            signal: libc::SIGTERM,
            from_terminal: false,
        };
        f.on_signals(&[term], &rec);
        assert_eq!(*sent.borrow(), [(vec![ROOT, CHILD], libc::SIGTERM)]);
        assert_eq!(f.outcome.signals_forwarded, [libc::SIGTERM]);
    }

    #[test]
    fn attach_stops_at_the_first_signal() {
        let dir = tempfile::tempdir().unwrap();
        let rec = recorder(dir.path());
        let opts = options(&[]);
        let mut cfg = config(&opts, None);
        cfg.root_is_child = false;
        cfg.stop_after = Some(Duration::from_secs(5));
        let t0 = Instant::now();
        let (sent, send) = sender();
        let mut f = Follower::new(&cfg, t0, t0, send);
        assert!(f.root_done(), "attach waits for no command");
        assert_eq!(f.deadline(), Some(t0 + Duration::from_secs(5)));
        let int = Received {
            signal: libc::SIGINT,
            from_terminal: true,
        };
        assert_eq!(f.on_signals(&[int], &rec), Next::Stop);
        assert_eq!(f.outcome.stopped_by_signal, Some(libc::SIGINT));
        assert!(
            sent.borrow().is_empty(),
            "someone else's processes get nothing"
        );
    }
}
