//! The resident agent's protocol, the routing of its events, and its client's end (issue 33).
//!
//! `montrace agent` (monitor/src/agent/) loads the eBPF programs once and keeps them. A run
//! whose binary may not load them (a wheel's copy, a container's, an ordinary user's) asks the
//! agent instead, over a unix socket:
//!
//! ```text
//!  client                                      agent (root, capabilities dropped after loading)
//!  connect ─────────────────────────────────>  SO_PEERCRED: the client's pid and uid
//!  {"version":1,"follow":PID}\n ────────────>  pidfd_open(PID); the process is the client's
//!                                              child or the client's own (uid; /proc/PID owned
//!                                              by the client's uid: not a setuid image);
//!                                              still alive through the pidfd afterwards
//!  <──────────── {"ok":true,"mode":"tp_btf"}\n  the pid routed to this client, then tracked
//!  <──────────── [u32 length][ring record] ...  the tree's records, exactly as the ring gave them
//! ```
//!
//! The records are the ring buffer's own bytes: the client's recorder decodes them as it decodes
//! its own ring's. A client only ever gets the records of the tree it asked for: [`Routes`]
//! gives each tracked process one owner, a forked child its parent's, and drops the route at the
//! process's exit.
use std::{
    collections::{HashMap, HashSet},
    io::{self, BufRead as _, Read as _, Write as _},
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
    time::Duration,
};

use monitor_common::{kind, EventHeader, ForkEvent};
use serde::{Deserialize, Serialize};

use crate::store::model::TrackingMode;

/// Where `montrace agent` listens unless told otherwise, and where clients look.
pub const DEFAULT_SOCKET: &str = "/run/montrace/agent.sock";
/// Names the agent's socket for clients (and for the agent itself when `--socket` is not given).
pub const SOCKET_ENV: &str = "MONTRACE_AGENT_SOCKET";
pub const PROTOCOL_VERSION: u32 = 1;
/// A request line longer than this is refused (the agent reads no more).
pub const MAX_REQUEST_BYTES: usize = 4096;
/// The largest record the agent forwards (the ring's records are a few hundred bytes).
pub const MAX_FRAME_BYTES: u32 = 64 * 1024;

/// A client's one request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    pub version: u32,
    /// The root of the tree to follow: the client's held child (run) or a process it may trace.
    /// None: a greeting (`montrace doctor`), answered with the agent's mode, nothing followed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow: Option<u32>,
    /// A question to the flight recorder (`montrace history`); never with `follow`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<HistoryRequest>,
}

/// `montrace history`'s question. Whose processes it sees is the agent's to say (the asker's
/// uid from SO_PEERCRED; root's: all): no field names a user.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryRequest {
    /// Processes alive at some moment from `since_ns` to `until_ns` (wall-clock ns since the
    /// Unix epoch; no `until_ns`: now).
    pub since_ns: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ns: Option<i64>,
    /// `--where` (agent::history::filter), as the user wrote it.
    #[serde(default, rename = "where", skip_serializing_if = "String::is_empty")]
    pub filter: String,
    /// The most rows wanted (the agent holds to its own limit too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// The last line of a history answer, after its rows (one JSON object a line).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEnd {
    /// Always true: what tells this line from a row.
    pub end: bool,
    pub rows: usize,
    /// More rows matched than the answer holds.
    pub truncated: bool,
    /// History files the agent could not read (the rows of the others are there).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
}

/// The agent's answer to a request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    pub ok: bool,
    /// How the agent's programs are attached (with `ok`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<TrackingMode>,
    /// Why not (without `ok`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Reply {
    /// Yes, with the agent's mode (a request followed, or a greeting answered).
    pub fn accepted(mode: TrackingMode) -> Reply {
        Reply {
            ok: true,
            mode: Some(mode),
            error: None,
        }
    }

    pub fn refused(why: impl Into<String>) -> Reply {
        Reply {
            ok: false,
            mode: None,
            error: Some(why.into()),
        }
    }
}

/// Parses a request line (without its newline).
pub fn parse_request(line: &[u8]) -> Result<Request, String> {
    if line.len() > MAX_REQUEST_BYTES {
        return Err(format!("a request is at most {MAX_REQUEST_BYTES} bytes"));
    }
    let request: Request =
        serde_json::from_slice(line).map_err(|e| format!("not a montrace agent request: {e}"))?;
    if request.version != PROTOCOL_VERSION {
        return Err(format!(
            "protocol version {} (this agent speaks {PROTOCOL_VERSION}: use the same montrace \
             version as the agent)",
            request.version
        ));
    }
    if request.follow == Some(0) {
        return Err("pid 0 cannot be followed".into());
    }
    if request.follow.is_some() && request.history.is_some() {
        return Err("one request asks one thing: follow or history, not both".into());
    }
    Ok(request)
}

/// One record framed for the socket: its length (u32, little-endian), then its bytes.
pub fn frame(record: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(record.len() as u32).to_le_bytes());
    out.extend_from_slice(record);
}

/// Takes the whole frames at the start of `buffer`, giving each record to `each`; returns how
/// many bytes they took (a partial frame stays for the next read), or an error for a frame
/// longer than [`MAX_FRAME_BYTES`].
pub fn take_frames(buffer: &[u8], mut each: impl FnMut(&[u8])) -> Result<usize, String> {
    let mut at = 0;
    while buffer.len() - at >= 4 {
        let length = u32::from_le_bytes(buffer[at..at + 4].try_into().expect("4 bytes"));
        if length > MAX_FRAME_BYTES {
            return Err(format!("a record of {length} bytes from the agent"));
        }
        let end = at + 4 + length as usize;
        if buffer.len() < end {
            break;
        }
        each(&buffer[at + 4..end]);
        at = end;
    }
    Ok(at)
}

/// A client of the agent, as the agent numbers them.
pub type ClientId = u64;

/// Who owns each tracked process: one client per tree, a child its parent's, none after the
/// process's exit. Pure: the agent feeds it the ring's records in order.
///
/// A process is named by its pid and its start time (the records carry both): a process's exit
/// record comes at its last context switch, and its parent may reap it before that, so its pid
/// can be another process's (even another tree's) by the time the record arrives. Such an exit
/// goes to the tree of the process that ended, never to the pid's new holder.
#[derive(Debug, Default)]
pub struct Routes {
    /// The live holder of each pid.
    owner: HashMap<u32, Entry>,
    /// Processes whose pid was taken by a newer process before their exit record came.
    superseded: HashMap<u32, Vec<Entry>>,
    trees: HashMap<ClientId, HashSet<u32>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    /// `start_boottime` (ns); 0 where it is not known (a tree's root, a classic-tracepoint
    /// fork's child), which then matches any.
    start: u64,
    client: ClientId,
}

/// Whether a record's start time names the process of `entry`: exactly (`exact`), or either
/// not known.
fn matches(entry: &Entry, start: u64, exact: bool) -> bool {
    if exact {
        entry.start == start && start != 0
    } else {
        entry.start == 0 || start == 0 || entry.start == start
    }
}

impl Routes {
    /// Gives `pid` (a tree's root) to `client`; Err when another client follows it already.
    pub fn add_root(&mut self, client: ClientId, pid: u32) -> Result<(), String> {
        match self.owner.get(&pid) {
            Some(other) if other.client != client => {
                Err(format!("pid {pid} is followed by another run already"))
            }
            _ => {
                self.owner.insert(pid, Entry { start: 0, client });
                self.trees.entry(client).or_default().insert(pid);
                Ok(())
            }
        }
    }

    /// The client a ring record goes to, the routes updated by it: a fork gives the child its
    /// parent's owner, an exit ends the process's route (after this record). None: nobody's
    /// (a client gone, or a record too short to name a process).
    pub fn route(&mut self, record: &[u8]) -> Option<ClientId> {
        let header = read_header(record)?;
        match header.kind {
            kind::FORK => {
                let (parent, parent_start) = read_fork_parent(record)?;
                // A parent forking is alive: it holds its pid.
                let owner = self
                    .owner
                    .get(&parent)
                    .filter(|e| matches(e, parent_start, false))?
                    .client;
                let entry = Entry {
                    start: header.start_ns,
                    client: owner,
                };
                // A new process: whoever held its pid before has ended (its exit may come yet).
                if let Some(old) = self.owner.insert(header.pid, entry) {
                    self.superseded.entry(header.pid).or_default().push(old);
                }
                self.trees.entry(owner).or_default().insert(header.pid);
                Some(owner)
            }
            kind::EXIT => self.take(header.pid, header.start_ns),
            _ => self.find(header.pid, header.start_ns),
        }
    }

    /// The owner of process (`pid`, `start`): exact matches first, then where a start is not
    /// known; the pid's live holder before the superseded ones.
    fn find(&self, pid: u32, start: u64) -> Option<ClientId> {
        [true, false].into_iter().find_map(|exact| {
            let live = self.owner.get(&pid).filter(|e| matches(e, start, exact));
            let gone = || {
                self.superseded
                    .get(&pid)
                    .and_then(|old| old.iter().find(|e| matches(e, start, exact)))
            };
            live.or_else(gone).map(|e| e.client)
        })
    }

    /// [`Routes::find`], the process's route ended.
    fn take(&mut self, pid: u32, start: u64) -> Option<ClientId> {
        for exact in [true, false] {
            if let Some(entry) = self.owner.get(&pid).filter(|e| matches(e, start, exact)) {
                let client = entry.client;
                self.owner.remove(&pid);
                if let Some(tree) = self.trees.get_mut(&client) {
                    tree.remove(&pid);
                }
                return Some(client);
            }
            if let Some(old) = self.superseded.get_mut(&pid) {
                if let Some(at) = old.iter().position(|e| matches(e, start, exact)) {
                    let client = old.remove(at).client;
                    if old.is_empty() {
                        self.superseded.remove(&pid);
                    }
                    return Some(client);
                }
            }
        }
        None
    }

    /// Forgets `client` (gone or cut); returns the pids of its tree's live processes, which the
    /// agent stops tracking (a pid now held by another client's process is not among them).
    pub fn remove_client(&mut self, client: ClientId) -> Vec<u32> {
        let mut live = Vec::new();
        for pid in self.trees.remove(&client).unwrap_or_default() {
            if self.owner.get(&pid).is_some_and(|e| e.client == client) {
                self.owner.remove(&pid);
                live.push(pid);
            }
            if let Some(old) = self.superseded.get_mut(&pid) {
                old.retain(|e| e.client != client);
                if old.is_empty() {
                    self.superseded.remove(&pid);
                }
            }
        }
        live
    }

    /// Processes routed, over all clients (those whose exit is still to come included).
    pub fn len(&self) -> usize {
        self.owner.len() + self.superseded.values().map(Vec::len).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn read_header(record: &[u8]) -> Option<EventHeader> {
    if record.len() < std::mem::size_of::<EventHeader>() {
        return None;
    }
    // SAFETY: the length was checked; EventHeader is plain old data, read unaligned.
    Some(unsafe { std::ptr::read_unaligned(record.as_ptr().cast::<EventHeader>()) })
}

/// A fork record's parent: its pid and start time.
fn read_fork_parent(record: &[u8]) -> Option<(u32, u64)> {
    if record.len() < std::mem::size_of::<ForkEvent>() {
        return None;
    }
    // SAFETY: the length was checked; ForkEvent is plain old data, read unaligned.
    let fork = unsafe { std::ptr::read_unaligned(record.as_ptr().cast::<ForkEvent>()) };
    Some((fork.parent_pid, fork.parent_start_ns))
}

/// The agent's socket for a client: `MONTRACE_AGENT_SOCKET` when set (empty: no agent), else
/// [`DEFAULT_SOCKET`] when something is listening there. `explicit` says the user named it (then a
/// failure to reach it is an error, not a quiet fallback).
pub fn socket_path() -> Option<(PathBuf, bool)> {
    match std::env::var_os(SOCKET_ENV) {
        Some(path) if path.is_empty() => None,
        Some(path) => Some((PathBuf::from(path), true)),
        None => Path::new(DEFAULT_SOCKET)
            .exists()
            .then(|| (PathBuf::from(DEFAULT_SOCKET), false)),
    }
}

/// An agent that answered at start-up. The run's own connection is made when its request is
/// ready ([`Connection::follow`]): the agent gives a connection a few seconds to ask, and the
/// steps between montrace's start and its command's fork can take longer on a loaded machine.
pub struct Connection {
    path: PathBuf,
}

/// The agent's stream of one tree's records, once it accepted.
pub struct Stream {
    pub stream: UnixStream,
    pub mode: TrackingMode,
    /// Bytes read but not yet a whole frame.
    pending: Vec<u8>,
}

/// How long a client waits for the agent's answer.
const REPLY_WAIT: Duration = Duration::from_secs(5);

impl Connection {
    /// Whether an agent listens at `path` (a connection made and closed).
    pub fn connect(path: &Path) -> io::Result<Connection> {
        drop(UnixStream::connect(path)?);
        Ok(Connection {
            path: path.to_owned(),
        })
    }

    /// Asks the agent to follow `pid`'s tree; the stream of its records when the agent agreed.
    pub fn follow(self, pid: u32) -> anyhow::Result<Stream> {
        let mut stream = UnixStream::connect(&self.path).map_err(|e| {
            anyhow::anyhow!(
                "cannot reach the montrace agent at {}: {e}",
                self.path.display()
            )
        })?;
        let (reply, rest) = exchange(&mut stream, Some(pid))?;
        let reply: Reply = serde_json::from_slice(reply.trim_ascii_end()).map_err(|e| {
            anyhow::anyhow!(
                "the montrace agent at {} answered something else ({e})",
                self.path.display()
            )
        })?;
        if !reply.ok {
            anyhow::bail!(
                "the montrace agent at {} refused: {}",
                self.path.display(),
                reply.error.unwrap_or_default()
            );
        }
        stream.set_read_timeout(None)?;
        stream.set_nonblocking(true)?;
        Ok(Stream {
            stream,
            mode: reply.mode.unwrap_or(TrackingMode::TpBtf),
            pending: rest,
        })
    }
}

/// How the agent at `path` follows trees (its programs' mode), asking nothing else: what
/// `montrace doctor` says of it.
pub fn greet(path: &Path) -> anyhow::Result<TrackingMode> {
    let (reply, _) = exchange(&mut UnixStream::connect(path)?, None)?;
    let reply: Reply = serde_json::from_slice(reply.trim_ascii_end())
        .map_err(|e| anyhow::anyhow!("it answered something else ({e})"))?;
    match (reply.ok, reply.mode) {
        (true, Some(mode)) => Ok(mode),
        _ => anyhow::bail!("it refused: {}", reply.error.unwrap_or_default()),
    }
}

/// Sends the one request (`follow`) and reads the answer's line, waiting at most
/// [`REPLY_WAIT`]: the line, and what came after it (records already sent).
fn exchange(stream: &mut UnixStream, follow: Option<u32>) -> io::Result<(Vec<u8>, Vec<u8>)> {
    send_request(
        stream,
        &Request {
            version: PROTOCOL_VERSION,
            follow,
            history: None,
        },
    )?;
    let mut reply = Vec::new();
    let mut reader = io::BufReader::new((&*stream).take(MAX_REQUEST_BYTES as u64));
    reader.read_until(b'\n', &mut reply)?;
    let rest = reader.buffer().to_vec();
    Ok((reply, rest))
}

/// Writes one request line, the answer's wait set.
fn send_request(stream: &mut UnixStream, request: &Request) -> io::Result<()> {
    let mut line = serde_json::to_vec(request)?;
    line.push(b'\n');
    stream.set_read_timeout(Some(REPLY_WAIT))?;
    stream.write_all(&line)
}

/// The longest line of a history answer a client reads (a row is a few hundred bytes: its argv
/// is cut at 512).
const MAX_HISTORY_LINE: u64 = 1 << 20;
/// How long a client waits for the agent's history answer (it reads every file it must).
const HISTORY_WAIT: Duration = Duration::from_secs(120);

/// Asks the agent at `path` for its history (`montrace history`): each row's JSON line to
/// `each`, then what the last line said.
pub fn history(
    path: &Path,
    request: HistoryRequest,
    mut each: impl FnMut(&[u8]) -> anyhow::Result<()>,
) -> anyhow::Result<HistoryEnd> {
    let mut stream = UnixStream::connect(path).map_err(|e| {
        anyhow::anyhow!("cannot reach the montrace agent at {}: {e}", path.display())
    })?;
    send_request(
        &mut stream,
        &Request {
            version: PROTOCOL_VERSION,
            follow: None,
            history: Some(request),
        },
    )?;
    stream.set_read_timeout(Some(HISTORY_WAIT))?;
    let mut reader = io::BufReader::new(&stream);
    let mut line = Vec::new();
    let mut first = true;
    loop {
        line.clear();
        let n = (&mut reader)
            .take(MAX_HISTORY_LINE)
            .read_until(b'\n', &mut line)?;
        if n == 0 || !line.ends_with(b"\n") {
            anyhow::bail!(
                "the montrace agent at {} closed its answer before its end",
                path.display()
            );
        }
        let text = line.trim_ascii_end();
        if first {
            first = false;
            let reply: Reply = serde_json::from_slice(text)
                .map_err(|e| anyhow::anyhow!("the montrace agent answered something else ({e})"))?;
            if !reply.ok {
                anyhow::bail!(
                    "the montrace agent at {} refused: {}",
                    path.display(),
                    reply.error.unwrap_or_default()
                );
            }
            continue;
        }
        if text.starts_with(br#"{"end":"#) {
            return serde_json::from_slice(text)
                .map_err(|e| anyhow::anyhow!("the montrace agent's last line: {e}"));
        }
        each(text)?;
    }
}

impl Stream {
    /// Reads what the agent sent so far (without blocking), giving each record to `each`.
    /// Ok(false) once the agent closed the stream.
    pub fn take_in(&mut self, mut each: impl FnMut(&[u8])) -> io::Result<bool> {
        let mut open = true;
        let mut chunk = [0u8; 64 * 1024];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    open = false;
                    break;
                }
                Ok(n) => self.pending.extend_from_slice(&chunk[..n]),
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            }
            let used = take_frames(&self.pending, &mut each)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            self.pending.drain(..used);
        }
        let used = take_frames(&self.pending, &mut each)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        self.pending.drain(..used);
        Ok(open)
    }
}

impl std::os::fd::AsRawFd for Stream {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.stream.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(kind: u32, pid: u32) -> EventHeader {
        EventHeader {
            kind,
            pid,
            time_ns: 1,
            start_ns: 2,
        }
    }

    fn bytes<T>(value: &T) -> Vec<u8> {
        // SAFETY: plain old data, read as bytes.
        unsafe {
            std::slice::from_raw_parts((value as *const T).cast::<u8>(), std::mem::size_of::<T>())
        }
        .to_vec()
    }

    fn fork(child: u32, parent: u32) -> Vec<u8> {
        bytes(&ForkEvent {
            header: header(kind::FORK, child),
            parent_pid: parent,
            _pad: 0,
            parent_start_ns: 0,
            comm: [0; 16],
        })
    }

    #[test]
    fn each_tree_goes_to_its_own_client_and_ends_with_its_exits() {
        let mut routes = Routes::default();
        routes.add_root(1, 100).unwrap();
        routes.add_root(2, 200).unwrap();
        assert!(routes.add_root(2, 100).is_err(), "one owner per process");
        assert_eq!(routes.route(&fork(101, 100)), Some(1));
        assert_eq!(routes.route(&fork(201, 200)), Some(2));
        // A grandchild follows its parent, whoever forked first.
        assert_eq!(routes.route(&fork(102, 101)), Some(1));
        assert_eq!(routes.route(&bytes(&header(kind::EXEC, 102))), Some(1));
        assert_eq!(
            routes.route(&bytes(&header(kind::THREAD_EXIT, 201))),
            Some(2)
        );
        // Nobody's: a process outside every tree.
        assert_eq!(routes.route(&fork(301, 300)), None);
        assert_eq!(routes.route(&bytes(&header(kind::EXEC, 300))), None);
        // The exit goes to the owner, then the route is gone.
        assert_eq!(routes.route(&bytes(&header(kind::EXIT, 101))), Some(1));
        assert_eq!(routes.route(&bytes(&header(kind::EXEC, 101))), None);
        assert_eq!(routes.len(), 4);
        let mut left = routes.remove_client(1);
        left.sort_unstable();
        assert_eq!(left, vec![100, 102]);
        assert_eq!(routes.route(&bytes(&header(kind::EXIT, 100))), None);
        assert_eq!(
            routes.route(&fork(103, 100)),
            None,
            "a gone client's tree is nobody's"
        );
        let mut left = routes.remove_client(2);
        left.sort_unstable();
        assert_eq!(left, vec![200, 201]);
        assert!(routes.is_empty());
    }

    fn record(kind: u32, pid: u32, start_ns: u64) -> Vec<u8> {
        bytes(&EventHeader {
            kind,
            pid,
            time_ns: 1,
            start_ns,
        })
    }

    fn fork_at(child: u32, start: u64, parent: u32, parent_start: u64) -> Vec<u8> {
        bytes(&ForkEvent {
            header: EventHeader {
                kind: kind::FORK,
                pid: child,
                time_ns: 1,
                start_ns: start,
            },
            parent_pid: parent,
            _pad: 0,
            parent_start_ns: parent_start,
            comm: [0; 16],
        })
    }

    #[test]
    fn an_exit_that_comes_after_its_pid_was_reused_goes_to_the_tree_that_ended() {
        let mut routes = Routes::default();
        routes.add_root(1, 100).unwrap();
        routes.add_root(2, 200).unwrap();
        // Tree 1's 101 (start 10) ends and is reaped; its exit record is still to come when
        // tree 2 forks a new process that gets pid 101 (start 20).
        assert_eq!(routes.route(&fork_at(101, 10, 100, 0)), Some(1));
        assert_eq!(routes.route(&fork_at(101, 20, 200, 5)), Some(2));
        // The new 101's exec is tree 2's; the old 101's exit is tree 1's.
        assert_eq!(routes.route(&record(kind::EXEC, 101, 20)), Some(2));
        assert_eq!(routes.route(&record(kind::EXIT, 101, 10)), Some(1));
        assert_eq!(routes.route(&record(kind::THREAD_EXIT, 101, 20)), Some(2));
        // Tree 1 ends: the pid it no longer holds is not untracked.
        assert_eq!(routes.remove_client(1), vec![100]);
        assert_eq!(routes.route(&record(kind::EXIT, 101, 20)), Some(2));
        assert_eq!(routes.remove_client(2), vec![200]);
        assert!(routes.is_empty());
    }

    #[test]
    fn a_gone_clients_superseded_processes_are_forgotten() {
        let mut routes = Routes::default();
        routes.add_root(1, 100).unwrap();
        routes.add_root(2, 200).unwrap();
        assert_eq!(routes.route(&fork_at(101, 10, 100, 0)), Some(1));
        assert_eq!(routes.route(&fork_at(101, 20, 200, 0)), Some(2));
        let mut left = routes.remove_client(1);
        left.sort_unstable();
        assert_eq!(left, vec![100]);
        // The old 101's exit now belongs to nobody, the new one's to tree 2.
        assert_eq!(routes.route(&record(kind::EXIT, 101, 10)), None);
        assert_eq!(routes.route(&record(kind::EXIT, 101, 20)), Some(2));
        assert_eq!(routes.len(), 1);
    }

    #[test]
    fn short_records_are_nobodys() {
        let mut routes = Routes::default();
        routes.add_root(1, 100).unwrap();
        assert_eq!(routes.route(&[0u8; 8]), None);
        let mut short_fork = fork(101, 100);
        short_fork.truncate(std::mem::size_of::<EventHeader>() + 2);
        assert_eq!(routes.route(&short_fork), None);
    }

    #[test]
    fn frames_are_taken_whole_and_in_order() {
        let mut out = Vec::new();
        frame(b"abc", &mut out);
        frame(b"", &mut out);
        frame(b"defgh", &mut out);
        let mut got = Vec::new();
        // A partial last frame stays for the next read.
        let used = take_frames(&out[..out.len() - 2], |r| got.push(r.to_vec())).unwrap();
        assert_eq!(got, vec![b"abc".to_vec(), vec![]]);
        assert_eq!(used, 4 + 3 + 4);
        let used = take_frames(&out[used..], |r| got.push(r.to_vec())).unwrap();
        assert_eq!(got.last().unwrap(), b"defgh");
        assert_eq!(used, 4 + 5);
        let huge = (MAX_FRAME_BYTES + 1).to_le_bytes();
        assert!(take_frames(&huge, |_| {}).is_err());
    }

    #[test]
    fn requests_are_checked() {
        assert_eq!(
            parse_request(br#"{"version":1,"follow":42}"#),
            Ok(Request {
                version: 1,
                follow: Some(42),
                history: None,
            })
        );
        assert_eq!(
            parse_request(br#"{"version":1}"#),
            Ok(Request {
                version: 1,
                follow: None,
                history: None,
            })
        );
        assert!(parse_request(br#"{"version":2,"follow":42}"#)
            .unwrap_err()
            .contains("protocol version 2"));
        assert!(parse_request(br#"{"version":1,"follow":0}"#).is_err());
        assert!(parse_request(br#"{"version":1,"follow":1,"uid":0}"#).is_err());
        assert!(parse_request(b"garbage").is_err());
        // A history question names no user: a uid in it is refused, not read.
        let asked = parse_request(br#"{"version":1,"history":{"since_ns":5,"where":"comm=make"}}"#)
            .unwrap();
        assert_eq!(
            asked.history,
            Some(HistoryRequest {
                since_ns: 5,
                until_ns: None,
                filter: "comm=make".into(),
                limit: None,
            })
        );
        assert!(parse_request(br#"{"version":1,"history":{"since_ns":5,"uid":0}}"#).is_err());
        assert!(
            parse_request(br#"{"version":1,"follow":3,"history":{"since_ns":5}}"#)
                .unwrap_err()
                .contains("not both")
        );
        assert!(parse_request(&vec![b' '; MAX_REQUEST_BYTES + 1]).is_err());
    }
}
