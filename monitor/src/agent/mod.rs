//! `montrace agent`: loads the eBPF programs once, keeps them, and follows trees for clients that
//! may not load them themselves (issue 33). The protocol and the routing of the ring's records
//! are in `follow::agent`; this is the privileged edge: the programs, the socket, the checks.
//!
//! One thread, one event loop: the listener, the ring buffer (read when it wakes montrace, and
//! every [`DRAIN_EVERY`] for the records sent without a wake-up), and one task per client. Each
//! client has a bounded outbox (`--client-buffer` bytes): one that does not read, so that its
//! outbox fills or a write waits [`WRITE_WAIT`], is cut (its tree untracked),
//! and the others go on. A request is one line of at most 4 KiB, read within [`REQUEST_WAIT`].
//! A client that ends (protocol 2: its writing half shut) is answered at once: the ring drained,
//! then its end frame, every loss the ring's counters took while it was followed (a loss names
//! no tree: every client followed then hears of it; `protocol::LossLedger`).
//!
//! Who may follow what: the client's uid comes from `SO_PEERCRED`, never from the request. root
//! may follow any process; another user only a process of their own whose image is not set-uid
//! (its /proc directory is the user's: the kernel gives a non-dumpable process's to root) and
//! that is the client's child, or any such process where Yama allows a user to trace their own
//! (`ptrace_scope` 0). The pid is checked through a pidfd: it is opened first, the checks read
//! /proc, and the pidfd is asked afterwards whether that process still lives, so a pid reused
//! in between is never followed.
//!
//! With `--history DIR` the programs follow the whole machine (every user process, kernel
//! threads never), the clients still each get only their own tree, and every process that
//! exits becomes a row of the flight recorder ([`history`]); `montrace history` asks about
//! them over the same socket, each user seeing only their own processes (root all).
pub mod history;

use std::{
    cell::RefCell,
    collections::{HashMap, HashSet},
    io,
    os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    rc::Rc,
    time::Duration,
};

use anyhow::{bail, Context as _};
use tokio::{
    io::{unix::AsyncFd, AsyncReadExt as _, AsyncWriteExt as _, Interest},
    net::{UnixListener, UnixStream},
    sync::Notify,
};

use crate::{
    follow::agent::{self as protocol, ClientId, LossLedger, Reply, Routes},
    kernel::{
        ebpf::{KernelBtf, Load, Probes, TracepointChoice},
        privilege,
    },
    sampling::host,
    store::model::TrackingMode,
};
use history::{query, recorder::Recorder};

/// How often the ring is read for records sent without a wake-up (the programs wake the reader
/// only once a quarter of the ring is full) while a client is followed: the delay a client's run
/// may see at its end. With no client the ring is read at the recorder's tick (100 ms) or at
/// its wake-ups only: an idle agent's 2 ms timer cost 1.9 % of a core on this machine.
const DRAIN_EVERY: Duration = Duration::from_millis(2);
/// How long a client has to send its request (it connects when the request is ready).
const REQUEST_WAIT: Duration = Duration::from_secs(5);
/// How long one write to a client may wait for it to read.
const WRITE_WAIT: Duration = Duration::from_secs(5);
/// Connections at once (asking, or followed); more are refused.
const MAX_CLIENTS: usize = 4096;
/// Connections of one user that have not asked yet; more of that user's are refused at once, so
/// that one user holding connections open blocks only their own runs, never another user's.
const MAX_ASKING_PER_USER: usize = 256;
/// History questions answered at once (read, filtered and written), over all users, and by
/// one user: more are refused, so that questions cannot take the agent's memory, and one user
/// cannot keep every other's from an answer.
const MAX_HISTORY_ANSWERS: usize = 4;
const MAX_HISTORY_ANSWERS_PER_USER: usize = 2;
/// How long writing one history answer to its client may take.
const HISTORY_WRITE_WAIT: Duration = Duration::from_secs(30);
/// The rows of an answer when the question names no limit.
const DEFAULT_HISTORY_ROWS: usize = 10_000;
/// How often the recorder's buffered rows are looked at (written when due).
const HISTORY_TICK: Duration = Duration::from_millis(100);
/// How long the loop waits when accepting fails (out of descriptors: the connections waiting
/// in the backlog stay there until one closes).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// What `montrace agent` was asked for.
pub struct Options {
    pub socket: PathBuf,
    pub ring_buffer_bytes: u32,
    pub tracepoints: TracepointChoice,
    /// The most bytes waiting for one client before it is cut (`--client-buffer`).
    pub client_buffer: usize,
    /// The flight recorder (`--history`), when it is on: then the whole machine is tracked.
    pub history: Option<history::recorder::Options>,
}

/// Where the agent listens: `--socket`, else `MONTRACE_AGENT_SOCKET`, else the default.
pub fn socket_path(given: Option<PathBuf>) -> PathBuf {
    given
        .or_else(|| {
            std::env::var_os(protocol::SOCKET_ENV)
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from(protocol::DEFAULT_SOCKET))
}

/// Why this process cannot be the agent, if it cannot.
pub fn cannot_serve() -> Option<&'static str> {
    if !host::can_load_ebpf() {
        return Some(
            "the agent loads montrace's eBPF programs for every user: start it as root (`sudo \
             montrace agent`, or the systemd unit in dist/montrace-agent.service)",
        );
    }
    (!in_host_pid_namespace()).then_some(
        "the agent names processes by the host's pids, as the kernel's events do: start it in \
         the host's pid namespace (Kubernetes `hostPID: true`, `docker run --pid=host`)",
    )
}

/// Whether this process is in the host's (the initial) pid namespace, whose inode the kernel
/// fixes (`PROC_PID_INIT_INO`).
fn in_host_pid_namespace() -> bool {
    const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;
    std::fs::metadata("/proc/self/ns/pid").is_ok_and(|m| m.ino() == PROC_PID_INIT_INO)
}

/// Loads the programs and serves clients until SIGTERM or SIGINT; then the programs go.
pub fn serve_until_stopped(options: Options) -> anyhow::Result<()> {
    let Options {
        socket,
        ring_buffer_bytes,
        tracepoints,
        client_buffer,
        history,
    } = options;
    if let Some(history) = &history {
        history::recorder::prepare_dir(&history.dir)?;
    }
    // A descriptor per connection: the soft limit (1,024 on most machines) up to the hard one.
    host::raise_open_files_limit();
    let kernel = KernelBtf::read().context("reading the kernel's BTF")?;
    let (mut probes, events) = Probes::load(
        &kernel,
        &Load {
            ring_buffer_bytes,
            tracepoints,
            iter_later: false,
            // Trees of any age: each client's is its own.
            tree_born_after_ns: 0,
            track_all: history.is_some(),
        },
    )?;
    probes.free_loader();
    if history.is_some() {
        // The programs add every process forked from now on; those alive already are added
        // here (an exit then reads its start time from the task).
        for pid in history::recorder::live_user_processes() {
            drop(probes.track(pid));
        }
    }
    let mode = probes.mode;
    let ring = events.into_ring()?;
    let listener = bind(&socket)?;
    // From here the agent needs only to update the tracked map (bpf(2) asks for CAP_BPF on
    // kernels before 6.5 where unprivileged BPF is off): everything else goes.
    privilege::keep_only(&[privilege::CAP_BPF]).context("dropping capabilities after loading")?;
    crate::say!(
        "montrace agent: the programs are loaded ({}); listening on {}",
        mode.described(),
        socket.display()
    );
    if let Some(history) = &history {
        crate::say!(
            "montrace agent: the flight recorder writes every process that exits on this \
             machine to {} (a file every {}, at most {} kept, none older than {})",
            history.dir.display(),
            whole_units(history.period),
            crate::units::format_bytes(history.max_bytes),
            whole_units(history.max_age),
        );
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .context("starting the event loop")?;
    let local = tokio::task::LocalSet::new();
    let recorder = history.map(Recorder::new);
    let served = local.block_on(
        &runtime,
        serve(listener, ring, probes, mode, client_buffer, recorder),
    );
    drop(std::fs::remove_file(&socket));
    served?;
    crate::say!("montrace agent: stopped; the programs are unloaded");
    Ok(())
}

/// `30d`, `12h`, `5m` for a whole number of them, else seconds (`0.200s`): the durations the
/// agent's start-up line says.
fn whole_units(duration: Duration) -> String {
    let secs = duration.as_secs();
    let whole = duration.subsec_nanos() == 0 && secs > 0;
    match secs {
        s if whole && s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if whole && s % 3_600 == 0 => format!("{}h", s / 3_600),
        s if whole && s % 60 == 0 => format!("{}m", s / 60),
        _ => crate::units::format_seconds_ns(duration.as_nanos() as u64),
    }
}

/// The listening socket: its directory made when missing, a stale socket of an agent that is
/// gone replaced, anything else at the path refused. Any user may connect (0666): each request
/// is checked by who sent it.
fn bind(path: &Path) -> anyhow::Result<std::os::unix::net::UnixListener> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot make {}", dir.display()))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                bail!(
                    "another montrace agent listens on {} already (stop it first)",
                    path.display()
                );
            }
            std::fs::remove_file(path)
                .with_context(|| format!("cannot remove the stale socket {}", path.display()))?;
        }
        Ok(_) => bail!(
            "{} exists and is not a socket: refused (name another path with --socket)",
            path.display()
        ),
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(err).with_context(|| format!("cannot look at {}", path.display())),
    }
    let listener = std::os::unix::net::UnixListener::bind(path)
        .with_context(|| format!("cannot listen on {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// The framed records waiting for one client, and its writer's wake-up.
struct Outbox {
    bytes: Vec<u8>,
    wake: Rc<Notify>,
    /// The client's end was answered (its end frame is in `bytes`): nothing more goes to it,
    /// and its writer closes the connection once `bytes` is written.
    closing: bool,
    /// Protocol 4, a `run`'s tree: the client is answered as its tree's last process exits,
    /// without waiting for it to say that the tree is done.
    ends_with_tree: bool,
}

/// What the loop and the clients' tasks share (one thread: a RefCell, never held across an await).
struct Shared {
    probes: Probes,
    mode: TrackingMode,
    routes: Routes,
    clients: HashMap<ClientId, Outbox>,
    /// The most bytes an outbox may hold (`--client-buffer`).
    outbox_limit: usize,
    /// Connections that have not asked yet, by uid.
    asking: PerUser,
    /// The flight recorder, when it is on.
    recorder: Option<Recorder>,
    /// A recorder's file being written (one at a time).
    writing: bool,
    /// History answers under way, by uid.
    answering: PerUser,
    /// Pid look-ups for clients in pid namespaces of their own under way, by uid.
    resolving: PerUser,
    /// Told when a client starts being followed: the loop then starts its drain timer (its
    /// branch's condition is looked at only when the loop comes round); and when a client ends
    /// or nudges: the loop then drains the ring at once (and answers the one that ended).
    following: Rc<Notify>,
    /// Which client hears of which of the ring's losses.
    ledger: LossLedger,
    /// Clients that said their tree is done (protocol 2), to be answered at the next drain.
    ending: Vec<ClientId>,
    /// A client nudged (protocol 3: its command was reaped): the loop drains the ring at once.
    nudged: bool,
}

impl Shared {
    /// Ends `client`'s part: its outbox gone (its writer woken to see it), its tree's live
    /// processes untracked.
    fn cut(&mut self, client: ClientId) {
        if let Some(outbox) = self.clients.remove(&client) {
            outbox.wake.notify_one();
        }
        for pid in self.routes.remove_client(client) {
            self.probes.untrack(pid);
        }
        self.ledger.forget(client);
        self.ending.retain(|c| *c != client);
    }

    /// Answers the clients that ended (the ring drained): to each, what the ring lost while it
    /// was followed (the counters read once for all), then nothing more. A client whose losses
    /// are not known (the counters unreadable) gets no end frame, and says so.
    fn answer_ending(&mut self) {
        if self.ending.is_empty() {
            return;
        }
        let now = self.probes.lost().ok();
        for client in std::mem::take(&mut self.ending) {
            // Answered once: a client ended by its tree's last exit may say so after.
            let Some(outbox) = self.clients.get_mut(&client).filter(|o| !o.closing) else {
                continue;
            };
            let lost = self.ledger.leave(client, now);
            if let Some(lost) = lost {
                protocol::frame_end(&protocol::FollowEnd { lost }, &mut outbox.bytes);
            }
            outbox.closing = true;
            outbox.wake.notify_one();
        }
    }
}

/// How many of something (connections still to ask, history answers, pid look-ups) each user
/// has under way.
#[derive(Debug, Default)]
struct PerUser(HashMap<u32, usize>);

impl PerUser {
    /// Counts one more of `uid`'s when the total stays within `max` and the user's within
    /// `per_user`; whether it did.
    fn try_add(&mut self, uid: u32, (max, per_user): (usize, usize)) -> bool {
        let total: usize = self.0.values().sum();
        let mine = self.0.get(&uid).copied().unwrap_or(0);
        let room = total < max && mine < per_user;
        if room {
            *self.0.entry(uid).or_default() += 1;
        }
        room
    }

    fn remove(&mut self, uid: u32) {
        if let Some(n) = self.0.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                self.0.remove(&uid);
            }
        }
    }
}

/// One of a user's turns in one of [`Shared`]'s [`PerUser`] counts, given back when dropped
/// (whichever way the task holding it ends).
struct Turn {
    shared: Rc<RefCell<Shared>>,
    uid: u32,
    of: fn(&mut Shared) -> &mut PerUser,
}

impl Turn {
    /// A turn for `uid` in the count `of`, within `limits` (all users', one user's); None when
    /// there is no room.
    fn take(
        shared: &Rc<RefCell<Shared>>,
        uid: u32,
        of: fn(&mut Shared) -> &mut PerUser,
        limits: (usize, usize),
    ) -> Option<Turn> {
        of(&mut shared.borrow_mut())
            .try_add(uid, limits)
            .then(|| Turn {
                shared: Rc::clone(shared),
                uid,
                of,
            })
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        (self.of)(&mut self.shared.borrow_mut()).remove(self.uid);
    }
}

async fn serve(
    listener: std::os::unix::net::UnixListener,
    ring: aya::maps::RingBuf<aya::maps::MapData>,
    probes: Probes,
    mode: TrackingMode,
    outbox_limit: usize,
    recorder: Option<Recorder>,
) -> anyhow::Result<()> {
    let listener = UnixListener::from_std(listener).context("watching the socket")?;
    // SAFETY: the ring buffer owns its map fd and keeps it open and unchanged until the AsyncFd
    // drops it.
    let mut ring = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
        .context("watching the ring")?;
    let shared = Rc::new(RefCell::new(Shared {
        probes,
        mode,
        routes: Routes::default(),
        clients: HashMap::new(),
        outbox_limit,
        asking: PerUser::default(),
        recorder,
        writing: false,
        answering: PerUser::default(),
        resolving: PerUser::default(),
        following: Rc::new(Notify::new()),
        ledger: LossLedger::default(),
        ending: Vec::new(),
        nudged: false,
    }));
    let following = Rc::clone(&shared.borrow().following);
    let mut history_tick = tokio::time::interval(HISTORY_TICK);
    history_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut drain_tick = tokio::time::interval(DRAIN_EVERY);
    drain_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut next_id: ClientId = 0;
    // One clone per connection being served: how many there are.
    let connections = Rc::new(());
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                };
                next_id += 1;
                let accepted_boot_ns = crate::host::boottime_ns();
                let Ok(cred) = stream.peer_cred() else { continue };
                let uid = cred.uid();
                if Rc::strong_count(&connections) > MAX_CLIENTS {
                    tokio::task::spawn_local(refuse(stream, "the agent serves as many runs as it \
                        may at once; try again later"));
                    continue;
                }
                let asking = Turn::take(&shared, uid, |s| &mut s.asking,
                    (usize::MAX, MAX_ASKING_PER_USER));
                let Some(asking) = asking else {
                    tokio::task::spawn_local(refuse(stream, "too many connections of your user \
                        are waiting to ask; try again later"));
                    continue;
                };
                let counted = Rc::clone(&connections);
                let shared = Rc::clone(&shared);
                tokio::task::spawn_local(async move {
                    client(stream, (cred, accepted_boot_ns), asking, next_id, shared).await;
                    drop(counted);
                });
            }
            guard = ring.readable_mut() => {
                let mut guard = guard?;
                drain(guard.get_inner_mut(), &shared);
                guard.clear_ready();
            }
            () = following.notified() => {
                let now = {
                    let mut s = shared.borrow_mut();
                    std::mem::take(&mut s.nudged) || !s.ending.is_empty()
                };
                if now {
                    drain(ring.get_mut(), &shared);
                }
            }
            _ = drain_tick.tick(), if !shared.borrow().clients.is_empty() => {
                drain(ring.get_mut(), &shared);
            }
            _ = history_tick.tick(), if shared.borrow().recorder.is_some() => {
                drain(ring.get_mut(), &shared);
                write_history(&shared, false);
            }
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
        }
    }
    // What the ring still holds, then every row buffered, written before the programs go.
    drain(ring.get_mut(), &shared);
    write_history(&shared, true);
    Ok(())
}

/// Writes the recorder's rows when they are due (`all`: every one, now, the agent stopping), on
/// a thread of the blocking pool; one file at a time.
fn write_history(shared: &Rc<RefCell<Shared>>, all: bool) {
    let (rows, options, lost) = {
        let mut s = shared.borrow_mut();
        if s.writing && !all {
            return;
        }
        let lost = s.probes.lost().ok();
        let Some(recorder) = s.recorder.as_mut() else {
            return;
        };
        let rows = if all {
            recorder.take_all()
        } else {
            match recorder.take_due(std::time::Instant::now()) {
                Some(rows) => rows,
                None => return,
            }
        };
        if rows.is_empty() {
            return;
        }
        let lost_rows = std::mem::take(&mut recorder.lost_rows);
        let options = recorder.options.clone();
        s.writing = true;
        (rows, options, lost.map(|l| (l, lost_rows)))
    };
    if let Some((lost, lost_rows)) = lost {
        if lost.ringbuf_full + lost.track_map_full + lost_rows > 0 {
            crate::say!(
                "montrace agent: so far {} events did not fit the ring, {} processes the tracked \
                 map; {} rows were not kept (a slow write)",
                lost.ringbuf_full,
                lost.track_map_full,
                lost_rows
            );
        }
    }
    let job = move || history::recorder::write(&options, &rows);
    if all {
        report_written(job());
        shared.borrow_mut().writing = false;
        return;
    }
    let shared = Rc::clone(shared);
    tokio::task::spawn_local(async move {
        let written = tokio::task::spawn_blocking(job).await;
        report_written(written.unwrap_or_else(|e| Err(anyhow::anyhow!("the writer failed: {e}"))));
        shared.borrow_mut().writing = false;
    });
}

fn report_written(written: anyhow::Result<history::recorder::Written>) {
    match written {
        Ok(w) if !w.removed.is_empty() => crate::say!(
            "montrace agent: history: {} rows in {}; retention removed {}",
            w.rows,
            w.file,
            w.removed.join(", ")
        ),
        Ok(_) => {}
        Err(err) => crate::say!("montrace agent: history: the rows could not be written: {err:#}"),
    }
}

/// Every record in the ring now, each to its tree's client; a client whose outbox is full is cut.
fn drain(ring: &mut aya::maps::RingBuf<aya::maps::MapData>, shared: &Rc<RefCell<Shared>>) {
    let mut shared = shared.borrow_mut();
    let limit = shared.outbox_limit;
    while let Some(record) = ring.next() {
        if let Some(recorder) = shared.recorder.as_mut() {
            recorder.record(&record);
        }
        let Some((owner, renamed)) = shared.routes.route_named(&record) else {
            continue;
        };
        let Some(outbox) = shared.clients.get_mut(&owner).filter(|o| !o.closing) else {
            continue;
        };
        protocol::frame(renamed.as_deref().unwrap_or(&record), &mut outbox.bytes);
        outbox.wake.notify_one();
        let ends_with_tree = outbox.ends_with_tree;
        if outbox.bytes.len() > limit {
            shared.cut(owner);
        } else if ends_with_tree
            && protocol::is_exit(&record)
            && shared.routes.tree_done(owner)
            && !shared.ending.contains(&owner)
        {
            // Its tree's last exit: answered in this drain, with this record (protocol 4).
            shared.ending.push(owner);
        }
    }
    shared.answer_ending();
}

async fn refuse(mut stream: UnixStream, why: &str) {
    answer(&mut stream, &Reply::refused(why)).await;
}

/// Writes `reply` as one line, waiting at most [`WRITE_WAIT`]; false when it was not written.
async fn answer(to: &mut (impl tokio::io::AsyncWrite + Unpin), reply: &Reply) -> bool {
    let mut line = serde_json::to_vec(reply).unwrap_or_default();
    line.push(b'\n');
    matches!(
        tokio::time::timeout(WRITE_WAIT, to.write_all(&line)).await,
        Ok(Ok(()))
    )
}

/// One client: its request read and checked, its tree tracked, its records written until it
/// closes the connection (or is cut); its tree untracked at the end whatever happened.
async fn client(
    mut stream: UnixStream,
    (cred, accepted_boot_ns): (tokio::net::unix::UCred, u64),
    asking: Turn,
    id: ClientId,
    shared: Rc<RefCell<Shared>>,
) {
    let asked = tokio::time::timeout(REQUEST_WAIT, read_request(&mut stream)).await;
    drop(asking);
    let request = match asked {
        Ok(Ok(request)) => request,
        Ok(Err(why)) => return refuse(stream, &why).await,
        Err(_) => return refuse(stream, "no request in time").await,
    };
    if let Some(question) = request.history {
        return answer_history(stream, cred.uid(), question, shared).await;
    }
    let Some(pid) = request.follow else {
        // A greeting: the mode, and nothing followed.
        let mode = shared.borrow().mode;
        answer(&mut stream, &Reply::accepted(mode)).await;
        return;
    };
    let client_pid = cred.pid().map(|p| p as u32);
    let socket = std::os::fd::AsFd::as_fd(&stream);
    let (client_fd, client_ns) = match client_level(socket, client_pid, accepted_boot_ns) {
        Ok(found) => found,
        Err(why) => return refuse(stream, &why).await,
    };
    let level = client_ns.len() - 1;
    // A client in a pid namespace of its own asks by its pid there (`name`); the agent's is
    // found in /proc, on the blocking pool (it may read every process's status), a few at a
    // time.
    let (pid, name) = match (level, client_pid) {
        (1.., Some(client)) => {
            let limits = (MAX_RESOLVING, MAX_RESOLVING_PER_USER);
            let Some(_turn) = Turn::take(&shared, cred.uid(), |s| &mut s.resolving, limits) else {
                return refuse(
                    stream,
                    "the agent looks up as many pids as it may at once; try again",
                )
                .await;
            };
            let found =
                tokio::task::spawn_blocking(move || resolve_in_namespace(client, &client_ns, pid))
                    .await
                    .unwrap_or_else(|e| Err(format!("pid {pid}: {e}")));
            match found {
                Ok(host) => (host, pid),
                Err(why) => return refuse(stream, &why).await,
            }
        }
        _ => (pid, pid),
    };
    let named = (level > 0).then_some((level + 1, name));
    let checked = may_follow(cred.uid(), client_pid, pid, named)
        .and_then(|()| client_still_there(&client_fd));
    if let Err(why) = checked {
        return refuse(stream, &why).await;
    }
    let wake = Rc::new(Notify::new());
    let accepted = {
        let mut s = shared.borrow_mut();
        if level > 0 {
            s.routes.name_in_namespace(id, level);
        }
        s.routes.add_root(id, pid, name).and_then(|()| {
            let outbox = Outbox {
                bytes: Vec::new(),
                wake: Rc::clone(&wake),
                closing: false,
                ends_with_tree: request.version >= 4 && !request.tree,
            };
            s.clients.insert(id, outbox);
            s.following.notify_one();
            // Its losses count from here: the counters read before its tree is tracked.
            let lost = s.probes.lost().ok();
            s.ledger.join(id, lost);
            s.probes.track(pid).map_err(|e| format!("{e:#}"))
        })
    };
    let skipped = match accepted {
        Ok(()) if request.tree => {
            follow_existing(id, pid, level, cred.uid(), client_pid, &shared).await
        }
        Ok(()) => 0,
        Err(why) => {
            shared.borrow_mut().cut(id);
            return refuse(stream, &why).await;
        }
    };
    stream_records(stream, id, request.version, skipped, &wake, &shared).await;
    shared.borrow_mut().cut(id);
}

/// How many times a `tree` request's descendants are looked for in /proc at most: each look
/// finds those forked by processes not yet tracked during the one before; a tree that still
/// has new ones after this many is followed as far as it was found (its tracked processes'
/// forks are followed by the kernel from then on).
const MAX_TREE_LOOKS: usize = 32;

/// A `tree` request (`attach`): `root` is followed already; its descendants alive now are
/// followed too, each the client may follow (`may_follow`'s rule, less the child rule: they are
/// the tree of a process the client may follow) routed to it and tracked; one it may not is
/// left out with its own descendants. Looks again until a look finds nobody new, as a
/// standalone attach does. The client itself is never part of the tree (a `montrace attach`
/// of its own parent, as Python's `monitor()` is, would find itself there), as a standalone
/// attach never follows its own process. How many were left out (the client aside).
async fn follow_existing(
    id: ClientId,
    root: u32,
    level: usize,
    uid: u32,
    client: Option<u32>,
    shared: &Rc<RefCell<Shared>>,
) -> u32 {
    let mut followed = HashSet::from([root]);
    let mut skipped: HashSet<u32> = client.into_iter().filter(|c| *c != root).collect();
    for _ in 0..MAX_TREE_LOOKS {
        // Read on the blocking pool: a machine's /proc is thousands of files.
        let Ok(parents) = tokio::task::spawn_blocking(read_parents).await else {
            break;
        };
        let (new, left_out) = {
            let mut s = shared.borrow_mut();
            if !s.clients.contains_key(&id) {
                break;
            }
            walk_tree(
                root,
                &parents,
                &followed,
                &skipped,
                |pid| match may_follow_descendant(uid, pid, level) {
                    Follow::Gone => None,
                    Follow::No => Some(false),
                    Follow::Yes(name) => Some(
                        s.routes.add_root(id, pid, name).is_ok() && s.probes.track(pid).is_ok(),
                    ),
                },
            )
        };
        skipped.extend(left_out);
        if new.is_empty() {
            break;
        }
        followed.extend(new);
    }
    skipped.iter().filter(|pid| Some(**pid) != client).count() as u32
}

/// Each process's parent, as /proc says now.
fn read_parents() -> HashMap<u32, u32> {
    let mut parents = HashMap::new();
    crate::sampling::procstat::each_process(|pid, _, stat| {
        parents.insert(pid, stat.ppid);
    });
    parents
}

/// Whether a process of a tree the client follows may be followed for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Follow {
    /// Yes, by this name (its pid in the client's pid namespace).
    Yes(u32),
    No,
    /// It ended before it could be checked.
    Gone,
}

/// One look at `root`'s descendants in `parents` (pid → parent pid), parents before children
/// (pure): a process in `followed` is walked through; one in `skipped`, or that `follow` says
/// not to (Some(false)), is left out with its descendants; one `follow` finds gone (None) too,
/// uncounted. The processes newly followed, and those newly left out.
fn walk_tree(
    root: u32,
    parents: &HashMap<u32, u32>,
    followed: &HashSet<u32>,
    skipped: &HashSet<u32>,
    mut follow: impl FnMut(u32) -> Option<bool>,
) -> (Vec<u32>, Vec<u32>) {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (&pid, &parent) in parents {
        if pid != parent {
            children.entry(parent).or_default().push(pid);
        }
    }
    let (mut new, mut left_out) = (Vec::new(), Vec::new());
    let mut walk = vec![root];
    while let Some(parent) = walk.pop() {
        let mut kids = children.remove(&parent).unwrap_or_default();
        kids.sort_unstable();
        for pid in kids {
            if skipped.contains(&pid) {
                continue;
            }
            if followed.contains(&pid) {
                walk.push(pid);
                continue;
            }
            match follow(pid) {
                Some(true) => {
                    new.push(pid);
                    walk.push(pid);
                }
                Some(false) => left_out.push(pid),
                None => {}
            }
        }
    }
    (new, left_out)
}

/// [`may_follow`] for a descendant of a followed root: root's clients may follow any; another
/// user only a process all of whose uids are theirs and whose /proc directory is theirs (not a
/// set-uid or otherwise non-dumpable image), checked through a pidfd.
fn may_follow_descendant(uid: u32, pid: u32, level: usize) -> Follow {
    let Ok(pidfd) = crate::host::pidfd_open(pid) else {
        return Follow::Gone;
    };
    // Read once, for both what follows (before the pidfd is asked whether the process still
    // lives, so that it is this process's).
    let status = (level > 0 || uid != 0).then(|| status_of(pid));
    let status = status.as_deref().unwrap_or_default();
    // What the client calls it: its pid at the client's level.
    let name = match level {
        0 => Some(pid),
        _ => ns_pids(status).get(level).copied(),
    };
    let Some(name) = name else {
        return Follow::Gone;
    };
    if uid != 0 {
        let facts = ProcessFacts::parse(status);
        let owner = std::fs::metadata(format!("/proc/{pid}"))
            .ok()
            .map(|m| m.uid());
        let (Some(facts), Some(owner)) = (facts, owner) else {
            return Follow::Gone;
        };
        // Ptrace scope 0: the child rule is the root's, checked at the request.
        if decide(uid, None, &facts, owner, 0).is_err() {
            return Follow::No;
        }
    }
    if exited(&pidfd) {
        Follow::Gone
    } else {
        Follow::Yes(name)
    }
}

/// Whether the process of `pidfd` has exited (a pidfd is readable then; asking needs no
/// permission).
fn exited(pidfd: &std::os::fd::OwnedFd) -> bool {
    let mut poll = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(pidfd),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    unsafe { libc::poll(&mut poll, 1, 0) != 0 }
}

/// Writes a followed client's records as they come, until it closes the connection, is cut,
/// or (protocol 2) ends: its writing half shut, it is answered with its end frame at the next
/// drain ([`Shared::answer_ending`]), and the connection closed once that is written.
async fn stream_records(
    mut stream: UnixStream,
    id: ClientId,
    version: u32,
    skipped: u32,
    wake: &Notify,
    shared: &Rc<RefCell<Shared>>,
) {
    let reply = Reply {
        skipped,
        ..Reply::accepted(shared.borrow().mode)
    };
    let (mut reading, mut writing) = stream.split();
    if !answer(&mut writing, &reply).await {
        return;
    }
    let mut ignored = [0u8; 512];
    let mut ending = false;
    let mut last_nudge: Option<tokio::time::Instant> = None;
    let mut nudge_bytes = 0usize;
    loop {
        tokio::select! {
            _ = wake.notified() => {
                // Everything waiting, in one write; no outbox: this client was cut.
                let (batch, closing) = match shared.borrow_mut().clients.get_mut(&id) {
                    Some(outbox) => (std::mem::take(&mut outbox.bytes), outbox.closing),
                    None => break,
                };
                if !batch.is_empty() {
                    let written = tokio::time::timeout(WRITE_WAIT, writing.write_all(&batch)).await;
                    if !matches!(written, Ok(Ok(()))) {
                        break;
                    }
                }
                if closing {
                    break;
                }
            }
            // After its request the client sends only nudges (protocol 3: a drain now, one a
            // millisecond honoured, the rest read and ignored; past MAX_NUDGE_BYTES it is no
            // client's and is cut off). Protocol 2: its writing half shut is its end (answered
            // at the next drain); anything else that ends the read (its close, or a
            // misbehaving client) ends its part.
            read = reading.read(&mut ignored), if !ending => {
                match read {
                    Ok(n) if n > 0 && version >= 3 => {
                        nudge_bytes += n;
                        if nudge_bytes > protocol::MAX_NUDGE_BYTES {
                            break;
                        }
                        let now = tokio::time::Instant::now();
                        if last_nudge.is_none_or(|at| now - at >= protocol::NUDGE_EVERY) {
                            last_nudge = Some(now);
                            let mut s = shared.borrow_mut();
                            s.nudged = true;
                            s.following.notify_one();
                        }
                    }
                    Ok(0) if version >= 2 => {
                        ending = true;
                        let mut s = shared.borrow_mut();
                        s.ending.push(id);
                        s.following.notify_one();
                    }
                    _ => break,
                }
            }
        }
    }
}

/// A history question: read and filtered on a thread of the blocking pool (the event loop goes
/// on serving every other client), the rows the asker may see written back, then the end line.
async fn answer_history(
    mut stream: UnixStream,
    uid: u32,
    question: protocol::HistoryRequest,
    shared: Rc<RefCell<Shared>>,
) {
    let Some(dir) = shared
        .borrow()
        .recorder
        .as_ref()
        .map(|r| r.options.dir.clone())
    else {
        return refuse(
            stream,
            "this agent keeps no history (it was started without --history)",
        )
        .await;
    };
    let filter = match history::filter::parse(&question.filter) {
        Ok(filter) => filter,
        Err(why) => return refuse(stream, &format!("--where: {why}")).await,
    };
    let until_ns = question.until_ns.unwrap_or(i64::MAX);
    if until_ns < question.since_ns {
        return refuse(stream, "--until is before --since").await;
    }
    let limits = (MAX_HISTORY_ANSWERS, MAX_HISTORY_ANSWERS_PER_USER);
    let Some(answering) = Turn::take(&shared, uid, |s| &mut s.answering, limits) else {
        return refuse(
            stream,
            "the agent answers as many history questions as it may at once; try again",
        )
        .await;
    };
    let ask = query::Ask {
        uid,
        since_ns: question.since_ns,
        until_ns,
        filter,
        limit: question
            .limit
            .map_or(DEFAULT_HISTORY_ROWS, |l| l as usize)
            .min(query::MAX_ROWS),
    };
    let mode = shared.borrow().mode;
    let found = tokio::task::spawn_blocking(move || query::answer(&dir, &ask)).await;
    let wrote = async {
        let found = found.map_err(|e| format!("the history could not be read: {e}"))?;
        if !answer(&mut stream, &Reply::accepted(mode)).await {
            return Err(String::new());
        }
        let end = protocol::HistoryEnd {
            end: true,
            rows: found.rows,
            truncated: found.truncated,
            unreadable: found.unreadable,
        };
        let mut tail = serde_json::to_vec(&end).unwrap_or_default();
        tail.push(b'\n');
        let written = tokio::time::timeout(HISTORY_WRITE_WAIT, async {
            stream.write_all(&found.lines).await?;
            stream.write_all(&tail).await
        })
        .await;
        match written {
            Ok(Ok(())) => Ok(()),
            _ => Err(String::new()),
        }
    };
    let result: Result<(), String> = wrote.await;
    drop(answering);
    if let Err(why) = result {
        if !why.is_empty() {
            refuse(stream, &why).await;
        }
    }
}

/// The request line: at most [`protocol::MAX_REQUEST_BYTES`] and its newline.
async fn read_request(stream: &mut UnixStream) -> Result<protocol::Request, String> {
    let mut line = Vec::new();
    let mut byte = [0u8; 256];
    loop {
        let n = stream.read(&mut byte).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the connection closed before a request".into());
        }
        line.extend_from_slice(&byte[..n]);
        if let Some(end) = line.iter().position(|b| *b == b'\n') {
            if end + 1 != line.len() {
                return Err("one request, then nothing until the answer".into());
            }
            line.truncate(end);
            return protocol::parse_request(&line);
        }
        if line.len() > protocol::MAX_REQUEST_BYTES {
            return Err(format!(
                "a request is at most {} bytes",
                protocol::MAX_REQUEST_BYTES
            ));
        }
    }
}

/// A process's pids in each pid namespace from the reader's down to its own: its status's
/// `NSpid:` line (one pid in the reader's own namespace; none when the kernel has no such line).
fn ns_pids(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map(|pids| {
            pids.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// /proc/PID/status as it is now; empty when it cannot be read (a process gone).
fn status_of(pid: u32) -> String {
    crate::host::read_small_file(format!("/proc/{pid}/status")).unwrap_or_default()
}

fn ns_pids_of(pid: u32) -> Vec<u32> {
    ns_pids(&status_of(pid))
}

/// The process that connected, held by a pidfd, and its pids in each pid namespace from the
/// agent's down to its own (`NSpid`): one in the agent's own (the host's, where the pids it
/// asks for are the agent's), more below it (a level of at most `NS_LEVELS`). The pidfd is the
/// kernel's SO_PEERPIDFD where it has one (Linux 6.5): the very process that connected.
/// Elsewhere it is opened on SO_PEERCRED's pid, and a process that started after the connection
/// was accepted holds a reused pid: the client is gone, refused. What /proc says of the client
/// (its `NSpid`, read here; its parent, read by the checks) is about it only while the pidfd has
/// not exited ([`client_still_there`]). A client that is gone, or whose namespaces cannot be
/// read, is refused: never taken to be in the host's namespace.
fn client_level(
    socket: std::os::fd::BorrowedFd<'_>,
    client_pid: Option<u32>,
    accepted_boot_ns: u64,
) -> Result<(std::os::fd::OwnedFd, Vec<u32>), String> {
    const GONE: &str = "the process that connected is gone (a client stays until it is answered)";
    let client = client_pid.ok_or("the agent cannot tell which process connected")?;
    let pidfd = match peer_pidfd(socket) {
        Some(pidfd) => pidfd,
        None => {
            let pidfd = crate::host::pidfd_open(client).map_err(|_| GONE)?;
            // Its start, to the clock tick (10 ms) below it: later than the accept, then later
            // than the connection.
            let started = crate::host::read_small_file(format!("/proc/{client}/stat"))
                .ok()
                .and_then(|stat| crate::sampling::procstat::parse_stat_start_ticks(&stat))
                .map(|ticks| ticks * crate::host::tick_ns());
            if started.is_none_or(|started| started > accepted_boot_ns) {
                return Err(GONE.into());
            }
            pidfd
        }
    };
    let ns = ns_pids_of(client);
    if ns.is_empty() || exited(&pidfd) {
        return Err(GONE.into());
    }
    let level = ns.len() - 1;
    if level > monitor_common::NS_LEVELS {
        return Err(format!(
            "this montrace runs {level} pid namespaces below the agent's; the agent names \
             processes in at most {} (run it in a shallower container, or in the host's pid \
             namespace)",
            monitor_common::NS_LEVELS
        ));
    }
    Ok((pidfd, ns))
}

/// SO_PEERPIDFD: a pidfd of the process that connected (Linux 6.5 and later), None where the
/// kernel has no such option or the process is gone.
fn peer_pidfd(socket: std::os::fd::BorrowedFd<'_>) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd as _, FromRawFd as _};
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `fd`.
    let got = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERPIDFD,
            (&mut fd as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    // SAFETY: a new descriptor the kernel made for us, owned from here on.
    (got == 0 && fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Whether the client's process is still the one that connected: what was read of it in /proc
/// meanwhile (its namespace, its children, its parent) was about it.
fn client_still_there(client: &std::os::fd::OwnedFd) -> Result<(), String> {
    match exited(client) {
        true => Err("the process that connected exited while it was checked".into()),
        false => Ok(()),
    }
}

/// How far up a client's ancestors in its namespace are looked for (a chain of processes,
/// each the parent of the next: a shell's loop of subshells is a few dozen).
const MAX_ANCESTORS: usize = 4096;
/// Pid look-ups for clients in pid namespaces of their own ([`resolve_in_namespace`], which may
/// read every process's status) under way at once, over all users and by one user: more are
/// refused, so that asking cannot keep the agent's blocking pool busy.
const MAX_RESOLVING: usize = 4;
const MAX_RESOLVING_PER_USER: usize = 2;

/// The agent's pid of the process a client in a pid namespace below the agent's (a container
/// without the host's pids) asks for by its pid there (see docs/security.md). It is looked
/// for among the client itself and its children (a run's command: no scan of /proc), then
/// among every descendant of the client's topmost ancestor in its namespace (its siblings:
/// Python's `monitored` child beside its `montrace attach`). A process of the same depth as
/// the client is in its namespace when one is the other's ancestor: a new namespace is always
/// deeper. Any other pid names nothing for the client.
fn resolve_in_namespace(client: u32, client_ns: &[u32], pid: u32) -> Result<u32, String> {
    let depth = client_ns.len();
    let named = |candidate: &u32| {
        let pids = ns_pids_of(*candidate);
        pids.len() == depth && pids.last() == Some(&pid)
    };
    if client_ns.last() == Some(&pid) {
        return Ok(client);
    }
    if let Some(host) = children_of(client).into_iter().find(named) {
        return Ok(host);
    }
    // Each status read once: a step's parent is found in the status that said its depth.
    let (mut top, mut status) = (client, status_of(client));
    for _ in 0..MAX_ANCESTORS {
        let parent = ProcessFacts::parse(&status).map(|f| f.parent);
        let Some(parent) = parent.filter(|p| *p != top) else {
            break;
        };
        let parent_status = status_of(parent);
        if ns_pids(&parent_status).len() != depth {
            break;
        }
        (top, status) = (parent, parent_status);
    }
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (child, parent) in read_parents() {
        children.entry(parent).or_default().push(child);
    }
    let mut walk = vec![top];
    while let Some(at) = walk.pop() {
        if named(&at) {
            return Ok(at);
        }
        walk.extend(children.remove(&at).unwrap_or_default());
    }
    Err(format!(
        "pid {pid}: in a pid namespace of its own montrace may follow only the processes of \
         that namespace that descend from its topmost ancestor there (not pid {pid})"
    ))
}

/// The children of every thread of `pid`, as /proc says now.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    threads
        .flatten()
        .filter_map(|t| crate::host::read_small_file(t.path().join("children")).ok())
        .flat_map(|text| {
            text.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// Whether the client (`uid`, `client_pid` from SO_PEERCRED) may follow `pid` (see the module).
/// `named`: for a client in a pid namespace of its own, its depth and the pid it asked for,
/// which the process under the pidfd must still have (it was found in /proc before the pidfd
/// was opened, and its pid may have been reused since).
fn may_follow(
    uid: u32,
    client_pid: Option<u32>,
    pid: u32,
    named: Option<(usize, u32)>,
) -> Result<(), String> {
    let pidfd = crate::host::pidfd_open(pid)
        .map_err(|e| format!("pid {pid}: no such process to follow ({e})"))?;
    // Read once, for both checks that need it.
    let status = match (named, uid) {
        (None, 0) => String::new(),
        _ => crate::host::read_small_file(format!("/proc/{pid}/status"))
            .map_err(|e| format!("pid {pid}: {e}"))?,
    };
    if let Some((depth, asked)) = named {
        let pids = ns_pids(&status);
        if pids.len() != depth || pids.last() != Some(&asked) {
            return Err(format!("pid {asked} exited while it was checked"));
        }
    }
    if uid != 0 {
        let facts =
            ProcessFacts::parse(&status).ok_or_else(|| format!("pid {pid}: unreadable status"))?;
        let owner = std::fs::metadata(format!("/proc/{pid}"))
            .map_err(|e| format!("pid {pid}: {e}"))?
            .uid();
        decide(uid, client_pid, &facts, owner, yama_ptrace_scope())
            .map_err(|why| format!("pid {pid}: {why}"))?;
    }
    // The pidfd still names a live process: what /proc said was about it, not a reused pid. (A
    // pidfd is readable once its process exited; asking needs no permission, where a signal 0
    // to another user's process would.)
    if exited(&pidfd) {
        return Err(format!("pid {pid} exited while it was checked"));
    }
    Ok(())
}

/// The facts of /proc/PID/status the decision needs.
#[derive(Debug, PartialEq, Eq)]
struct ProcessFacts {
    parent: u32,
    /// Real, effective, saved and filesystem uids.
    uids: [u32; 4],
}

impl ProcessFacts {
    fn parse(status: &str) -> Option<ProcessFacts> {
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
        };
        let parent = field("PPid:")?.parse().ok()?;
        let uids: Vec<u32> = field("Uid:")?
            .split_whitespace()
            .filter_map(|u| u.parse().ok())
            .collect();
        Some(ProcessFacts {
            parent,
            uids: uids.try_into().ok()?,
        })
    }
}

fn yama_ptrace_scope() -> u32 {
    crate::host::read_small_file("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// The rule for an ordinary user (pure; see the module): every uid of the process is the
/// client's, its /proc directory is the client's (not a set-uid or otherwise non-dumpable image),
/// and it is the client's child unless Yama lets users trace any process of their own.
fn decide(
    uid: u32,
    client_pid: Option<u32>,
    facts: &ProcessFacts,
    proc_owner: u32,
    ptrace_scope: u32,
) -> Result<(), String> {
    if facts.uids.iter().any(|u| *u != uid) {
        return Err(format!(
            "not yours to follow (its uids are {:?}; yours is {uid})",
            facts.uids
        ));
    }
    if proc_owner != uid {
        return Err("its image is set-uid or not dumpable: only root may follow it".into());
    }
    let child = client_pid.is_some_and(|p| p == facts.parent);
    if !child && ptrace_scope != 0 {
        return Err(format!(
            "only your own child can be followed here (kernel.yama.ptrace_scope is \
             {ptrace_scope}); `montrace run` starts the command as its child"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tsh\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t42\nPid:\t42\n\
                          PPid:\t40\nTracerPid:\t0\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\n";

    #[test]
    fn durations_are_said_in_whole_units() {
        assert_eq!(whole_units(Duration::from_secs(30 * 86_400)), "30d");
        assert_eq!(whole_units(Duration::from_secs(7_200)), "2h");
        assert_eq!(whole_units(Duration::from_secs(60)), "1m");
        assert_eq!(whole_units(Duration::from_millis(200)), "0.200s");
        assert_eq!(whole_units(Duration::from_secs(90)), "90.000s");
    }

    #[test]
    fn a_process_has_a_pid_in_each_namespace_down_to_its_own() {
        assert_eq!(ns_pids(STATUS), [0u32; 0], "no NSpid line: an old kernel");
        assert_eq!(ns_pids(&format!("{STATUS}NSpid:\t42\n")), [42]);
        assert_eq!(ns_pids(&format!("{STATUS}NSpid:\t4242\t7\n")), [4242, 7]);
        assert_eq!(
            ns_pids(&format!("{STATUS}NSpid:\t4242\t70\t1\n")),
            [4242, 70, 1]
        );
    }

    #[test]
    fn status_gives_the_parent_and_every_uid() {
        assert_eq!(
            ProcessFacts::parse(STATUS),
            Some(ProcessFacts {
                parent: 40,
                uids: [1000; 4]
            })
        );
        assert_eq!(ProcessFacts::parse("PPid:\t1\nUid:\t1 2\n"), None);
    }

    #[test]
    fn a_trees_descendants_are_followed_parents_first_and_a_refused_one_keeps_its_own_out() {
        // 10 ─┬─ 11 ─── 14
        //     ├─ 12 ─── 15 ─── 16     (12: another user's)
        //     └─ 13                   (13: gone before its check)
        // 20 ─── 21                   (another tree)
        let parents: HashMap<u32, u32> = [
            (1, 0),
            (10, 1),
            (11, 10),
            (12, 10),
            (13, 10),
            (14, 11),
            (15, 12),
            (16, 15),
            (20, 1),
            (21, 20),
        ]
        .into();
        let mut asked = Vec::new();
        let (new, left_out) =
            walk_tree(10, &parents, &HashSet::from([10]), &HashSet::new(), |pid| {
                asked.push(pid);
                match pid {
                    12 => Some(false),
                    13 => None,
                    _ => Some(true),
                }
            });
        assert_eq!(new, vec![11, 14]);
        assert_eq!(left_out, vec![12]);
        // Never asked about what is below a refused process, nor about another tree.
        asked.sort_unstable();
        assert_eq!(asked, vec![11, 12, 13, 14]);
        // The next look: those followed are walked through unasked, the refused stay out, and
        // only what is new is asked about.
        let mut parents = parents;
        parents.remove(&13);
        parents.insert(17, 14);
        let mut asked = Vec::new();
        let (new, left_out) = walk_tree(
            10,
            &parents,
            &HashSet::from([10, 11, 14]),
            &HashSet::from([12]),
            |pid| {
                asked.push(pid);
                Some(true)
            },
        );
        assert_eq!((new, left_out), (vec![17], vec![]));
        assert_eq!(asked, vec![17]);
    }

    #[test]
    fn a_user_follows_only_their_own_dumpable_child() {
        let own = ProcessFacts {
            parent: 40,
            uids: [1000; 4],
        };
        assert_eq!(decide(1000, Some(40), &own, 1000, 1), Ok(()));
        // Not the client's child: only where Yama lets users trace their own processes.
        assert!(decide(1000, Some(41), &own, 1000, 1).is_err());
        assert_eq!(decide(1000, Some(41), &own, 1000, 0), Ok(()));
        // Another user's process.
        assert!(decide(1001, Some(40), &own, 1000, 0).is_err());
        // A set-uid image: its saved uid is root's.
        let setuid = ProcessFacts {
            parent: 40,
            uids: [1000, 0, 0, 0],
        };
        assert!(decide(1000, Some(40), &setuid, 1000, 0).is_err());
        // Not dumpable (its /proc directory is root's).
        assert!(decide(1000, Some(40), &own, 0, 0).is_err());
    }
}
