//! The resident agent's protocol, the routing of its events, and its client's end (issue 33).
//!
//! `montrace agent` (monitor/src/agent/) loads the eBPF programs once and keeps them. A run
//! whose binary may not load them (a wheel's copy, a container's, an ordinary user's) asks the
//! agent instead, over a unix socket:
//!
//! ```text
//!  client                                      agent (root, capabilities dropped after loading)
//!  connect ─────────────────────────────────>  SO_PEERCRED: the client's pid and uid
//!  {"version":4,"follow":PID}\n ────────────>  pidfd_open(PID); the process is the client's
//!                                              child or the client's own (uid; /proc/PID owned
//!                                              by the client's uid: not a setuid image);
//!                                              still alive through the pidfd afterwards
//!  <──────────── {"ok":true,"mode":"tp_btf"}\n  the pid routed to this client, then tracked
//!  <──────────── [u32 length][ring record] ...  the tree's records, exactly as the ring gave them
//!  (its command reaped) one byte ────────────>  the ring drained now, not at the next tick
//!                                              the tree's last exit routed: its loss counters
//!                                              read (protocol 4, a `run`'s tree)
//!  <── [u32 1<<31 | length]{"lost":{..}}       what the ring lost while this client was followed
//!  <──────────── (closed)
//! ```
//!
//! The nudge can reach the agent after its last read of the stream: closed with that byte
//! unread, the stream is reset, and the client reads ECONNRESET after the frames queued before
//! it. Once the end frame is in, that is the agent's close ([`Stream::take_in`]).
//!
//! A tree the agent does not see end (an `attach`'s, a protocol 2 or 3 client's, or one whose
//! exit records the ring lost) is ended by its client: its writing half shut
//! (`shutdown(SHUT_WR)`), answered at the agent's next drain with the same end frame. Answering
//! a `run` with its tree's last exit record spares it that round trip at its end (0.1 to 0.2 ms
//! of a `/bin/true` run on the 2-core test machine).
//!
//! The records are the ring buffer's own bytes: the client's recorder decodes them as it decodes
//! its own ring's. A client only ever gets the records of the tree it asked for: [`Routes`]
//! gives each tracked process one owner, a forked child its parent's, and drops the route at the
//! process's exit.
//!
//! The ring and its loss counters are the agent's, shared by every client: a record that did
//! not fit names no tree, so the agent cannot say whose it was. Each client is told, at its end,
//! every loss counted while it was followed ([`LossLedger`]): a loss during two runs is told to
//! both, and a run's `lost_events` is then what a standalone run would say of its own ring, or
//! more, never less. (Version 1 of the protocol had no end frame: such a client closes and is
//! told nothing.)
//!
//! A byte from the client after its request (version 3, [`NUDGE`]) asks for a drain now: the
//! agent reads its ring every [`DRAIN_EVERY`](crate::agent) while clients are followed, and a
//! run's end waits for its command's exit record, which a `/bin/true` run then waited 2 ms for.
//! One nudge a millisecond is honoured per client ([`NUDGE_EVERY`]), and a connection that sends
//! more than [`MAX_NUDGE_BYTES`] is cut off; a version 2 client's byte ends its part, as before.
//! A client refused for its version asks again in the version before, down to 2.
use std::{
    collections::{HashMap, HashSet},
    io::{self, BufRead as _, Read as _, Write as _},
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
    time::Duration,
};

use monitor_common::{kind, EventHeader};
use serde::{Deserialize, Serialize};

use crate::store::model::{LostEvents, TrackingMode};

/// Where `montrace agent` listens unless told otherwise, and where clients look.
pub const DEFAULT_SOCKET: &str = "/run/montrace/agent.sock";
/// Names the agent's socket for clients (and for the agent itself when `--socket` is not given).
pub const SOCKET_ENV: &str = "MONTRACE_AGENT_SOCKET";
/// The protocol a client speaks (2: the end frame with the losses, [`FollowEnd`]; 3: nudges,
/// [`NUDGE`]; 4: a `run`'s end frame sent as its tree's last process exits).
pub const PROTOCOL_VERSION: u32 = 4;
/// The oldest version a client falls back to, one version at a time, while the agent refuses
/// the one asked (an older agent).
const FALLBACK_PROTOCOL_VERSION: u32 = 2;
/// What a version 3 client sends to ask for a drain now (any byte does).
pub const NUDGE: u8 = b'!';
/// The agent honours one nudge per client in this time; more are read and ignored.
pub const NUDGE_EVERY: Duration = Duration::from_millis(1);
/// The most nudge bytes a connection may send: a client sends one when its command is reaped,
/// so a connection that sends more than this is not a client's, and the agent cuts it off (its
/// tree untracked), as it cuts one that stops reading. A flood then costs the agent this many
/// bytes read, not a read for every 512 bytes for as long as it goes on.
pub const MAX_NUDGE_BYTES: usize = 64;
/// The oldest protocol the agent still serves (1: records only, the client closes at its end).
pub const OLDEST_PROTOCOL_VERSION: u32 = 1;
/// A request line longer than this is refused (the agent reads no more).
pub const MAX_REQUEST_BYTES: usize = 4096;
/// The largest record the agent forwards (the ring's records are a few hundred bytes).
pub const MAX_FRAME_BYTES: u32 = 64 * 1024;
/// The bit of a frame's length that makes it a note from the agent ([`FollowEnd`], JSON), not
/// a ring record.
pub const NOTE_FRAME: u32 = 1 << 31;
/// The largest note the agent sends (a [`FollowEnd`] is about 100 bytes).
pub const MAX_NOTE_BYTES: u32 = 4096;

/// A client's one request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    pub version: u32,
    /// The root of the tree to follow: the client's held child (run) or a process it may trace.
    /// None: a greeting (`montrace doctor`), answered with the agent's mode, nothing followed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow: Option<u32>,
    /// With `follow` (protocol 2, `montrace attach`): the process's descendants alive now are
    /// followed too, each that the client may follow ([`Reply::skipped`]: those it may not).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tree: bool,
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
    /// A `tree` request: the descendants alive at the request that are not followed (another
    /// user's, a set-uid image's, or another run's), with their own descendants.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Reply {
    /// Yes, with the agent's mode (a request followed, or a greeting answered).
    pub fn accepted(mode: TrackingMode) -> Reply {
        Reply {
            ok: true,
            mode: Some(mode),
            error: None,
            skipped: 0,
        }
    }

    /// A refusal of the request's protocol version ([`parse_request`]'s words): an older
    /// agent.
    pub fn version_refused(&self) -> bool {
        !self.ok
            && self
                .error
                .as_deref()
                .is_some_and(|why| why.starts_with(VERSION_REFUSED))
    }

    pub fn refused(why: impl Into<String>) -> Reply {
        Reply {
            ok: false,
            mode: None,
            error: Some(why.into()),
            skipped: 0,
        }
    }
}

/// How a refusal of the request's version begins (agents of every version say it so).
const VERSION_REFUSED: &str = "protocol version";

/// Parses a request line (without its newline).
pub fn parse_request(line: &[u8]) -> Result<Request, String> {
    if line.len() > MAX_REQUEST_BYTES {
        return Err(format!("a request is at most {MAX_REQUEST_BYTES} bytes"));
    }
    let request: Request =
        serde_json::from_slice(line).map_err(|e| format!("not a montrace agent request: {e}"))?;
    if !(OLDEST_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&request.version) {
        return Err(format!(
            "{VERSION_REFUSED} {} (this agent speaks {OLDEST_PROTOCOL_VERSION} to \
             {PROTOCOL_VERSION}: use the same montrace version as the agent)",
            request.version
        ));
    }
    if request.follow == Some(0) {
        return Err("pid 0 cannot be followed".into());
    }
    if request.follow.is_some() && request.history.is_some() {
        return Err("one request asks one thing: follow or history, not both".into());
    }
    if request.tree && (request.follow.is_none() || request.version < 2) {
        return Err("`tree` goes with `follow`, in protocol 2".into());
    }
    Ok(request)
}

/// One record framed for the socket: its length (u32, little-endian), then its bytes.
pub fn frame(record: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(record.len() as u32).to_le_bytes());
    out.extend_from_slice(record);
}

/// The last frame of a followed tree's stream (protocol 2), the agent's answer to the client's
/// end (or, protocol 4, sent with a `run`'s last exit): what the agent's ring lost while the
/// client was followed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FollowEnd {
    pub lost: LostEvents,
}

/// `end` framed as a note: its length with [`NOTE_FRAME`] set, then its JSON.
pub fn frame_end(end: &FollowEnd, out: &mut Vec<u8>) {
    let json = serde_json::to_vec(end).unwrap_or_default();
    out.extend_from_slice(&(json.len() as u32 | NOTE_FRAME).to_le_bytes());
    out.extend_from_slice(&json);
}

/// A frame of the agent's stream.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A ring record of the tree.
    Record(&'a [u8]),
    /// The stream's end, with the losses ([`FollowEnd`]).
    End(FollowEnd),
}

/// Takes the whole frames at the start of `buffer`, giving each to `each`; returns how many
/// bytes they took (a partial frame stays for the next read), or an error for a record longer
/// than [`MAX_FRAME_BYTES`], a note longer than [`MAX_NOTE_BYTES`] or one that is not a
/// [`FollowEnd`].
pub fn take_frames(buffer: &[u8], mut each: impl FnMut(Frame<'_>)) -> Result<usize, String> {
    let mut at = 0;
    while buffer.len() - at >= 4 {
        let word = u32::from_le_bytes(buffer[at..at + 4].try_into().expect("4 bytes"));
        let (note, length) = (word & NOTE_FRAME != 0, word & !NOTE_FRAME);
        if length
            > if note {
                MAX_NOTE_BYTES
            } else {
                MAX_FRAME_BYTES
            }
        {
            return Err(format!("a frame of {length} bytes from the agent"));
        }
        let end = at + 4 + length as usize;
        if buffer.len() < end {
            break;
        }
        let bytes = &buffer[at + 4..end];
        if note {
            let ended =
                serde_json::from_slice(bytes).map_err(|e| format!("the agent's end frame: {e}"))?;
            each(Frame::End(ended));
        } else {
            each(Frame::Record(bytes));
        }
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
///
/// A client in a pid namespace below the host's (a container without the host's pids) names
/// its processes by their pids there, which the ring's records do not use: its records are
/// renamed for it ([`renamed`]), each process by its pid at the client's level, which the fork
/// record carries (`ForkEvent::ns_pids`).
#[derive(Debug, Default)]
pub struct Routes {
    /// The live holder of each pid.
    owner: HashMap<u32, Entry>,
    /// Processes whose pid was taken by a newer process before their exit record came.
    superseded: HashMap<u32, Vec<Entry>>,
    trees: HashMap<ClientId, HashSet<u32>>,
    /// The clients in a pid namespace below the host's: its level (1 to `NS_LEVELS`).
    levels: HashMap<ClientId, usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    /// `start_boottime` (ns); 0 where it is not known (a tree's root, a classic-tracepoint
    /// fork's child), which then matches any.
    start: u64,
    client: ClientId,
    /// The process's pid in its client's pid namespace (the host's pid for a client there); 0
    /// where the fork record did not say (a kernel that gave no `ns_pids`).
    name: u32,
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
    /// Gives `pid` (a tree's root) to `client`, which calls it `name` (its pid in the client's
    /// pid namespace; `pid` in the host's); Err when another client follows it already.
    pub fn add_root(&mut self, client: ClientId, pid: u32, name: u32) -> Result<(), String> {
        match self.owner.get(&pid) {
            Some(other) if other.client != client => {
                Err(format!("pid {pid} is followed by another run already"))
            }
            _ => {
                let entry = Entry {
                    start: 0,
                    client,
                    name,
                };
                self.owner.insert(pid, entry);
                self.trees.entry(client).or_default().insert(pid);
                Ok(())
            }
        }
    }

    /// `client` is in the pid namespace at `level` below the host's (1 to `NS_LEVELS`): its
    /// records are renamed into its pids from now on.
    pub fn name_in_namespace(&mut self, client: ClientId, level: usize) {
        self.levels.insert(client, level);
    }

    /// The client a ring record goes to, the routes updated by it: a fork gives the child its
    /// parent's owner, an exit ends the process's route (after this record). None: nobody's
    /// (a client gone, or a record too short to name a process).
    pub fn route(&mut self, record: &[u8]) -> Option<ClientId> {
        self.route_named(record).map(|(client, _)| client)
    }

    /// [`Routes::route`], and the record as its client names processes where that differs
    /// from the ring's (a client in a pid namespace of its own: [`renamed`]).
    pub fn route_named(&mut self, record: &[u8]) -> Option<(ClientId, Option<Vec<u8>>)> {
        let header = read_header(record)?;
        let (entry, parent_name) = match header.kind {
            kind::FORK => {
                let fork = crate::kernel::decode::read_fork(record).ok()?;
                // A parent forking is alive: it holds its pid.
                let parent = *self
                    .owner
                    .get(&fork.parent_pid)
                    .filter(|e| matches(e, fork.parent_start_ns, false))?;
                let name = match self.levels.get(&parent.client) {
                    Some(&level) => fork.ns_pids.get(level - 1).copied().unwrap_or(0),
                    None => header.pid,
                };
                let entry = Entry {
                    start: header.start_ns,
                    client: parent.client,
                    name,
                };
                // A new process: whoever held its pid before has ended (its exit may come yet).
                if let Some(old) = self.owner.insert(header.pid, entry) {
                    self.superseded.entry(header.pid).or_default().push(old);
                }
                self.trees
                    .entry(entry.client)
                    .or_default()
                    .insert(header.pid);
                (entry, parent.name)
            }
            kind::EXIT => (self.take(header.pid, header.start_ns)?, 0),
            _ => (self.find(header.pid, header.start_ns)?, 0),
        };
        let renamed = self
            .levels
            .get(&entry.client)
            .map(|&level| renamed(record, level, entry.name, parent_name));
        Some((entry.client, renamed))
    }

    /// The process (`pid`, `start`): exact matches first, then where a start is not known; the
    /// pid's live holder before the superseded ones.
    fn find(&self, pid: u32, start: u64) -> Option<Entry> {
        [true, false].into_iter().find_map(|exact| {
            let live = self.owner.get(&pid).filter(|e| matches(e, start, exact));
            let gone = || {
                self.superseded
                    .get(&pid)
                    .and_then(|old| old.iter().find(|e| matches(e, start, exact)))
            };
            live.or_else(gone).copied()
        })
    }

    /// [`Routes::find`], the process's route ended.
    fn take(&mut self, pid: u32, start: u64) -> Option<Entry> {
        for exact in [true, false] {
            if let Some(entry) = self.owner.get(&pid).filter(|e| matches(e, start, exact)) {
                let entry = *entry;
                self.owner.remove(&pid);
                if let Some(tree) = self.trees.get_mut(&entry.client) {
                    tree.remove(&pid);
                }
                return Some(entry);
            }
            if let Some(old) = self.superseded.get_mut(&pid) {
                if let Some(at) = old.iter().position(|e| matches(e, start, exact)) {
                    let entry = old.remove(at);
                    if old.is_empty() {
                        self.superseded.remove(&pid);
                    }
                    return Some(entry);
                }
            }
        }
        None
    }

    /// Forgets `client` (gone or cut); returns the pids of its tree's live processes, which the
    /// agent stops tracking (a pid now held by another client's process is not among them).
    pub fn remove_client(&mut self, client: ClientId) -> Vec<u32> {
        self.levels.remove(&client);
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

    /// Whether `client`'s tree has no live process left (its last exit routed).
    pub fn tree_done(&self, client: ClientId) -> bool {
        self.trees.get(&client).is_none_or(HashSet::is_empty)
    }

    /// Processes routed, over all clients (those whose exit is still to come included).
    pub fn len(&self) -> usize {
        self.owner.len() + self.superseded.values().map(Vec::len).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Which client is told which of the ring's losses. Pure: the agent reads its loss counters
/// (cumulative, the programs') when a client joins and when one ends, and hands them in here.
///
/// Between two reads the clients followed are the same ones (a read at each join and end), so
/// every loss counted between two reads happened while each of them was followed: it is added to
/// each one's tally. A client that joins gets none from before its join; a client that leaves
/// without its end (cut, gone, protocol 1) is forgotten, and no read is needed for the others:
/// they were followed the whole time.
#[derive(Debug, Default)]
pub struct LossLedger {
    /// The counters at the last read.
    last: LostEvents,
    /// Each followed client's losses so far.
    owed: HashMap<ClientId, LostEvents>,
}

impl LossLedger {
    /// The counters read now (`None`: they could not be read; what they add is then told at the
    /// next read that succeeds).
    pub fn observe(&mut self, now: Option<LostEvents>) {
        let Some(now) = now else { return };
        let new = lost_since(&now, &self.last);
        if new != LostEvents::default() {
            for owed in self.owed.values_mut() {
                *owed = lost_sum(owed, &new);
            }
        }
        self.last = now;
    }

    /// `client` starts being followed, the counters read just before.
    pub fn join(&mut self, client: ClientId, now: Option<LostEvents>) {
        self.observe(now);
        self.owed.insert(client, LostEvents::default());
    }

    /// `client`'s end, the counters read just now: what was lost while it was followed. None
    /// where the counters could not be read (what it is owed is not known whole) or it was not
    /// followed.
    pub fn leave(&mut self, client: ClientId, now: Option<LostEvents>) -> Option<LostEvents> {
        let read = now.is_some();
        self.observe(now);
        let owed = self.owed.remove(&client)?;
        read.then_some(owed)
    }

    /// Forgets `client` (it ended without asking for its losses).
    pub fn forget(&mut self, client: ClientId) {
        self.owed.remove(&client);
    }

    /// Clients followed.
    pub fn len(&self) -> usize {
        self.owed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.owed.is_empty()
    }
}

/// Each counter of `now` less `before` (none goes below 0: a counter is never reset).
fn lost_since(now: &LostEvents, before: &LostEvents) -> LostEvents {
    LostEvents {
        ringbuf_full: now.ringbuf_full.saturating_sub(before.ringbuf_full),
        track_map_full: now.track_map_full.saturating_sub(before.track_map_full),
        read_errors: now.read_errors.saturating_sub(before.read_errors),
        exits_without_final_cpu: now
            .exits_without_final_cpu
            .saturating_sub(before.exits_without_final_cpu),
    }
}

fn lost_sum(a: &LostEvents, b: &LostEvents) -> LostEvents {
    LostEvents {
        ringbuf_full: a.ringbuf_full.saturating_add(b.ringbuf_full),
        track_map_full: a.track_map_full.saturating_add(b.track_map_full),
        read_errors: a.read_errors.saturating_add(b.read_errors),
        exits_without_final_cpu: a
            .exits_without_final_cpu
            .saturating_add(b.exits_without_final_cpu),
    }
}

/// Whether a ring record is a process's exit.
pub fn is_exit(record: &[u8]) -> bool {
    read_header(record).is_some_and(|header| header.kind == kind::EXIT)
}

fn read_header(record: &[u8]) -> Option<EventHeader> {
    if record.len() < std::mem::size_of::<EventHeader>() {
        return None;
    }
    // SAFETY: the length was checked; EventHeader is plain old data, read unaligned.
    Some(unsafe { std::ptr::read_unaligned(record.as_ptr().cast::<EventHeader>()) })
}

/// `record` (of process `name`, whose parent, for a fork, is `parent_name`) as a client in the
/// pid namespace at `level` names processes: by their pids there. A thread's id (an exec's
/// `old_tid`, an exit's `tid`) that is not the process's own is not known there: 0. An exit's
/// uid and cgroup are the host's (a user namespace's mapping, the node's cgroup tree), not the
/// client's to see: 0. A fork's namespace pids count from the client's namespace, as if it were
/// the host's: the pids of the namespaces above it are not the client's to see either.
pub fn renamed(record: &[u8], level: usize, name: u32, parent_name: u32) -> Vec<u8> {
    use monitor_common::{ExecEvent, ExitEvent, ForkEvent, NS_LEVELS};
    use std::mem::offset_of;
    let mut out = record.to_vec();
    let get = |out: &[u8], at: usize| {
        out.get(at..at + 4)
            .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    };
    let put = |out: &mut Vec<u8>, at: usize, value: u32| {
        if let Some(b) = out.get_mut(at..at + 4) {
            b.copy_from_slice(&value.to_ne_bytes());
        }
    };
    let Some(host) = get(&out, offset_of!(EventHeader, pid)) else {
        return out;
    };
    put(&mut out, offset_of!(EventHeader, pid), name);
    let thread = |tid: Option<u32>| if tid == Some(host) { name } else { 0 };
    match get(&out, offset_of!(EventHeader, kind)) {
        Some(kind::FORK) => {
            put(&mut out, offset_of!(ForkEvent, parent_pid), parent_name);
            let at = offset_of!(ForkEvent, ns_level);
            let below = get(&out, at).unwrap_or(0).saturating_sub(level as u32);
            put(&mut out, at, below);
            let pids = offset_of!(ForkEvent, ns_pids);
            let old: Vec<u32> = (0..NS_LEVELS)
                .map(|i| get(&out, pids + 4 * i).unwrap_or(0))
                .collect();
            for i in 0..NS_LEVELS {
                put(
                    &mut out,
                    pids + 4 * i,
                    old.get(level + i).copied().unwrap_or(0),
                );
            }
        }
        Some(kind::EXEC) => {
            let at = offset_of!(ExecEvent, old_tid);
            let tid = thread(get(&out, at));
            put(&mut out, at, tid);
        }
        Some(kind::EXIT | kind::THREAD_EXIT) => {
            let at = offset_of!(ExitEvent, tid);
            let tid = thread(get(&out, at));
            put(&mut out, at, tid);
            // The host's uid (a user namespace's mapping) and cgroup are not the client's.
            put(&mut out, offset_of!(ExitEvent, uid), 0);
            let cgroup = offset_of!(ExitEvent, cgroup_id);
            put(&mut out, cgroup, 0);
            put(&mut out, cgroup + 4, 0);
        }
        _ => {}
    }
    out
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
    /// A `tree` request's descendants that the agent does not follow ([`Reply::skipped`]).
    pub skipped: u32,
    /// The protocol the agent agreed to (nudges from 3).
    version: u32,
    /// Bytes read but not yet a whole frame.
    pending: Vec<u8>,
    /// The agent's end frame, once it came.
    end: Option<FollowEnd>,
}

/// How long a client waits for the agent's answer.
const REPLY_WAIT: Duration = Duration::from_secs(5);
/// The most a client reads from its stream at once.
const READ_CHUNK: usize = 64 * 1024;
/// How long a client waits for the answer to a `tree` request.
const TREE_REPLY_WAIT: Duration = Duration::from_secs(30);

impl Connection {
    /// Whether an agent listens at `path` (a connection made and closed).
    pub fn connect(path: &Path) -> io::Result<Connection> {
        drop(UnixStream::connect(path)?);
        Ok(Connection {
            path: path.to_owned(),
        })
    }

    /// Asks the agent to follow `pid`'s tree from now (`run`: its held child); the stream of its
    /// records when the agent agreed.
    pub fn follow(&self, pid: u32) -> anyhow::Result<Stream> {
        self.ask_to_follow(pid)?.answer()
    }

    /// [`Connection::follow`] in two steps: the request is sent now, and the agent checks it
    /// while montrace goes on with its start; [`Asked::answer`] reads what it said (a run's
    /// start-up waited 0.25 ms for that answer with nothing else to do).
    pub fn ask_to_follow(&self, pid: u32) -> anyhow::Result<Asked<'_>> {
        self.ask(PROTOCOL_VERSION, pid, false)
    }

    /// As [`Connection::follow`], with the descendants `pid` has now (`attach`).
    pub fn follow_tree(&self, pid: u32) -> anyhow::Result<Stream> {
        self.ask(PROTOCOL_VERSION, pid, true)?.answer()
    }

    /// One connection and its request in protocol `version`, sent.
    fn ask(&self, version: u32, pid: u32, tree: bool) -> anyhow::Result<Asked<'_>> {
        let mut stream = UnixStream::connect(&self.path).map_err(|e| {
            anyhow::anyhow!(
                "cannot reach the montrace agent at {}: {e}",
                self.path.display()
            )
        })?;
        send(&mut stream, Some(pid), tree, version)?;
        Ok(Asked {
            connection: self,
            stream,
            version,
            pid,
            tree,
        })
    }
}

/// A request to follow a tree, sent; the agent's answer still to read.
pub struct Asked<'c> {
    connection: &'c Connection,
    stream: UnixStream,
    version: u32,
    pid: u32,
    tree: bool,
}

impl Asked<'_> {
    /// The stream of the tree's records when the agent agreed; why not otherwise. An older
    /// agent that does not speak this protocol is asked again in the one it does.
    pub fn answer(mut self) -> anyhow::Result<Stream> {
        let path = &self.connection.path;
        let (reply, rest) = read_answer(&mut self.stream)?;
        let reply: Reply = serde_json::from_slice(reply.trim_ascii_end()).map_err(|e| {
            anyhow::anyhow!(
                "the montrace agent at {} answered something else ({e})",
                path.display()
            )
        })?;
        if reply.version_refused() && self.version > FALLBACK_PROTOCOL_VERSION {
            // An older agent: the same request in the version before.
            return self
                .connection
                .ask(self.version - 1, self.pid, self.tree)?
                .answer();
        }
        if !reply.ok {
            anyhow::bail!(
                "the montrace agent at {} refused: {}",
                path.display(),
                reply.error.unwrap_or_default()
            );
        }
        self.stream.set_read_timeout(None)?;
        self.stream.set_nonblocking(true)?;
        Ok(Stream {
            stream: self.stream,
            mode: reply.mode.unwrap_or(TrackingMode::TpBtf),
            skipped: reply.skipped,
            version: self.version,
            pending: rest,
            end: None,
        })
    }
}

/// How the agent at `path` follows trees (its programs' mode), asking nothing else: what
/// `montrace doctor` says of it.
pub fn greet(path: &Path) -> anyhow::Result<TrackingMode> {
    let mut stream = UnixStream::connect(path)?;
    send(&mut stream, None, false, FALLBACK_PROTOCOL_VERSION)?;
    let (reply, _) = read_answer(&mut stream)?;
    let reply: Reply = serde_json::from_slice(reply.trim_ascii_end())
        .map_err(|e| anyhow::anyhow!("it answered something else ({e})"))?;
    match (reply.ok, reply.mode) {
        (true, Some(mode)) => Ok(mode),
        _ => anyhow::bail!("it refused: {}", reply.error.unwrap_or_default()),
    }
}

/// Sends the one request (`follow`, `tree`, or nothing but a greeting); the answer's wait is
/// set: at most [`REPLY_WAIT`] ([`TREE_REPLY_WAIT`] for a tree: the agent looks through /proc
/// first).
fn send(stream: &mut UnixStream, follow: Option<u32>, tree: bool, version: u32) -> io::Result<()> {
    send_request(
        stream,
        &Request {
            version,
            follow,
            tree,
            history: None,
        },
    )?;
    if tree {
        stream.set_read_timeout(Some(TREE_REPLY_WAIT))?;
    }
    Ok(())
}

/// The answer's line, and what came after it (records already sent).
fn read_answer(stream: &mut UnixStream) -> io::Result<(Vec<u8>, Vec<u8>)> {
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
            tree: false,
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
    /// Asks the agent to read its ring now (the command was reaped: its exit record is there
    /// or about to be), where it speaks version 3; without waiting, and a failure is no matter
    /// (the agent reads its ring at its next tick anyway).
    pub fn nudge(&mut self) {
        if self.version >= 3 {
            let _ = self.stream.write(&[NUDGE]);
        }
    }

    /// What the agent's end frame said its ring lost, once it came: with the tree's last exit
    /// (protocol 4), or as the answer to [`Stream::finish`].
    pub fn ended(&self) -> Option<LostEvents> {
        self.end.map(|end| end.lost)
    }

    /// Reads what the agent sent so far (without blocking), giving each record to `each`.
    /// Ok(false) once the agent closed the stream.
    pub fn take_in(&mut self, mut each: impl FnMut(&[u8])) -> io::Result<bool> {
        let mut open = true;
        loop {
            match self.read_more() {
                Ok(0) => {
                    open = false;
                    break;
                }
                Ok(_) => {}
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                // The agent answered this run (its end frame, read before the error: the kernel
                // hands over what was queued first) and closed the stream with a nudge of ours
                // unread, which makes its close a reset: that is its end, not a failure.
                Err(err) if err.kind() == io::ErrorKind::ConnectionReset && self.end.is_some() => {
                    open = false;
                    break;
                }
                Err(err) => return Err(err),
            }
            self.take_pending(&mut each)?;
        }
        self.take_pending(&mut each)?;
        Ok(open)
    }

    /// Reads what the socket holds, up to [`READ_CHUNK`] bytes, onto the end of `pending`; the
    /// bytes read. Straight into `pending`'s spare room: a 64 KiB buffer on the stack, zeroed
    /// at every call, had the main thread touch 16 pages of stack (14 page faults of a short
    /// run, `perf`).
    fn read_more(&mut self) -> io::Result<usize> {
        self.pending.reserve(READ_CHUNK);
        let spare = self.pending.spare_capacity_mut();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.stream);
        // SAFETY: recv writes at most `spare.len()` bytes into memory `pending` owns and does
        // not otherwise use; only the bytes it says it wrote are counted in below.
        let n = unsafe { libc::recv(fd, spare.as_mut_ptr().cast(), spare.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        // SAFETY: recv initialized the first `n` bytes of the spare room.
        unsafe { self.pending.set_len(self.pending.len() + n) };
        Ok(n)
    }

    /// The whole frames read so far: records to `each`, the end kept.
    fn take_pending(&mut self, each: &mut impl FnMut(&[u8])) -> io::Result<()> {
        let ended = &mut self.end;
        let used = take_frames(&self.pending, |frame| match frame {
            Frame::Record(record) => each(record),
            Frame::End(end) => *ended = Some(end),
        })
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        self.pending.drain(..used);
        Ok(())
    }

    /// The tree is done: tells the agent (its writing half shut), then takes in what the agent
    /// still sends (the tree's last records to `each`) until its end frame, waiting at most
    /// `wait`. What the agent's ring lost while this run was followed; None when the agent did
    /// not say (it closed first, or did not answer in time).
    pub fn finish(
        &mut self,
        wait: Duration,
        mut each: impl FnMut(&[u8]),
    ) -> io::Result<Option<LostEvents>> {
        if let Some(lost) = self.ended() {
            // Answered with the tree's last exit (protocol 4).
            return Ok(Some(lost));
        }
        self.stream.shutdown(std::net::Shutdown::Write)?;
        let deadline = std::time::Instant::now() + wait;
        loop {
            let open = self.take_in(&mut each)?;
            if let Some(end) = self.end {
                return Ok(Some(end.lost));
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if !open || left.is_zero() {
                return Ok(None);
            }
            let mut poll = libc::pollfd {
                fd: std::os::fd::AsRawFd::as_raw_fd(&self.stream),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
            // SAFETY: one valid pollfd; an interrupted or timed-out wait is looked at again.
            unsafe { libc::poll(&mut poll, 1, ms) };
        }
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
    use monitor_common::ForkEvent;

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
            ns_level: 0,
            parent_start_ns: 0,
            comm: [0; 16],
            ns_pids: [0; 4],
        })
    }

    #[test]
    fn each_tree_goes_to_its_own_client_and_ends_with_its_exits() {
        let mut routes = Routes::default();
        routes.add_root(1, 100, 100).unwrap();
        routes.add_root(2, 200, 200).unwrap();
        assert!(
            routes.add_root(2, 100, 100).is_err(),
            "one owner per process"
        );
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
            ns_level: 0,
            parent_start_ns: parent_start,
            comm: [0; 16],
            ns_pids: [0; 4],
        })
    }

    #[test]
    fn an_exit_that_comes_after_its_pid_was_reused_goes_to_the_tree_that_ended() {
        let mut routes = Routes::default();
        routes.add_root(1, 100, 100).unwrap();
        routes.add_root(2, 200, 200).unwrap();
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

    /// A client in a container (level 1) and one in a container inside it (level 2), beside a
    /// host client: each is told its processes by its own pids, its parent's too; a thread it
    /// cannot name is 0; the namespace pids count from its own namespace; the host client's
    /// records are the ring's, unchanged.
    #[test]
    fn a_client_in_a_pid_namespace_is_told_its_own_pids() {
        use monitor_common::{ExecEvent, ExitEvent, NS_LEVELS};
        let fork_ns = |child: u32, parent: u32, level: u32, ns_pids: [u32; NS_LEVELS]| {
            bytes(&ForkEvent {
                ns_level: level,
                ns_pids,
                ..read(&fork(child, parent))
            })
        };
        let mut routes = Routes::default();
        routes.add_root(1, 5000, 2).unwrap();
        routes.name_in_namespace(1, 1);
        routes.add_root(2, 6000, 7).unwrap();
        routes.name_in_namespace(2, 2);
        routes.add_root(3, 7000, 7000).unwrap();

        // Level 1: 5000 (its 2) forks 5001, its 3, which forks 5002 in a namespace of its own
        // (level 2, pid 1 there).
        let (client, seen): (_, ForkEvent) =
            renamed_as(&mut routes, &fork_ns(5001, 5000, 1, [3, 0, 0, 0]));
        assert_eq!(client, 1);
        assert_eq!((seen.header.pid, seen.parent_pid), (3, 2));
        assert_eq!((seen.ns_level, seen.ns_pids), (0, [0; NS_LEVELS]));
        let (_, seen): (_, ForkEvent) =
            renamed_as(&mut routes, &fork_ns(5002, 5001, 2, [4, 1, 0, 0]));
        assert_eq!((seen.header.pid, seen.parent_pid), (4, 3));
        assert_eq!((seen.ns_level, seen.ns_pids), (1, [1, 0, 0, 0]));

        // An exec by a thread that is not the leader, an exit by the leader.
        let mut exec: ExecEvent = read(&[0; std::mem::size_of::<ExecEvent>()]);
        exec.header = header(kind::EXEC, 5001);
        exec.old_tid = 5009;
        let (_, seen): (_, ExecEvent) = renamed_as(&mut routes, &bytes(&exec));
        assert_eq!((seen.header.pid, seen.old_tid), (3, 0));
        let mut exit: ExitEvent = read(&[0; std::mem::size_of::<ExitEvent>()]);
        exit.header = header(kind::EXIT, 5001);
        exit.tid = 5001;
        exit.utime_ns = 77;
        (exit.uid, exit.cgroup_id) = (100_000, 9_999);
        let (_, seen): (_, ExitEvent) = renamed_as(&mut routes, &bytes(&exit));
        assert_eq!((seen.header.pid, seen.tid, seen.utime_ns), (3, 3, 77));
        assert_eq!((seen.uid, seen.cgroup_id), (0, 0));

        // Level 2: its child's pid is the second of the record's.
        let (client, seen): (_, ForkEvent) =
            renamed_as(&mut routes, &fork_ns(6001, 6000, 2, [40, 8, 0, 0]));
        assert_eq!(client, 2);
        assert_eq!((seen.header.pid, seen.parent_pid), (8, 7));

        // The host's client: the ring's record as it was.
        assert_eq!(
            routes.route_named(&fork_ns(7001, 7000, 0, [0; 4])),
            Some((3, None))
        );
        routes.remove_client(1);
        assert!(routes
            .route_named(&bytes(&header(kind::EXEC, 5002)))
            .is_none());
    }

    /// A record's bytes read as the event `T` (crate::kernel::decode's reader).
    fn read<T: Copy>(record: &[u8]) -> T {
        crate::kernel::decode::read_pod(record, 0).unwrap()
    }

    /// `record` routed: its client, and the record as renamed for that client, read as a `T`.
    fn renamed_as<T: Copy>(routes: &mut Routes, record: &[u8]) -> (ClientId, T) {
        let (client, renamed) = routes.route_named(record).unwrap();
        (client, read(&renamed.expect("renamed for its client")))
    }

    #[test]
    fn a_gone_clients_superseded_processes_are_forgotten() {
        let mut routes = Routes::default();
        routes.add_root(1, 100, 100).unwrap();
        routes.add_root(2, 200, 200).unwrap();
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
        routes.add_root(1, 100, 100).unwrap();
        assert_eq!(routes.route(&[0u8; 8]), None);
        let mut short_fork = fork(101, 100);
        short_fork.truncate(std::mem::size_of::<EventHeader>() + 2);
        assert_eq!(routes.route(&short_fork), None);
    }

    /// The records of the frames in `buffer`, and the end frame, if any.
    fn frames_of(buffer: &[u8]) -> (Result<usize, String>, Vec<Vec<u8>>, Option<FollowEnd>) {
        let (mut records, mut end) = (Vec::new(), None);
        let used = take_frames(buffer, |frame| match frame {
            Frame::Record(r) => records.push(r.to_vec()),
            Frame::End(e) => end = Some(e),
        });
        (used, records, end)
    }

    #[test]
    fn frames_are_taken_whole_and_in_order() {
        let mut out = Vec::new();
        frame(b"abc", &mut out);
        frame(b"", &mut out);
        frame(b"defgh", &mut out);
        // A partial last frame stays for the next read.
        let (used, got, end) = frames_of(&out[..out.len() - 2]);
        assert_eq!(got, vec![b"abc".to_vec(), vec![]]);
        assert_eq!((used, end), (Ok(4 + 3 + 4), None));
        let (used, got, _) = frames_of(&out[4 + 3 + 4..]);
        assert_eq!(got, vec![b"defgh".to_vec()]);
        assert_eq!(used, Ok(4 + 5));
        let huge = (MAX_FRAME_BYTES + 1).to_le_bytes();
        assert!(frames_of(&huge).0.is_err());
    }

    #[test]
    fn the_end_frame_carries_the_losses_after_the_last_record() {
        let lost = LostEvents {
            ringbuf_full: 7,
            track_map_full: 1,
            read_errors: 2,
            exits_without_final_cpu: 3,
        };
        let mut out = Vec::new();
        frame(b"abc", &mut out);
        frame_end(&FollowEnd { lost }, &mut out);
        // Not whole yet: nothing of it is taken.
        let (used, got, end) = frames_of(&out[..out.len() - 1]);
        assert_eq!((used, got.len(), end), (Ok(7), 1, None));
        let (used, got, end) = frames_of(&out);
        assert_eq!(used, Ok(out.len()));
        assert_eq!(got, vec![b"abc".to_vec()]);
        assert_eq!(end, Some(FollowEnd { lost }));
        // A note too long, or not an end, is the agent's error, not a record.
        let long = (NOTE_FRAME | (MAX_NOTE_BYTES + 1)).to_le_bytes();
        assert!(frames_of(&long).0.is_err());
        let mut bad = (NOTE_FRAME | 2).to_le_bytes().to_vec();
        bad.extend_from_slice(b"{}");
        assert!(frames_of(&bad).0.unwrap_err().contains("end frame"));
    }

    /// The client's end of a stream the agent accepted, on `ours`.
    fn client_stream(ours: UnixStream) -> Stream {
        ours.set_nonblocking(true).unwrap();
        Stream {
            stream: ours,
            mode: TrackingMode::TpBtf,
            skipped: 0,
            version: PROTOCOL_VERSION,
            pending: Vec::new(),
            end: None,
        }
    }

    /// A client's stream whose other end `agent` plays the agent: it is given its socket once
    /// the client shut its writing half (having read nothing before), and closes it after.
    fn ended_with(
        wait: Duration,
        agent: impl FnOnce(&mut UnixStream) + Send + 'static,
    ) -> (Vec<Vec<u8>>, io::Result<Option<LostEvents>>) {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let played = std::thread::spawn(move || {
            let mut before = Vec::new();
            theirs.read_to_end(&mut before).unwrap();
            assert!(before.is_empty(), "the client sent {before:?}");
            agent(&mut theirs);
            // Closed here, as the agent closes after its end frame.
        });
        let mut stream = client_stream(ours);
        let mut records = Vec::new();
        let lost = stream.finish(wait, |r| records.push(r.to_vec()));
        played.join().unwrap();
        (records, lost)
    }

    #[test]
    fn a_client_ends_with_the_last_records_and_the_losses_the_agent_tells() {
        let (records, lost) = ended_with(Duration::from_secs(30), |agent| {
            let mut out = Vec::new();
            frame(b"last", &mut out);
            // The end frame in two writes: the client waits for the whole of it.
            frame_end(
                &FollowEnd {
                    lost: ring_full(12).unwrap(),
                },
                &mut out,
            );
            agent.write_all(&out[..10]).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            agent.write_all(&out[10..]).unwrap();
        });
        assert_eq!(records, vec![b"last".to_vec()]);
        assert_eq!(lost.unwrap(), ring_full(12));
        // An agent that closes without its end frame (protocol 1's, or counters it could not
        // read): the losses are not known.
        let (records, lost) = ended_with(Duration::from_secs(30), |agent| {
            let mut out = Vec::new();
            frame(b"x", &mut out);
            agent.write_all(&out).unwrap();
        });
        assert_eq!((records.len(), lost.unwrap()), (1, None));
        // One that does not answer: the client waits no longer than it was told.
        let (_, lost) = ended_with(Duration::from_millis(50), |_| {
            std::thread::sleep(Duration::from_millis(300));
        });
        assert_eq!(lost.unwrap(), None);
    }

    /// The agent closes a run's stream after its end frame; a nudge the client sent meanwhile
    /// (its command reaped) lies unread in the agent's socket, and the kernel then makes the
    /// close a reset (ECONNRESET on the client's next read, after what was queued). That ends
    /// the run as a plain close does; a reset before any end frame is still an error.
    #[test]
    fn a_reset_after_the_end_frame_is_the_end_and_before_it_an_error() {
        for answered in [true, false] {
            let (ours, mut theirs) = UnixStream::pair().unwrap();
            let mut stream = client_stream(ours);
            let mut out = Vec::new();
            frame(b"exit", &mut out);
            if answered {
                frame_end(
                    &FollowEnd {
                        lost: ring_full(2).unwrap(),
                    },
                    &mut out,
                );
            }
            theirs.write_all(&out).unwrap();
            stream.nudge();
            drop(theirs);
            let mut records = Vec::new();
            let read = stream.take_in(|r| records.push(r.to_vec()));
            assert_eq!(records, vec![b"exit".to_vec()], "queued records first");
            if answered {
                assert!(!read.unwrap(), "closed");
                assert_eq!(stream.ended(), ring_full(2));
            } else {
                let err = read.unwrap_err();
                assert_eq!(err.kind(), io::ErrorKind::ConnectionReset, "{err}");
            }
        }
    }

    /// Protocol 4: the end frame comes with the tree's last exit, before the client ends. The
    /// client takes it in as it comes, and its end then asks nothing more (it shuts nothing:
    /// the agent would see its writing half still open).
    #[test]
    fn an_end_frame_sent_with_the_last_exit_ends_the_client_without_asking() {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let mut stream = client_stream(ours);
        let mut out = Vec::new();
        frame(b"exit", &mut out);
        frame_end(
            &FollowEnd {
                lost: ring_full(3).unwrap(),
            },
            &mut out,
        );
        theirs.write_all(&out).unwrap();
        drop(theirs);
        let mut records = Vec::new();
        assert!(
            !stream.take_in(|r| records.push(r.to_vec())).unwrap(),
            "closed"
        );
        assert_eq!(records, vec![b"exit".to_vec()]);
        assert_eq!(stream.ended(), ring_full(3));
        let lost = stream.finish(Duration::from_secs(30), |_| panic!("no more records"));
        assert_eq!(lost.unwrap(), ring_full(3));
    }

    #[test]
    fn a_tree_is_done_with_its_last_live_process_exit() {
        let mut routes = Routes::default();
        routes.add_root(1, 100, 100).unwrap();
        routes.add_root(2, 200, 200).unwrap();
        assert!(!routes.tree_done(1));
        assert_eq!(routes.route(&fork(101, 100)), Some(1));
        // The root ends first: its child lives on.
        let exit_root = bytes(&header(kind::EXIT, 100));
        assert!(is_exit(&exit_root));
        assert!(!is_exit(&fork(102, 101)));
        assert_eq!(routes.route(&exit_root), Some(1));
        assert!(!routes.tree_done(1));
        assert_eq!(routes.route(&bytes(&header(kind::EXIT, 101))), Some(1));
        assert!(routes.tree_done(1));
        assert!(!routes.tree_done(2), "another client's tree is its own");
        assert!(routes.tree_done(3), "a client with no tree");
    }

    fn ring_full(n: u64) -> Option<LostEvents> {
        Some(LostEvents {
            ringbuf_full: n,
            ..LostEvents::default()
        })
    }

    #[test]
    fn each_client_is_told_the_losses_of_its_own_time_and_only_those() {
        let mut ledger = LossLedger::default();
        // 5 lost before anyone: nobody's.
        ledger.join(1, ring_full(5));
        ledger.observe(ring_full(8));
        // Client 2 joins after 3 more: those were client 1's alone.
        ledger.join(2, ring_full(10));
        assert_eq!(ledger.len(), 2);
        // 4 lost while both were followed: both hear of them (a loss names no tree).
        assert_eq!(ledger.leave(1, ring_full(14)), ring_full(3 + 2 + 4));
        // 6 more, client 2 alone.
        assert_eq!(ledger.leave(2, ring_full(20)), ring_full(4 + 6));
        assert!(ledger.is_empty());
        // A client that joins later starts from nothing.
        ledger.join(3, ring_full(25));
        assert_eq!(ledger.leave(3, ring_full(25)), Some(LostEvents::default()));
        // Not followed: nothing to tell.
        assert_eq!(ledger.leave(9, ring_full(25)), None);
    }

    #[test]
    fn a_forgotten_client_or_an_unread_counter_takes_nothing_from_the_others() {
        let mut ledger = LossLedger::default();
        ledger.join(1, ring_full(0));
        ledger.join(2, ring_full(0));
        // Client 2 is cut (no read then); client 1 still hears every loss.
        ledger.forget(2);
        // A read that failed counts nothing yet; the next read has it all.
        ledger.observe(None);
        let mut every = LostEvents {
            ringbuf_full: 9,
            track_map_full: 2,
            read_errors: 1,
            exits_without_final_cpu: 4,
        };
        assert_eq!(ledger.leave(1, Some(every)), Some(every));
        // Its end's read failing: what it is owed is not known whole.
        ledger.join(3, Some(every));
        every.ringbuf_full += 1;
        ledger.observe(Some(every));
        assert_eq!(ledger.leave(3, None), None);
        assert!(ledger.is_empty());
    }

    #[test]
    fn requests_are_checked() {
        assert_eq!(
            parse_request(br#"{"version":1,"follow":42}"#),
            Ok(Request {
                version: 1,
                follow: Some(42),
                tree: false,
                history: None,
            })
        );
        assert_eq!(
            parse_request(br#"{"version":1}"#),
            Ok(Request {
                version: 1,
                follow: None,
                tree: false,
                history: None,
            })
        );
        // Protocol 1 (no end frame) is still served; a newer one than the agent's is not.
        assert_eq!(
            parse_request(br#"{"version":2,"follow":42}"#).map(|r| r.version),
            Ok(2)
        );
        assert_eq!(
            parse_request(br#"{"version":3,"follow":42}"#).map(|r| r.version),
            Ok(3)
        );
        assert_eq!(
            parse_request(br#"{"version":4,"follow":42}"#).map(|r| r.version),
            Ok(4)
        );
        let refused = parse_request(br#"{"version":5,"follow":42}"#).unwrap_err();
        assert!(refused.contains("protocol version 5"), "{refused}");
        // A client tells such a refusal from any other, and asks again in the version before.
        assert!(Reply::refused(&refused).version_refused());
        assert!(!Reply::refused("too many connections").version_refused());
        assert!(!Reply::accepted(TrackingMode::TpBtf).version_refused());
        assert!(parse_request(br#"{"version":0,"follow":42}"#).is_err());
        // An attach's tree: with `follow`, in protocol 2 only.
        assert!(
            parse_request(br#"{"version":2,"follow":42,"tree":true}"#)
                .unwrap()
                .tree
        );
        assert!(parse_request(br#"{"version":1,"follow":42,"tree":true}"#).is_err());
        assert!(parse_request(br#"{"version":2,"tree":true}"#).is_err());
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
