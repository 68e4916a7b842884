//! Phase marks: a monitored program says "phase X begins/ends here" and the mark lands in
//! `marks.parquet`, next to the samples of the same moments.
//!
//! The protocol (docs/marks.md) is one line per datagram on a Unix socket whose path montrace
//! puts in the command's environment as `MONTRACE_MARK_SOCKET`: `point LABEL`, `begin LABEL` or
//! `end LABEL`. Datagrams rather than a stream: one `sendto` is one mark, with no framing, no
//! connection to open, hold or close, and nothing for montrace's event loop to keep per sender;
//! the kernel attaches the sender's pid (`SCM_CREDENTIALS`) and the time it was sent
//! (`SCM_TIMESTAMPNS`) to each datagram, so nothing the sender writes has to be trusted for them.
//!
//! [`parse_line`] is the pure core; [`MarkServer`] is montrace's end of the socket and
//! [`send_mark`] is `montrace mark` (`commands::mark`), the client for shell scripts.
use std::{
    ffi::{CString, OsString},
    io,
    os::{
        fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd as _, OwnedFd, RawFd},
        unix::{
            ffi::OsStringExt as _,
            fs::{FileTypeExt as _, PermissionsExt as _},
            net::UnixDatagram,
        },
    },
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use anyhow::Context as _;

use crate::{host, store::records::MarkKind};

/// The environment variable that holds the socket's path in the command's environment.
pub const SOCKET_ENV: &str = "MONTRACE_MARK_SOCKET";
/// The mark socket's directory is `<tmp>/montrace-<montrace's pid>-<random>`.
const DIR_PREFIX: &str = "montrace-";
/// How long a run goes on before its mark thread removes the socket directories killed
/// montraces left ([`MarkServer::bind_in`]).
const SWEEP_AFTER: Duration = Duration::from_secs(1);
/// Longest label, in bytes of UTF-8.
pub const MAX_LABEL_BYTES: usize = 256;

/// Marks kept per run at most: a command that sends more has them counted as dropped
/// (`marks_dropped` in run.json), so montrace's memory and the tables stay bounded whatever it
/// sends.
pub const MAX_MARKS: u64 = 10_000;
/// Sustained rate of marks kept, per second; faster ones are dropped once a burst of
/// [`MARK_BURST`] is spent.
pub const MARK_RATE: f64 = 100.0;
pub const MARK_BURST: f64 = 1_000.0;
/// Datagrams read in one wake-up at most: a flood cannot hold the run loop; the rest wait in the
/// socket (whose queue the kernel bounds: a sender blocks, or gets EAGAIN, when it is full).
const MAX_PER_RECEIVE: usize = 1_024;

/// Which marks are kept: a token bucket ([`MARK_RATE`], [`MARK_BURST`]) under a total cap
/// ([`MAX_MARKS`]). Pure: time comes in as an argument.
#[derive(Clone, Debug, PartialEq)]
pub struct MarkBudget {
    tokens: f64,
    last_ns: Option<i64>,
    kept: u64,
    dropped: u64,
}

impl Default for MarkBudget {
    fn default() -> Self {
        MarkBudget {
            tokens: MARK_BURST,
            last_ns: None,
            kept: 0,
            dropped: 0,
        }
    }
}

impl MarkBudget {
    /// Whether a mark received at `now_ns` is kept; counts it either way.
    pub fn admit(&mut self, now_ns: i64) -> bool {
        if let Some(last) = self.last_ns {
            let elapsed_s = (now_ns - last).max(0) as f64 / 1e9;
            self.tokens = (self.tokens + elapsed_s * MARK_RATE).min(MARK_BURST);
        }
        self.last_ns = Some(now_ns);
        if self.kept < MAX_MARKS && self.tokens >= 1.0 {
            self.tokens -= 1.0;
            self.kept += 1;
            true
        } else {
            self.dropped += 1;
            false
        }
    }

    pub fn kept(&self) -> u64 {
        self.kept
    }

    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

/// Receive buffer: any valid line fits (`begin ` + 256 bytes + `\r\n`) with room to spare, so a
/// datagram that does not fit is too long to be valid anyway.
const DATAGRAM_BYTES: usize = 1024;
/// How long `montrace mark` waits when montrace's queue is full (montrace drains it at once, so
/// only a stuck montrace makes it wait this long).
const SEND_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a datagram is not a mark.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MarkError {
    #[error("empty mark: send `point LABEL`, `begin LABEL` or `end LABEL`")]
    Empty,
    #[error("a mark must be UTF-8 text")]
    NotUtf8,
    #[error("unknown mark `{0}`: the line starts with `point`, `begin` or `end`")]
    UnknownVerb(String),
    #[error("`{0}` needs a label: `{0} LABEL`")]
    MissingLabel(&'static str),
    #[error("the label is {0} bytes long; at most {MAX_LABEL_BYTES} are allowed")]
    LabelTooLong(usize),
    #[error("the label contains a control character (a newline, a tab, ...): one mark per line")]
    ControlCharacter,
}

/// Parses one datagram: `VERB LABEL`, with an optional trailing `\n` (or `\r\n`). VERB is
/// `point`, `begin` or `end` (lower case); the label is the rest of the line, without the spaces
/// around it, 1 to [`MAX_LABEL_BYTES`] bytes of UTF-8 without control characters.
pub fn parse_line(bytes: &[u8]) -> Result<(MarkKind, String), MarkError> {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    if bytes.is_empty() {
        return Err(MarkError::Empty);
    }
    let line = std::str::from_utf8(bytes).map_err(|_| MarkError::NotUtf8)?;
    let (verb, label) = line.split_once(' ').unwrap_or((line, ""));
    let kind = match verb {
        "point" => MarkKind::Point,
        "begin" => MarkKind::Begin,
        "end" => MarkKind::End,
        // Cut what is echoed back: the verb of a garbage datagram can be anything.
        other => return Err(MarkError::UnknownVerb(other.chars().take(32).collect())),
    };
    let label = label.trim_matches(' ');
    if label.is_empty() {
        return Err(MarkError::MissingLabel(kind.as_str()));
    }
    if label.len() > MAX_LABEL_BYTES {
        return Err(MarkError::LabelTooLong(label.len()));
    }
    if label.chars().any(char::is_control) {
        return Err(MarkError::ControlCharacter);
    }
    Ok((kind, label.to_string()))
}

/// The datagram that [`parse_line`] reads back as `(kind, label)`.
pub fn format_line(kind: MarkKind, label: &str) -> Vec<u8> {
    format!("{} {label}\n", kind.as_str()).into_bytes()
}

/// A mark as montrace received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceivedMark {
    /// When it was sent (the kernel's stamp on the datagram), on the clock of `receive`'s `now_ns`.
    pub time_ns: i64,
    /// The sending process (tgid) as the kernel saw it; 0 when the sender is in a pid namespace
    /// that montrace cannot see into.
    pub pid: u32,
    pub label: String,
    pub kind: MarkKind,
}

/// A datagram that was not a mark, and who sent it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidMark {
    pub pid: u32,
    pub error: MarkError,
}

/// montrace's end of the mark socket: `<dir>/mark.sock` in a private directory made for the run.
/// Non-blocking, close-on-exec; dropping it removes the socket and its directory.
#[derive(Debug)]
pub struct MarkServer {
    socket: UnixDatagram,
    /// The private directory made for the socket (removed with it), or None for a socket bound
    /// where the user asked ([`MarkServer::bind_at`]).
    dir: Option<PathBuf>,
    path: PathBuf,
    invalid: u64,
    first_invalid: Option<InvalidMark>,
    budget: MarkBudget,
    /// Whose identity the socket's files were made with, and are removed with.
    owner: Option<crate::store::userfs::Owner>,
    /// Where directories killed montraces left are to be removed, and as whom: see
    /// [`MarkServer::bind_in`]. Taken by the sweep.
    sweep: Option<(PathBuf, Option<crate::store::userfs::Owner>)>,
}

impl MarkServer {
    /// Binds a socket in a new directory under /tmp (see [`MarkServer::bind_in`]).
    ///
    /// /tmp and not `$TMPDIR`: montrace runs under sudo, and the command's user must reach the
    /// path; a socket path is also limited to 107 bytes, which a long `$TMPDIR` could exceed.
    pub fn bind() -> anyhow::Result<MarkServer> {
        MarkServer::bind_in(Path::new("/tmp"), crate::store::userfs::owner())
    }

    /// Binds `<parent>/montrace-<pid>-<random>/mark.sock`. The directory is 0700 and the socket
    /// 0600, both created with `owner`'s identity when given (see `userfs`: the command's user,
    /// the one montrace drops to): that user and root can send marks, other users cannot.
    ///
    /// Directories that montraces killed before they could clean up left in `parent` are
    /// removed (those the owner may remove) by [`MarkServer::sweep`], which the run's mark
    /// thread makes once the run has gone on for [`SWEEP_AFTER`]: never on a run's start-up or
    /// end (a directory of thousands of entries takes milliseconds to list), and best effort:
    /// a shorter run leaves them to a longer one. (A thread of its own for it, even at
    /// SCHED_IDLE, cost a spaced run's start-up about 0.45 ms on the 2-core test machine: its
    /// start and the fork of the command wait on each other.)
    pub fn bind_in(
        parent: &Path,
        owner: Option<&crate::store::userfs::Owner>,
    ) -> anyhow::Result<MarkServer> {
        let as_owner =
            |f: &mut dyn FnMut() -> io::Result<()>| crate::store::userfs::as_owner(owner, f);
        let sweep = Some((parent.to_path_buf(), owner.cloned()));
        let mut made = None;
        as_owner(&mut || {
            made = Some(make_private_dir(
                parent,
                &format!("{DIR_PREFIX}{}-", std::process::id()),
            )?);
            Ok(())
        })
        .with_context(|| {
            format!(
                "cannot create a directory for the mark socket in {}",
                parent.display()
            )
        })?;
        let dir = made.expect("made above");
        let path = dir.join("mark.sock");
        let mut bound = None;
        let socket = match as_owner(&mut || {
            bound = Some(UnixDatagram::bind(&path)?);
            Ok(())
        })
        .map(|()| bound.take().expect("bound above"))
        {
            Ok(socket) => socket,
            Err(err) => {
                let _ = as_owner(&mut || std::fs::remove_dir(&dir));
                return Err(err)
                    .with_context(|| format!("cannot create the mark socket {}", path.display()));
            }
        };
        // From here on, dropping the server removes what was made.
        let server = MarkServer {
            socket,
            dir: Some(dir),
            path,
            invalid: 0,
            first_invalid: None,
            budget: MarkBudget::default(),
            owner: owner.cloned(),
            sweep,
        };
        server
            .set_up()
            .with_context(|| format!("cannot set up the mark socket {}", server.path.display()))?;
        Ok(server)
    }

    /// Binds the socket at `path`, a name that must not exist yet in a directory the user
    /// chose (`montrace attach --mark-socket PATH`: a program that is already running cannot be
    /// given `MONTRACE_MARK_SOCKET`, so it is told where to send). Made with `owner`'s identity,
    /// mode 0600; removed when the server is dropped.
    pub fn bind_at(
        path: &Path,
        owner: Option<&crate::store::userfs::Owner>,
    ) -> anyhow::Result<MarkServer> {
        let socket = crate::store::userfs::as_owner(owner, || UnixDatagram::bind(path))
            .with_context(|| format!("cannot create the mark socket {}", path.display()))?;
        let server = MarkServer {
            socket,
            dir: None,
            path: path.to_path_buf(),
            invalid: 0,
            first_invalid: None,
            budget: MarkBudget::default(),
            owner: owner.cloned(),
            sweep: None,
        };
        server
            .set_up()
            .with_context(|| format!("cannot set up the mark socket {}", path.display()))?;
        Ok(server)
    }

    /// Removes the directories killed montraces left where this server's was made (see
    /// [`MarkServer::bind_in`]); once, the first call.
    pub fn sweep(&mut self) {
        if let Some((parent, owner)) = self.sweep.take() {
            let _ = crate::store::userfs::as_owner(owner.as_ref(), || {
                remove_stale_dirs(&parent);
                Ok(())
            });
        }
    }

    fn set_up(&self) -> io::Result<()> {
        // Nothing can have sent a datagram yet: the directory is 0700 and its name is known
        // only here. From now on every datagram carries its sender's credentials and send time.
        set_flag(&self.socket, libc::SO_PASSCRED)?;
        set_flag(&self.socket, libc::SO_TIMESTAMPNS)?;
        refuse_descriptors(&self.socket)?;
        self.socket.set_nonblocking(true)?;
        // Sending needs write permission on the socket file and search permission on the
        // directories above it (unix(7)).
        crate::store::userfs::as_owner(self.owner.as_ref(), || {
            std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(0o600))
        })
    }

    /// The socket's path: the value of `MONTRACE_MARK_SOCKET` for the command.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Datagrams received so far that were not marks.
    pub fn invalid(&self) -> u64 {
        self.invalid
    }

    /// Marks received and dropped so far (over the rate or the total cap, see [`MarkBudget`]).
    pub fn dropped(&self) -> u64 {
        self.budget.dropped()
    }

    /// The first datagram that was not a mark, to say why once.
    pub fn first_invalid(&self) -> Option<&InvalidMark> {
        self.first_invalid.as_ref()
    }

    /// The marks waiting on the socket, in the order they arrived, at most [`MAX_PER_RECEIVE`]
    /// datagrams' worth (the socket stays readable when more wait); returns at once when there
    /// is none. Marks over the budget are counted and dropped. `now_ns` is the run's clock: a
    /// mark's time is `now_ns()` minus how long it waited in the socket, so it is the moment it
    /// was sent even when montrace reads it later.
    pub fn receive(&mut self, now_ns: impl Fn() -> i64) -> Vec<ReceivedMark> {
        self.receive_at_most(MAX_PER_RECEIVE, now_ns)
    }

    /// [`MarkServer::receive`] until the socket is empty, at most `rounds` times as many: at the
    /// end of a run, so that every mark sent is kept or counted.
    pub fn receive_rest(&mut self, rounds: usize, now_ns: impl Fn() -> i64) -> Vec<ReceivedMark> {
        self.receive_at_most(rounds * MAX_PER_RECEIVE, now_ns)
    }

    fn receive_at_most(&mut self, limit: usize, now_ns: impl Fn() -> i64) -> Vec<ReceivedMark> {
        let mut marks = Vec::new();
        for _ in 0..limit {
            let datagram = match receive_one(self.socket.as_fd()) {
                Ok(Some(datagram)) => datagram,
                Ok(None) => break,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                // Nothing else is expected from a bound datagram socket; the next readiness
                // tries again.
                Err(_) => break,
            };
            let parsed = if datagram.truncated {
                Err(MarkError::LabelTooLong(datagram.bytes.len()))
            } else {
                parse_line(&datagram.bytes)
            };
            match parsed {
                Ok((kind, label)) => {
                    let now = now_ns();
                    if self.budget.admit(now) {
                        marks.push(ReceivedMark {
                            time_ns: sent_time(now, host::realtime_ns(), datagram.sent_realtime_ns),
                            pid: datagram.pid,
                            label,
                            kind,
                        });
                    }
                }
                Err(error) => {
                    self.invalid += 1;
                    self.first_invalid.get_or_insert(InvalidMark {
                        pid: datagram.pid,
                        error,
                    });
                }
            }
        }
        marks
    }
}

/// What the mark thread counted: datagrams that were not marks and marks over the budget.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MarkTally {
    pub invalid: u64,
    pub first_invalid: Option<InvalidMark>,
    pub dropped: u64,
}

/// The mark socket, read on a thread of its own. Nothing a sender does can hold montrace's event
/// loop: a datagram's descriptors are closed (on kernels without `SO_PASSRIGHTS`) by this
/// thread, and a close that blocks delays marks, never the limits, signals or events. The loop
/// takes the marks from a channel ([`MarkReceiver::next`]).
pub struct MarkReceiver {
    marks: tokio::sync::mpsc::UnboundedReceiver<Vec<ReceivedMark>>,
    tally: Arc<Mutex<MarkTally>>,
    stop: Arc<AtomicBool>,
    /// Written to wake the thread for the last marks (an eventfd).
    wake: Arc<OwnedFd>,
    /// Disconnected when the thread has passed on its last marks: what the end waits on.
    last: std::sync::mpsc::Receiver<()>,
    /// Disconnected when the thread has closed and removed the socket, after its last marks.
    done: std::sync::mpsc::Receiver<()>,
    /// Marks still coming at the end, and none of the thread's channel: it stopped answering.
    stuck: bool,
}

impl MarkReceiver {
    /// Starts the thread; the socket is closed and removed when it ends.
    pub fn spawn(server: MarkServer) -> io::Result<MarkReceiver> {
        // SAFETY: plain syscall; the result is checked.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new descriptor, owned from here on.
        let wake = Arc::new(unsafe { OwnedFd::from_raw_fd(raw) });
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let tally = Arc::new(Mutex::new(MarkTally::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (last_tx, last) = std::sync::mpsc::channel::<()>();
        let (done_tx, done) = std::sync::mpsc::channel::<()>();
        // Not joined: `last` and `done` say how far it got (see `finish` and `SocketRemoval`),
        // and its exit is the kernel's.
        {
            let (tally, stop, wake) = (tally.clone(), stop.clone(), wake.clone());
            crate::kernel::privilege::spawn_without_capabilities("montrace-marks", move || {
                // Dropped last, when everything else of the thread is done.
                let _done = done_tx;
                batch_scheduling();
                let mut server = server;
                receive_until_stopped(&mut server, &tx, &tally, &stop, &wake);
                drop(last_tx);
                // The socket closed and removed, after the last marks: the end has them
                // while this waits for the disk (`SocketRemoval`).
                drop(server);
            })?;
        }
        Ok(MarkReceiver {
            marks: rx,
            tally,
            stop,
            wake,
            last,
            done,
            stuck: false,
        })
    }

    /// The next marks received; never returns once the thread has ended.
    pub async fn next(&mut self) -> Vec<ReceivedMark> {
        match self.marks.recv().await {
            Some(batch) => batch,
            None => std::future::pending().await,
        }
    }

    /// Tells the thread to take what waits in the socket and end, without waiting for it:
    /// [`MarkReceiver::finish`] does, and the run's other ends (the agent's) meanwhile.
    pub fn stop(&self) {
        if !self.stop.swap(true, Ordering::AcqRel) {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes to the eventfd owned by `wake`.
            unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
    }

    /// Stops the thread (see [`MarkReceiver::stop`]) and returns every mark received since the
    /// last [`MarkReceiver::next`], the ones still waiting in the socket included. Waits at most
    /// `wait` for the thread: one stuck in a close of a descriptor a sender passed keeps its
    /// marks, and montrace goes on.
    pub fn finish(&mut self, wait: Duration) -> Vec<ReceivedMark> {
        self.stop();
        // Woken the moment the thread has passed on its last marks (no polling: this wait is on
        // the end of every run). The socket's removal is waited for at the run's very end
        // ([`MarkReceiver::removal`]), its exit not at all (a join waits for the kernel to tear
        // the thread down).
        self.stuck = matches!(
            self.last.recv_timeout(wait),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout)
        );
        let mut out = Vec::new();
        while let Ok(batch) = self.marks.try_recv() {
            out.extend(batch);
        }
        out
    }

    /// What the thread counted so far.
    pub fn tally(&self) -> MarkTally {
        self.tally.lock().map(|t| t.clone()).unwrap_or_default()
    }

    /// The thread did not answer at the end ([`MarkReceiver::finish`]).
    pub fn stuck(&self) -> bool {
        self.stuck
    }

    /// The end of the thread's work after [`MarkReceiver::finish`]: the socket's close and
    /// removal, to wait for before montrace exits.
    pub fn removal(self) -> SocketRemoval {
        SocketRemoval {
            done: self.done,
            stuck: self.stuck,
        }
    }
}

/// The mark thread closing and removing its socket after its last marks. A directory's removal
/// waits for the disk where the filesystem discards freed blocks at once (ext4 mounted with
/// `discard`: 170 µs here); the run's end waited for it before writing its tables (0.12 ms of a
/// `/bin/true` run through the agent, phase timestamps), and now waits only before montrace
/// exits, which would otherwise cut the thread short and leave the directory in /tmp.
#[derive(Debug)]
pub struct SocketRemoval {
    done: std::sync::mpsc::Receiver<()>,
    /// The thread did not pass on its last marks in time: not waited for again.
    stuck: bool,
}

impl SocketRemoval {
    /// Waits at most `within` for the socket to be closed and removed.
    pub fn wait(self, within: Duration) {
        if !self.stuck {
            let _ = self.done.recv_timeout(within);
        }
    }
}

/// Puts this thread under SCHED_BATCH (any user may): a wakeup of it no longer preempts the
/// thread that woke it. The run's end wakes the mark thread for its last marks while the event
/// loop asks the agent for its end; woken on the loop's CPU, it took the CPU at once (its last
/// receive, then the socket's removal, until that waited for the disk): 0.1 ms of every run's
/// end, 0.02 ms under SCHED_BATCH (phase timestamps, 40 runs each way, twice, through the agent
/// on the 2-core test machine). Marks carry the time they were sent, so a later read of them
/// changes nothing. Left as it was where the kernel refuses.
fn batch_scheduling() {
    // Zeroed: priority 0, and nothing in the fields musl adds (SCHED_SPORADIC's).
    // SAFETY: all-zero bytes are a valid sched_param; pid 0 is the calling thread.
    unsafe {
        let param: libc::sched_param = std::mem::zeroed();
        libc::sched_setscheduler(0, libc::SCHED_BATCH, &param)
    };
}

/// The mark thread's loop: waits for datagrams (or the stop), passes the marks on, keeps the
/// tally; the last round takes everything still waiting (the kernel bounds the queue; 64 rounds
/// are far more than it holds, and bound the time a sender still flooding can keep the end
/// waiting).
fn receive_until_stopped(
    server: &mut MarkServer,
    tx: &tokio::sync::mpsc::UnboundedSender<Vec<ReceivedMark>>,
    tally: &Mutex<MarkTally>,
    stop: &AtomicBool,
    wake: &OwnedFd,
) {
    let sweep_at = std::time::Instant::now() + SWEEP_AFTER;
    loop {
        if !stop.load(Ordering::Acquire) {
            let sweep_in = server
                .sweep
                .as_ref()
                .map(|_| sweep_at.saturating_duration_since(std::time::Instant::now()));
            if !wait_readable(server.socket.as_fd(), wake.as_fd(), sweep_in) {
                // Nothing to read for the first second: the run goes on, the sweep can wait
                // for no one.
                server.sweep();
                continue;
            }
        }
        let stopping = stop.load(Ordering::Acquire);
        let batch = if stopping {
            server.receive_rest(64, host::realtime_ns)
        } else {
            server.receive(host::realtime_ns)
        };
        if let Ok(mut t) = tally.lock() {
            t.invalid = server.invalid();
            t.first_invalid = server.first_invalid().cloned();
            t.dropped = server.dropped();
        }
        if (!batch.is_empty() && tx.send(batch).is_err()) || stopping {
            return;
        }
    }
}

/// Blocks until the socket or the wake-up eventfd is readable (or a signal interrupts), or at
/// most `within`: false when that time passed with nothing to read.
fn wait_readable(socket: BorrowedFd<'_>, wake: BorrowedFd<'_>, within: Option<Duration>) -> bool {
    let mut fds = [
        libc::pollfd {
            fd: socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // Rounded up: a wait cut short to the millisecond below would end before `within`.
    let timeout = within.map_or(-1, |d| {
        d.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32
    });
    // SAFETY: two valid pollfds on descriptors that outlive the call.
    unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) != 0 }
}

impl AsRawFd for MarkServer {
    fn as_raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
}

impl AsFd for MarkServer {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

impl Drop for MarkServer {
    fn drop(&mut self) {
        // Best effort: a leftover empty directory in /tmp is harmless.
        let _ = crate::store::userfs::as_owner(self.owner.as_ref(), || {
            let _ = std::fs::remove_file(&self.path);
            match &self.dir {
                Some(dir) => std::fs::remove_dir(dir),
                None => Ok(()),
            }
        });
    }
}

/// `now` minus how long the datagram waited: the send time on the caller's clock, which need not
/// be the wall clock (montrace's times come from the boot clock plus an offset). Without the
/// kernel's stamp, the receive time.
fn sent_time(now_ns: i64, realtime_now_ns: i64, sent_realtime_ns: Option<i64>) -> i64 {
    match sent_realtime_ns {
        Some(sent) => now_ns - (realtime_now_ns - sent).max(0),
        None => now_ns,
    }
}

/// One datagram and what the kernel said about it.
struct Datagram {
    bytes: Vec<u8>,
    /// Longer than the buffer: too long to be a mark.
    truncated: bool,
    pid: u32,
    sent_realtime_ns: Option<i64>,
}

/// Reads one datagram without blocking; None when none is waiting.
fn receive_one(socket: BorrowedFd<'_>) -> io::Result<Option<Datagram>> {
    let mut data = [0u8; DATAGRAM_BYTES];
    // u64 for the alignment cmsghdr needs. Room for the credentials, the timestamp and a few
    // descriptors a sender might attach (the kernel closes those that do not fit).
    let mut control = [0u64; 64];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain old data; all-zero is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: msg points at iov, data and control, which outlive the call; MSG_CMSG_CLOEXEC keeps
    // any received descriptor from leaking into the command before it is closed below.
    let n = unsafe {
        libc::recvmsg(
            socket.as_raw_fd(),
            &mut msg,
            libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
        )
    };
    if n < 0 {
        let err = io::Error::last_os_error();
        return if err.kind() == io::ErrorKind::WouldBlock {
            Ok(None)
        } else {
            Err(err)
        };
    }
    let mut datagram = Datagram {
        bytes: data[..n as usize].to_vec(),
        truncated: msg.msg_flags & libc::MSG_TRUNC != 0,
        pid: 0,
        sent_realtime_ns: None,
    };
    // SAFETY: msg was filled in by recvmsg; the CMSG_* macros walk its control buffer within
    // msg_controllen, and every payload is read unaligned after checking its length.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            let header = &*cmsg;
            let payload = libc::CMSG_DATA(cmsg);
            let len = (header.cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
            match (header.cmsg_level, header.cmsg_type) {
                (libc::SOL_SOCKET, libc::SCM_CREDENTIALS)
                    if len >= std::mem::size_of::<libc::ucred>() =>
                {
                    let cred = payload.cast::<libc::ucred>().read_unaligned();
                    datagram.pid = u32::try_from(cred.pid).unwrap_or(0);
                }
                (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS)
                    if len >= std::mem::size_of::<libc::timespec>() =>
                {
                    let ts = payload.cast::<libc::timespec>().read_unaligned();
                    datagram.sent_realtime_ns = Some(ts.tv_sec * 1_000_000_000 + ts.tv_nsec);
                }
                (libc::SOL_SOCKET, libc::SCM_RIGHTS) => {
                    // Descriptors a sender attached are not wanted: close them.
                    let fds = payload.cast::<RawFd>();
                    for i in 0..len / std::mem::size_of::<RawFd>() {
                        drop(OwnedFd::from_raw_fd(fds.add(i).read_unaligned()));
                    }
                }
                _ => {}
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok(Some(datagram))
}

/// `SO_PASSRIGHTS` (Linux 6.16+; not in the libc crate yet): with it off, the kernel refuses a
/// datagram that carries descriptors (`SCM_RIGHTS`): the sender's `sendmsg` fails with EPERM.
const SO_PASSRIGHTS: libc::c_int = 83;

/// Whether the kernel refuses descriptors sent to the mark socket (see [`refuse_descriptors`]).
static REFUSES_DESCRIPTORS: AtomicBool = AtomicBool::new(false);

/// Turns `SO_PASSRIGHTS` off where the kernel has it. A descriptor that montrace received would
/// be montrace's to close, and closing the last reference to some files blocks (a TCP socket
/// with `SO_LINGER` whose peer does not read, a file on a FUSE mount the command serves). Older
/// kernels do not know the option: there the socket is read on a thread of its own
/// ([`MarkReceiver`]), so a close that blocks holds that thread and never the event loop.
fn refuse_descriptors(socket: &UnixDatagram) -> io::Result<()> {
    match set_option(socket, SO_PASSRIGHTS, 0) {
        Ok(()) => {
            REFUSES_DESCRIPTORS.store(true, Ordering::Relaxed);
            Ok(())
        }
        Err(err) if err.raw_os_error() == Some(libc::ENOPROTOOPT) => Ok(()),
        Err(err) => Err(err),
    }
}

/// Whether this kernel refuses descriptors on the mark socket (`SO_PASSRIGHTS`), as found when
/// the last socket was set up.
pub fn kernel_refuses_descriptors() -> bool {
    REFUSES_DESCRIPTORS.load(Ordering::Relaxed)
}

fn set_flag(socket: &UnixDatagram, option: libc::c_int) -> io::Result<()> {
    set_option(socket, option, 1)
}

fn set_option(socket: &UnixDatagram, option: libc::c_int, value: libc::c_int) -> io::Result<()> {
    let on: libc::c_int = value;
    // SAFETY: the fd is a live socket and `on` is a c_int, as SOL_SOCKET boolean options take.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Removes `<parent>/montrace-<pid>-XXXXXX` directories of montraces that are gone (killed with
/// SIGKILL, say, so their `Drop` never ran) when they hold nothing but a socket named
/// `mark.sock`. Best effort: what cannot be read or removed (another user's) stays.
fn remove_stale_dirs(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(stale_candidate_pid) else {
            continue;
        };
        if process_exists(pid) {
            continue;
        }
        let dir = entry.path();
        let only_a_socket = std::fs::read_dir(&dir).is_ok_and(|mut inside| {
            inside.all(|e| {
                e.is_ok_and(|e| {
                    e.file_name() == "mark.sock" && e.file_type().is_ok_and(|t| t.is_socket())
                })
            })
        });
        if only_a_socket {
            let _ = std::fs::remove_file(dir.join("mark.sock"));
            let _ = std::fs::remove_dir(&dir);
        }
    }
}

/// The montrace pid in a directory name that [`MarkServer::bind_in`] makes.
fn stale_candidate_pid(name: &str) -> Option<i32> {
    let (pid, random) = name.strip_prefix(DIR_PREFIX)?.split_once('-')?;
    if random.len() != 6
        || !random.bytes().all(|b| b.is_ascii_alphanumeric())
        || !pid.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    pid.parse().ok().filter(|&pid| pid > 0)
}

/// Whether a process `pid` exists (in montrace's pid namespace), whoever owns it.
fn process_exists(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// `mkdtemp(parent/prefixXXXXXX)`: a new directory, mode 0700, that no one else can have made.
fn make_private_dir(parent: &Path, prefix: &str) -> io::Result<PathBuf> {
    let template = parent.join(format!("{prefix}XXXXXX"));
    let template = CString::new(template.into_os_string().into_vec())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let raw = template.into_raw();
    // SAFETY: raw is a NUL-terminated buffer we own; mkdtemp rewrites the XXXXXX in place.
    let made = unsafe { libc::mkdtemp(raw) };
    // SAFETY: raw came from CString::into_raw and mkdtemp kept its length.
    let template = unsafe { CString::from_raw(raw) };
    if made.is_null() {
        return Err(io::Error::last_os_error());
    }
    Ok(PathBuf::from(OsString::from_vec(template.into_bytes())))
}

/// Why `montrace mark` sent nothing.
#[derive(Debug)]
pub enum SendError {
    /// Not inside `montrace run`: [`SOCKET_ENV`] is not set.
    NoRun,
    /// A label montrace would reject (checked here, so the error reaches the script's author).
    Invalid(MarkError),
    /// The socket failed, or the `montrace run` is gone.
    Failed(anyhow::Error),
}

/// Sends one mark to the `montrace run` whose socket is `socket_path` (the command's
/// [`SOCKET_ENV`]). The mark's pid is this process's (the kernel reports the real sender).
pub fn send_mark(
    socket_path: Option<OsString>,
    kind: MarkKind,
    label: &str,
) -> Result<(), SendError> {
    let Some(path) = socket_path.filter(|p| !p.is_empty()) else {
        return Err(SendError::NoRun);
    };
    let line = format_line(kind, label);
    parse_line(&line).map_err(SendError::Invalid)?;
    let sent = || -> anyhow::Result<()> {
        let socket = UnixDatagram::unbound().context("cannot create a socket")?;
        socket.set_write_timeout(Some(SEND_TIMEOUT))?;
        socket.send_to(&line, &path).with_context(|| {
            format!(
                "cannot send the mark to {} ({SOCKET_ENV}); is the `montrace run` that started \
                 this command still running?",
                Path::new(&path).display()
            )
        })?;
        Ok(())
    };
    sent().map_err(SendError::Failed)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt as _;
    use std::time::Instant;

    use super::*;

    #[test]
    fn the_budget_keeps_a_burst_then_the_rate_then_stops_at_the_cap() {
        let mut budget = MarkBudget::default();
        let at = |s: f64| (s * 1e9) as i64;
        // A burst at one instant: MARK_BURST kept, the rest dropped.
        let kept = (0..2_000).filter(|_| budget.admit(at(0.0))).count();
        assert_eq!(kept as f64, MARK_BURST);
        assert_eq!(budget.dropped(), 1_000);
        // One second later the bucket holds MARK_RATE more.
        let kept = (0..1_000).filter(|_| budget.admit(at(1.0))).count();
        assert_eq!(kept as f64, MARK_RATE);
        // At the sustained rate for a long time, the total cap ends it.
        let mut t = 1.0;
        while budget.kept() < MAX_MARKS {
            t += 1.0 / MARK_RATE;
            budget.admit(at(t));
        }
        assert!(
            !budget.admit(at(t + 100.0)),
            "over the cap, even after a pause"
        );
        assert_eq!(budget.kept(), MAX_MARKS);
    }

    fn ok(kind: MarkKind, label: &str) -> Result<(MarkKind, String), MarkError> {
        Ok((kind, label.to_string()))
    }

    #[test]
    fn parse_line_reads_the_three_verbs() {
        assert_eq!(parse_line(b"point ready"), ok(MarkKind::Point, "ready"));
        assert_eq!(parse_line(b"begin load\n"), ok(MarkKind::Begin, "load"));
        assert_eq!(parse_line(b"end load\r\n"), ok(MarkKind::End, "load"));
    }

    #[test]
    fn parse_line_keeps_inner_spaces_and_trims_the_outer_ones() {
        assert_eq!(
            parse_line(b"begin load the model\n"),
            ok(MarkKind::Begin, "load the model")
        );
        assert_eq!(
            parse_line(b"end   epoch 3  \n"),
            ok(MarkKind::End, "epoch 3")
        );
        assert_eq!(
            parse_line("point données chargées".as_bytes()),
            ok(MarkKind::Point, "données chargées")
        );
    }

    #[test]
    fn parse_line_rejects_what_is_not_a_mark() {
        assert_eq!(parse_line(b""), Err(MarkError::Empty));
        assert_eq!(parse_line(b"\n"), Err(MarkError::Empty));
        assert_eq!(
            parse_line(b"start load"),
            Err(MarkError::UnknownVerb("start".into()))
        );
        assert_eq!(
            parse_line(b"BEGIN load"),
            Err(MarkError::UnknownVerb("BEGIN".into()))
        );
        assert_eq!(
            parse_line(b"load"),
            Err(MarkError::UnknownVerb("load".into()))
        );
        assert_eq!(parse_line(b"begin"), Err(MarkError::MissingLabel("begin")));
        assert_eq!(parse_line(b"end   \n"), Err(MarkError::MissingLabel("end")));
        assert_eq!(parse_line(b"point \xff\xfe"), Err(MarkError::NotUtf8));
        assert_eq!(
            parse_line(b"begin a\nend a\n"),
            Err(MarkError::ControlCharacter)
        );
        assert_eq!(parse_line(b"point a\tb"), Err(MarkError::ControlCharacter));
    }

    #[test]
    fn parse_line_takes_labels_up_to_256_bytes() {
        let longest = "é".repeat(MAX_LABEL_BYTES / 2);
        assert_eq!(
            parse_line(format!("point {longest}\n").as_bytes()),
            ok(MarkKind::Point, &longest)
        );
        let too_long = "x".repeat(MAX_LABEL_BYTES + 1);
        assert_eq!(
            parse_line(format!("point {too_long}").as_bytes()),
            Err(MarkError::LabelTooLong(MAX_LABEL_BYTES + 1))
        );
    }

    #[test]
    fn format_line_is_read_back_by_parse_line() {
        for kind in [MarkKind::Point, MarkKind::Begin, MarkKind::End] {
            let line = format_line(kind, "phase 1");
            assert_eq!(parse_line(&line), ok(kind, "phase 1"));
        }
        assert_eq!(format_line(MarkKind::End, "x"), b"end x\n");
    }

    #[test]
    fn a_marks_time_is_when_it_was_sent_on_the_callers_clock() {
        // Waited 30 ms in the socket: 30 ms before `now` on any clock.
        assert_eq!(sent_time(1_000, 5_000_030, Some(5_000_000)), 970);
        // A wall clock stepped back since the send does not move the mark after now.
        assert_eq!(sent_time(1_000, 4_000_000, Some(5_000_000)), 1_000);
        assert_eq!(sent_time(1_000, 5_000_000, None), 1_000);
    }

    fn send(path: &Path, bytes: &[u8]) {
        UnixDatagram::unbound()
            .unwrap()
            .send_to(bytes, path)
            .unwrap_or_else(|e| panic!("sending to {}: {e}", path.display()));
    }

    #[test]
    fn marks_sent_to_the_socket_are_received_with_the_senders_pid() {
        let tmp = tempfile::tempdir().unwrap();
        let mut server = MarkServer::bind_in(tmp.path(), None).unwrap();
        assert!(server.path().starts_with(tmp.path()));
        assert!(server.receive(host::realtime_ns).is_empty());

        let before = host::realtime_ns();
        send(server.path(), b"begin load the model\n");
        send(server.path(), b"stop everything\n");
        send(server.path(), b"end load the model");
        send(server.path(), b"point ");
        send(server.path(), b"point done\n");
        let after = host::realtime_ns();

        let marks = server.receive(host::realtime_ns);
        let got: Vec<(MarkKind, &str)> = marks.iter().map(|m| (m.kind, m.label.as_str())).collect();
        assert_eq!(
            got,
            [
                (MarkKind::Begin, "load the model"),
                (MarkKind::End, "load the model"),
                (MarkKind::Point, "done"),
            ]
        );
        for mark in &marks {
            assert_eq!(mark.pid, std::process::id());
            assert!(
                (before..=after).contains(&mark.time_ns),
                "{mark:?} not within [{before}, {after}]"
            );
        }
        assert!(marks.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
        assert_eq!(server.invalid(), 2);
        assert_eq!(
            server.first_invalid(),
            Some(&InvalidMark {
                pid: std::process::id(),
                error: MarkError::UnknownVerb("stop".into())
            })
        );
        // Drained: nothing more, and no blocking.
        assert!(server.receive(host::realtime_ns).is_empty());
    }

    /// Sends `bytes` to `path` with `fd` attached (`SCM_RIGHTS`).
    fn send_with_fd(path: &Path, bytes: &[u8], fd: RawFd) -> io::Result<()> {
        let sender = UnixDatagram::unbound().unwrap();
        sender.connect(path).unwrap();
        let mut iov = libc::iovec {
            iov_base: bytes.as_ptr() as *mut _,
            iov_len: bytes.len(),
        };
        let mut control = [0u64; 4];
        // SAFETY: a msghdr over live buffers; CMSG macros stay within `control`.
        unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(4) as _;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(4) as _;
            libc::CMSG_DATA(cmsg).cast::<RawFd>().write_unaligned(fd);
            if libc::sendmsg(sender.as_raw_fd(), &msg, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// A TCP socket with `SO_LINGER` `secs` whose send queue is full and whose peer (returned,
    /// to keep it open) never reads: closing its last reference blocks up to `secs`.
    fn lingering_socket(secs: i32) -> (std::net::TcpStream, std::net::TcpStream) {
        use std::io::Write as _;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (peer, _) = listener.accept().unwrap();
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: secs,
        };
        // SAFETY: a live socket and a linger struct of the size given.
        unsafe {
            libc::setsockopt(
                client.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&linger as *const libc::linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            )
        };
        client.set_nonblocking(true).unwrap();
        let chunk = vec![0u8; 65536];
        while (&client).write(&chunk).is_ok() {}
        (client, peer)
    }

    #[test]
    fn the_kernel_refuses_descriptors_where_it_can() {
        let tmp = tempfile::tempdir().unwrap();
        let server = MarkServer::bind_in(tmp.path(), None).unwrap();
        let (client, _peer) = lingering_socket(1);
        let sent = send_with_fd(server.path(), b"point x\n", client.as_raw_fd());
        if kernel_refuses_descriptors() {
            assert_eq!(sent.unwrap_err().raw_os_error(), Some(libc::EPERM));
        } else {
            sent.unwrap();
        }
    }

    /// The mark thread never preempts the loop that wakes it (see `batch_scheduling`).
    #[test]
    fn the_mark_thread_runs_under_batch_scheduling() {
        let tmp = tempfile::tempdir().unwrap();
        let server = MarkServer::bind_in(tmp.path(), None).unwrap();
        let mut receiver = MarkReceiver::spawn(server).unwrap();
        let policies = || -> Vec<i32> {
            std::fs::read_dir("/proc/self/task")
                .unwrap()
                .flatten()
                .filter(|task| {
                    std::fs::read_to_string(task.path().join("comm"))
                        .is_ok_and(|comm| comm.trim() == "montrace-marks")
                })
                .filter_map(|task| task.file_name().to_str()?.parse::<i32>().ok())
                // SAFETY: no memory is passed.
                .map(|tid| unsafe { libc::sched_getscheduler(tid) })
                .collect()
        };
        let started = Instant::now();
        let mut seen = policies();
        while !seen.contains(&libc::SCHED_BATCH) && started.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
            seen = policies();
        }
        assert!(
            seen.contains(&libc::SCHED_BATCH),
            "policies of mark threads: {seen:?}"
        );
        receiver.finish(Duration::from_secs(5));
    }

    /// `finish` has every mark sent before it; the socket and its directory are gone once the
    /// removal was waited for.
    #[test]
    fn the_socket_is_removed_after_the_last_marks() {
        let tmp = tempfile::tempdir().unwrap();
        let server = MarkServer::bind_in(tmp.path(), None).unwrap();
        let path = server.path().to_path_buf();
        let dir = path.parent().unwrap().to_path_buf();
        let mut receiver = MarkReceiver::spawn(server).unwrap();
        send(&path, b"point one\n");
        send(&path, b"point two\n");
        let marks = receiver.finish(Duration::from_secs(5));
        let labels: Vec<&str> = marks.iter().map(|m| m.label.as_str()).collect();
        assert_eq!(labels, ["one", "two"]);
        assert!(!receiver.stuck());
        receiver.removal().wait(Duration::from_secs(5));
        assert!(
            !path.exists() && !dir.exists(),
            "{} should be removed",
            dir.display()
        );
    }

    #[test]
    fn a_descriptor_whose_close_blocks_holds_the_mark_thread_not_its_reader() {
        let tmp = tempfile::tempdir().unwrap();
        let server = MarkServer::bind_in(tmp.path(), None).unwrap();
        // As on a kernel without SO_PASSRIGHTS: descriptors come through.
        let _ = set_option(&server.socket, SO_PASSRIGHTS, 1);
        let path = server.path().to_path_buf();
        let mut receiver = MarkReceiver::spawn(server).unwrap();
        let (client, _peer) = lingering_socket(5);
        send(&path, b"point before\n");
        std::thread::sleep(Duration::from_millis(100));
        send_with_fd(&path, b"point with a descriptor\n", client.as_raw_fd()).unwrap();
        drop(client);
        send(&path, b"point after\n");
        std::thread::sleep(Duration::from_millis(100));
        let asked = Instant::now();
        let marks = receiver.finish(Duration::from_millis(300));
        // An upper bound, not a race: finish gives the thread 300 ms; a reader held by the
        // close would wait the descriptor's 5 s of linger.
        assert!(
            asked.elapsed() < Duration::from_secs(2),
            "the reader waited {:?} for the mark thread",
            asked.elapsed()
        );
        // The thread is stuck closing the descriptor (for up to 5 s); the marks it had passed on
        // before are kept. (Once, among the whole unit suite on a loaded machine, the close did
        // not block: then every mark came through, and the bound above is all there is to see.)
        let labels: Vec<&str> = marks.iter().map(|m| m.label.as_str()).collect();
        if receiver.stuck() {
            assert_eq!(labels, ["before"]);
        } else {
            assert_eq!(labels, ["before", "with a descriptor", "after"]);
        }
    }

    #[test]
    fn a_mark_read_late_keeps_the_time_it_was_sent() {
        let tmp = tempfile::tempdir().unwrap();
        let mut server = MarkServer::bind_in(tmp.path(), None).unwrap();
        let before = host::realtime_ns();
        send(server.path(), b"point early\n");
        let after = host::realtime_ns();
        std::thread::sleep(Duration::from_millis(100));
        let marks = server.receive(host::realtime_ns);
        assert_eq!(marks.len(), 1);
        assert!(
            (before..=after).contains(&marks[0].time_ns),
            "{:?} should be the send time, within [{before}, {after}]",
            marks[0]
        );
    }

    #[test]
    fn an_oversized_datagram_is_invalid() {
        let tmp = tempfile::tempdir().unwrap();
        let mut server = MarkServer::bind_in(tmp.path(), None).unwrap();
        let mut huge = b"point ".to_vec();
        huge.resize(DATAGRAM_BYTES * 4, b'x');
        send(server.path(), &huge);
        send(server.path(), b"point after\n");
        let marks = server.receive(host::realtime_ns);
        assert_eq!(marks.len(), 1);
        assert_eq!(marks[0].label, "after");
        assert_eq!(server.invalid(), 1);
    }

    #[test]
    fn the_socket_is_private_to_its_owner_and_removed_on_drop() {
        let tmp = tempfile::tempdir().unwrap();
        // SAFETY: getuid and getgid cannot fail.
        let me = unsafe { (libc::getuid(), libc::getgid()) };
        let owner = crate::store::userfs::Owner {
            uid: me.0,
            gid: me.1,
            groups: vec![me.1],
        };
        let server = MarkServer::bind_in(tmp.path(), Some(&owner)).unwrap();
        let dir = server.path().parent().unwrap().to_path_buf();
        let dir_meta = std::fs::metadata(&dir).unwrap();
        let socket_meta = std::fs::metadata(server.path()).unwrap();
        assert_eq!(dir_meta.mode() & 0o777, 0o700);
        assert_eq!(socket_meta.mode() & 0o777, 0o600);
        assert_eq!((dir_meta.uid(), dir_meta.gid()), me);
        assert_eq!((socket_meta.uid(), socket_meta.gid()), me);
        assert!(dir
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with(&format!("montrace-{}-", std::process::id())));
        drop(server);
        assert!(!dir.exists(), "{} should be removed", dir.display());
    }

    #[test]
    fn directories_of_montraces_that_are_gone_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let socket_dir = |name: &str| {
            let dir = tmp.path().join(name);
            std::fs::create_dir(&dir).unwrap();
            // Bound and closed without removal, as a killed montrace leaves it.
            drop(UnixDatagram::bind(dir.join("mark.sock")).unwrap());
            dir
        };
        // No process has pid i32::MAX (pid_max is at most 2^22).
        let gone = socket_dir(&format!("montrace-{}-abcdef", i32::MAX));
        let alive = socket_dir(&format!("montrace-{}-abcdef", std::process::id()));
        let other_name = socket_dir(&format!("montrace-{}-runs", i32::MAX));
        let more_inside = socket_dir(&format!("montrace-{}-ghijkl", i32::MAX));
        std::fs::write(more_inside.join("notes"), "mine").unwrap();

        let mut server = MarkServer::bind_in(tmp.path(), None).unwrap();
        assert!(gone.exists(), "swept at bind");
        server.sweep();
        assert!(!gone.exists(), "{} should be removed", gone.display());
        for kept in [&alive, &other_name, &more_inside] {
            assert!(
                kept.join("mark.sock").exists(),
                "{} should stay",
                kept.display()
            );
        }
        assert!(server.path().exists());
    }

    /// The run's mark thread sweeps once the run has gone on for a second, not before; a mark
    /// sent meanwhile is still received.
    #[test]
    fn the_mark_thread_sweeps_after_a_second() {
        let tmp = tempfile::tempdir().unwrap();
        let gone = tmp.path().join(format!("montrace-{}-abcdef", i32::MAX));
        std::fs::create_dir(&gone).unwrap();
        drop(UnixDatagram::bind(gone.join("mark.sock")).unwrap());
        let server = MarkServer::bind_in(tmp.path(), None).unwrap();
        let path = server.path().to_path_buf();
        let started = std::time::Instant::now();
        let mut receiver = MarkReceiver::spawn(server).unwrap();
        UnixDatagram::unbound()
            .unwrap()
            .send_to(b"point early", &path)
            .unwrap();
        while gone.exists() && started.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!gone.exists(), "not swept in 20 s");
        assert!(started.elapsed() >= SWEEP_AFTER, "swept before a second");
        let marks = receiver.finish(Duration::from_secs(5));
        assert_eq!(marks.len(), 1, "{marks:?}");
    }

    fn kind(begin: bool, end: bool) -> MarkKind {
        match (begin, end) {
            (true, _) => MarkKind::Begin,
            (_, true) => MarkKind::End,
            _ => MarkKind::Point,
        }
    }

    #[test]
    fn montrace_mark_sends_one_mark() {
        let tmp = tempfile::tempdir().unwrap();
        let mut server = MarkServer::bind_in(tmp.path(), None).unwrap();
        let path = Some(server.path().as_os_str().to_owned());
        send_mark(path.clone(), kind(true, false), "load").unwrap();
        send_mark(path.clone(), kind(false, true), "load").unwrap();
        send_mark(path, kind(false, false), "ready now").unwrap();
        let got: Vec<(MarkKind, String)> = server
            .receive(host::realtime_ns)
            .into_iter()
            .map(|m| (m.kind, m.label))
            .collect();
        assert_eq!(
            got,
            [
                (MarkKind::Begin, "load".to_string()),
                (MarkKind::End, "load".to_string()),
                (MarkKind::Point, "ready now".to_string()),
            ]
        );
    }

    #[test]
    fn montrace_mark_outside_a_run_is_a_usage_error() {
        assert!(matches!(
            send_mark(None, kind(true, false), "load"),
            Err(SendError::NoRun)
        ));
        assert!(matches!(
            send_mark(Some(OsString::new()), kind(true, false), "load"),
            Err(SendError::NoRun)
        ));
    }

    #[test]
    fn montrace_mark_refuses_a_label_montrace_would_reject() {
        let tmp = tempfile::tempdir().unwrap();
        let mut server = MarkServer::bind_in(tmp.path(), None).unwrap();
        let path = Some(server.path().as_os_str().to_owned());
        assert!(matches!(
            send_mark(path.clone(), kind(false, false), ""),
            Err(SendError::Invalid(_))
        ));
        assert!(matches!(
            send_mark(path, kind(false, false), "two\nlines"),
            Err(SendError::Invalid(_))
        ));
        assert!(server.receive(host::realtime_ns).is_empty());
        assert_eq!(server.invalid(), 0);
    }

    #[test]
    fn montrace_mark_fails_when_montrace_is_gone() {
        let tmp = tempfile::tempdir().unwrap();
        let server = MarkServer::bind_in(tmp.path(), None).unwrap();
        let path = server.path().as_os_str().to_owned();
        drop(server);
        let Err(SendError::Failed(err)) = send_mark(Some(path), kind(true, false), "load") else {
            panic!("a failed send");
        };
        assert!(format!("{err:#}").contains("still running"), "{err:#}");
    }
}
