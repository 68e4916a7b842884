//! `--format perfetto`, written as it is read: memory stays that of the tree's shape (about 60
//! bytes a process, [`Tree`]) and one Parquet batch, however many rows the run has. The trace
//! was once built whole as a `serde_json::Value` first: 16.5 KB a process, so a run of 1.5
//! million processes could not be exported on a 23 GB machine (issue 27).
//!
//! Three kinds of pass over the run directory, each reading one batch at a time:
//! 1. [`Tree::read`]: each process's identity, parent and program name (processes.parquet, the
//!    stand-ins of a killed run from its events, samples and GPU rows), and the time range;
//! 2. the processes again, each one's events written from its own row;
//! 3. the samples, as counters. The machine's rows (system, GPUs, marks: one per sweep or mark,
//!    whatever the number of processes) are read whole.
//!
//! The events of a process come in the order of processes.parquet, not the tree's:
//! `process_sort_index` orders the tracks in the viewer (children after their parent).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::path::Path;

use anyhow::Context as _;
use arrow_array::types::UInt32Type;
use serde_json::{json, Value};

use crate::analysis::report::load::{self, Process, GPU_COLUMNS};
use crate::analysis::report::model::{exe_name, exit_text};

/// Above the kernel's largest pid (`PID_MAX_LIMIT`, 2^22): stand-in ids for reused pids.
pub const STAND_IN_PIDS: u64 = 1 << 22;
/// The track of the machine-wide counters and the marks (no process has pid 0).
pub const MACHINE_PID: u64 = 0;
/// Bytes of distinct program names kept for the parent labels ("parent make 1000"): beyond it
/// (a command that runs a million programs of different long names) a label gives the pid alone.
const NAME_BUDGET_BYTES: usize = 16 << 20;
const NO_NAME: u32 = u32::MAX;

/// A process of the tree, without its row.
struct Node {
    pid: u32,
    /// Its program's name in [`Names`].
    exe: u32,
    start_ns: i64,
    parent: Option<(u32, i64)>,
}

/// Program names, each kept once.
#[derive(Default)]
struct Names {
    ids: HashMap<Box<str>, u32>,
    names: Vec<Box<str>>,
    bytes: usize,
}

impl Names {
    fn intern(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        if self.bytes + name.len() > NAME_BUDGET_BYTES {
            return NO_NAME;
        }
        self.bytes += name.len();
        let id = self.names.len() as u32;
        self.names.push(name.into());
        self.ids.insert(name.into(), id);
        id
    }

    fn get(&self, id: u32) -> Option<&str> {
        self.names.get(id as usize).map(|n| &**n)
    }
}

/// The run's tree without its rows: what the trace needs of every process before it writes the
/// first one (its track, its place in the tree, its parent's name), and the stand-ins of a killed
/// run whole (they have no row to read again).
pub struct Tree {
    /// processes.parquet's rows in file order, then the stand-ins.
    nodes: Vec<Node>,
    rows: usize,
    /// The rows by (pid, start time).
    by_key: Vec<u32>,
    /// Processes without a processes row (a run killed while they ran), as `load` makes them.
    pub stand_ins: Vec<Process>,
    stand_in_index: HashMap<(u32, i64), usize>,
    names: Names,
    /// The earliest and latest moments in the data, as `RunData::time_range`.
    pub time_range: (i64, i64),
    pub system: Vec<load::SystemRow>,
    pub marks: Vec<load::Mark>,
    pub gpu: Option<load::Gpu>,
    /// run.json's command, when it reads.
    pub command: Option<String>,
}

impl Tree {
    /// Reads the tree of `dir` (call `load::check_run_dir` first for a friendly error).
    pub fn read(dir: &Path) -> anyhow::Result<Tree> {
        let mut tree = Tree {
            nodes: Vec::new(),
            rows: 0,
            by_key: Vec::new(),
            stand_ins: Vec::new(),
            stand_in_index: HashMap::new(),
            names: Names::default(),
            time_range: (0, 0),
            system: Vec::new(),
            marks: Vec::new(),
            gpu: None,
            command: None,
        };
        let (mut lo, mut hi) = (i64::MAX, i64::MIN);
        let mut see = |t: i64| {
            lo = lo.min(t);
            hi = hi.max(t);
        };
        load::for_each_batch(dir, "processes", |c| {
            for p in load::process_rows(c)? {
                see(p.start_ns);
                if let Some(end) = p.end_ns {
                    see(end);
                }
                let exe = tree.names.intern(&exe_name(&p));
                tree.nodes.push(Node {
                    pid: p.pid,
                    exe,
                    start_ns: p.start_ns,
                    parent: p.parent,
                });
            }
            Ok(())
        })?;
        tree.rows = tree.nodes.len();
        tree.by_key = (0..tree.rows as u32).collect();
        // Stable: of rows with one key, the last is the one `load`'s index keeps.
        let nodes = &tree.nodes;
        tree.by_key
            .sort_by_key(|&i| (nodes[i as usize].pid, nodes[i as usize].start_ns));

        tree.stand_ins = unflushed_from_events(dir, &tree)?;
        tree.stand_in_index = tree
            .stand_ins
            .iter()
            .enumerate()
            .map(|(i, p)| ((p.pid, p.start_ns), i))
            .collect();
        for p in &tree.stand_ins {
            see(p.start_ns);
        }
        // Rows of processes that have neither a processes row nor events: named by their pid.
        for table in ["samples", "gpu_processes"] {
            load::for_each_batch(dir, table, |c| {
                let time = c.req_times_ns("time")?;
                let pid = c.req::<UInt32Type>("pid")?;
                let start = c.req_times_ns("start_time")?;
                for i in 0..c.batch.num_rows() {
                    if table == "samples" {
                        see(time[i]);
                    }
                    let key = (pid.value(i), start[i]);
                    if tree.row(key).is_none() {
                        load::process_index(key, &mut tree.stand_ins, &mut tree.stand_in_index);
                    }
                }
                Ok(())
            })?;
        }
        for p in &tree.stand_ins {
            let exe = tree.names.intern(&exe_name(p));
            tree.nodes.push(Node {
                pid: p.pid,
                exe,
                start_ns: p.start_ns,
                parent: p.parent,
            });
        }

        tree.system = load::read_system(dir)?;
        let mut dropped = 0;
        for s in &mut tree.system {
            s.cpu_busy_percent = load::sane(s.cpu_busy_percent, load::MAX_PERCENT, &mut dropped);
        }
        tree.marks = load::read_marks(dir)?;
        tree.gpu = load::read_gpu(dir)?;
        for t in tree.system.iter().map(|s| s.time_ns) {
            see(t);
        }
        for t in tree.marks.iter().map(|m| m.time_ns) {
            see(t);
        }
        for t in tree
            .gpu
            .iter()
            .flat_map(|g| g.rows.iter().map(|r| r.time_ns))
        {
            see(t);
        }
        tree.time_range = if lo > hi { (0, 0) } else { (lo, hi) };
        tree.command = crate::store::run_json::read(dir)
            .ok()
            .map(|info| info.command);
        Ok(tree)
    }

    /// The row of process `key` (the last, should the table hold it twice).
    fn row(&self, key: (u32, i64)) -> Option<usize> {
        let key_of = |i: u32| (self.nodes[i as usize].pid, self.nodes[i as usize].start_ns);
        let end = self.by_key.partition_point(|&i| key_of(i) <= key);
        (end > 0 && key_of(self.by_key[end - 1]) == key).then(|| self.by_key[end - 1] as usize)
    }

    /// The node of process `key`: its row, else its stand-in.
    fn node(&self, key: (u32, i64)) -> Option<usize> {
        self.row(key)
            .or_else(|| self.stand_in_index.get(&key).map(|&k| self.rows + k))
    }

    /// Each node's place in the tree, depth first with children by start time (as
    /// `RunData::children_and_roots`: a parent must have started before its child), and depth.
    fn order(&self) -> (Vec<u32>, Vec<u32>) {
        let n = self.nodes.len();
        let key = |i: usize| (self.nodes[i].start_ns, self.nodes[i].pid, i);
        let mut parent_of = vec![u32::MAX; n];
        for (i, node) in self.nodes.iter().enumerate() {
            if let Some(p) = node.parent.and_then(|k| self.node(k)) {
                if key(p) < key(i) {
                    parent_of[i] = p as u32;
                }
            }
        }
        // Children lists packed in one array: `children[first[p]..first[p + 1]]`.
        let mut first = vec![0u32; n + 1];
        for &p in parent_of.iter().filter(|&&p| p != u32::MAX) {
            first[p as usize + 1] += 1;
        }
        for i in 0..n {
            first[i + 1] += first[i];
        }
        let mut children = vec![0u32; first[n] as usize];
        let mut roots = Vec::new();
        {
            let mut next = first.clone();
            for (i, &p) in parent_of.iter().enumerate() {
                if p == u32::MAX {
                    roots.push(i as u32);
                } else {
                    children[next[p as usize] as usize] = i as u32;
                    next[p as usize] += 1;
                }
            }
        }
        drop(parent_of);
        for p in 0..n {
            children[first[p] as usize..first[p + 1] as usize].sort_by_key(|&c| key(c as usize));
        }
        roots.sort_by_key(|&r| key(r as usize));
        let mut rank = vec![0u32; n];
        let mut depth = vec![0u32; n];
        let mut stack: Vec<(u32, u32)> = roots.into_iter().rev().map(|r| (r, 0)).collect();
        let mut next_rank = 0;
        while let Some((i, d)) = stack.pop() {
            rank[i as usize] = next_rank;
            depth[i as usize] = d;
            next_rank += 1;
            let kids = &children[first[i as usize] as usize..first[i as usize + 1] as usize];
            stack.extend(kids.iter().rev().map(|&c| (c, d + 1)));
        }
        (rank, depth)
    }

    /// Each node's track id: its pid, unless an earlier process of the run had it (then a
    /// stand-in above the kernel's largest pid).
    fn tracks(&self) -> Vec<u64> {
        let mut by_start: Vec<u32> = (0..self.nodes.len() as u32).collect();
        by_start.sort_by_key(|&i| (self.nodes[i as usize].start_ns, self.nodes[i as usize].pid));
        let mut seen = HashSet::new();
        let mut track = vec![0u64; self.nodes.len()];
        let mut stand_ins = 0;
        for i in by_start {
            let pid = self.nodes[i as usize].pid;
            track[i as usize] = if seen.insert(pid) {
                u64::from(pid)
            } else {
                stand_ins += 1;
                STAND_IN_PIDS + stand_ins
            };
        }
        track
    }
}

/// A killed run's processes that have events but no processes row, named from their events as
/// `load` names them. Only the rows their forks copy a program from are read whole.
fn unflushed_from_events(dir: &Path, tree: &Tree) -> anyhow::Result<Vec<Process>> {
    let mut missing = false;
    let mut parents: HashSet<(u32, i64)> = HashSet::new();
    load::for_each_batch(dir, "events", |c| {
        let pid = c.req::<UInt32Type>("pid")?;
        let start = c.req_times_ns("start_time")?;
        let parent_pid = c.prim::<UInt32Type>("parent_pid");
        let parent_start = c.times_ns("parent_start_time");
        for (i, &start) in start.iter().enumerate() {
            if tree.row((pid.value(i), start)).is_some() {
                continue;
            }
            missing = true;
            if let Some(parent) =
                load::opt(parent_pid, i).zip(load::time_at(parent_start.as_ref(), i))
            {
                if tree.row(parent).is_some() {
                    parents.insert(parent);
                }
            }
        }
        Ok(())
    })?;
    if !missing {
        return Ok(Vec::new());
    }
    let mut processes = Vec::new();
    let mut index = HashMap::new();
    if !parents.is_empty() {
        load::for_each_batch(dir, "processes", |c| {
            for p in load::process_rows(c)? {
                let key = (p.pid, p.start_ns);
                if parents.contains(&key) {
                    match index.get(&key) {
                        Some(&at) => processes[at] = p,
                        None => {
                            index.insert(key, processes.len());
                            processes.push(p);
                        }
                    }
                }
            }
            Ok(())
        })?;
    }
    load::name_unflushed_processes_except(dir, &mut processes, &mut index, &|key| {
        tree.row(key).is_some()
    })?;
    Ok(processes.into_iter().filter(|p| p.unflushed).collect())
}

/// The `traceEvents` array, one event at a time.
struct Events<'a> {
    out: &'a mut dyn Write,
    first: bool,
}

impl Events<'_> {
    fn push(&mut self, event: &Value) -> anyhow::Result<()> {
        if !self.first {
            self.out.write_all(b",")?;
        }
        self.first = false;
        serde_json::to_writer(&mut *self.out, event)?;
        Ok(())
    }
}

fn mib(bytes: u64) -> f64 {
    (bytes as f64 / 1048576.0 * 1000.0).round() / 1000.0
}

/// Writes the Chrome trace-event JSON of `dir` to `out`: an object with `displayTimeUnit`,
/// `otherData` and `traceEvents`, keys in that (sorted) order.
pub fn write_trace(dir: &Path, out: &mut dyn Write) -> anyhow::Result<()> {
    let tree = Tree::read(dir)?;
    let (rank, depth) = tree.order();
    let track = tree.tracks();
    let (t0, t1) = tree.time_range;
    // Microseconds since t0, with nanosecond digits.
    // (Saturating: the times are the command's to rewrite, and may be any i64.)
    let us = |t: i64| t.saturating_sub(t0) as f64 / 1e3;

    let other = json!({
        "producer": format!("montrace {}", env!("CARGO_PKG_VERSION")),
        "command": tree.command,
        "time_zero": crate::units::rfc3339(t0),
    });
    out.write_all(br#"{"displayTimeUnit":"ms","otherData":"#)?;
    serde_json::to_writer(&mut *out, &other)?;
    out.write_all(br#","traceEvents":["#)?;
    let mut events = Events { out, first: true };
    events.push(
        &json!({"ph": "M", "pid": MACHINE_PID, "name": "process_name",
        "args": {"name": "machine (montrace)"}}),
    )?;
    events.push(
        &json!({"ph": "M", "pid": MACHINE_PID, "name": "process_sort_index",
        "args": {"sort_index": -1}}),
    )?;

    let process = |p: &Process, i: usize, events: &mut Events| -> anyhow::Result<()> {
        let id = track[i];
        let exe = exe_name(p);
        events.push(&json!({"ph": "M", "pid": id, "name": "process_name",
            "args": {"name": format!("{exe} {}", p.pid)}}))?;
        events.push(&json!({"ph": "M", "pid": id, "name": "process_sort_index",
            "args": {"sort_index": rank[i]}}))?;
        let parent = p.parent.and_then(|key| {
            let q = tree.node(key)?;
            Some(match tree.names.get(tree.nodes[q].exe) {
                Some(name) => format!("parent {name} {}", key.0),
                None => format!("parent {}", key.0),
            })
        });
        let mut labels = vec![format!("depth {}", depth[i])];
        labels.extend(parent);
        events.push(&json!({"ph": "M", "pid": id, "name": "process_labels",
            "args": {"labels": labels.join(", ")}}))?;
        events.push(
            &json!({"ph": "M", "pid": id, "tid": id, "name": "thread_name",
            "args": {"name": p.comm}}),
        )?;
        let end = p.end_ns.unwrap_or(t1).max(p.start_ns);
        let cpu = match (p.cpu_user_ns, p.cpu_system_ns) {
            (Some(u), Some(s)) => json!((u + s) as f64 / 1e9),
            _ => Value::Null,
        };
        events.push(&json!({
            "ph": "X", "pid": id, "tid": id, "cat": "process",
            "name": exe,
            "ts": us(p.start_ns), "dur": us(end) - us(p.start_ns),
            "args": {
                "pid": p.pid,
                "parent_pid": p.parent.map(|x| x.0),
                "command": p.command_line(),
                "exit": exit_text(p),
                "cpu_s": cpu,
                "peak_rss_bytes": p.peak_rss_bytes,
            },
        }))
    };
    // The rows read again, in the same order: row k is node k. (Parts a running run adds
    // meanwhile are left for the next export.)
    let mut row = 0;
    load::for_each_batch(dir, "processes", |c| {
        for p in load::process_rows(c)? {
            if row < tree.rows {
                process(&p, row, &mut events)?;
            }
            row += 1;
        }
        Ok(())
    })?;
    anyhow::ensure!(
        row >= tree.rows,
        "{}: processes were removed while the trace was written",
        dir.display()
    );
    for (k, p) in tree.stand_ins.iter().enumerate() {
        process(p, tree.rows + k, &mut events)?;
    }

    sample_counters(dir, &tree, &track, &us, &mut events)?;
    machine_counters(&tree, &us, &mut events)?;
    events.out.write_all(b"]}")?;
    Ok(())
}

/// The counters of the samples: per process (memory, CPU%), the tree's memory per sweep.
/// `us` turns a time into the trace's microseconds.
fn sample_counters(
    dir: &Path,
    tree: &Tree,
    track: &[u64],
    us: &dyn Fn(i64) -> f64,
    events: &mut Events<'_>,
) -> anyhow::Result<()> {
    let mut sums: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
    load::for_each_batch(dir, "samples", |c| {
        let time = c.req_times_ns("time")?;
        let pid = c.req::<UInt32Type>("pid")?;
        let start = c.req_times_ns("start_time")?;
        // Rows of a process that appeared after the tree was read (a running run) are left out.
        let keys: Vec<(i64, usize)> = (0..c.batch.num_rows())
            .map(|i| {
                let node = tree.node((pid.value(i), start[i]));
                (time[i], node.unwrap_or(usize::MAX))
            })
            .collect();
        for mut s in load::sample_rows(c, &keys) {
            load::sane_sample(&mut s);
            if s.process == usize::MAX {
                continue;
            }
            let id = track[s.process];
            if s.exit {
                // The process is gone: its counters drop to zero.
                events.push(&json!({"ph": "C", "pid": id, "name": "memory",
                    "ts": us(s.time_ns), "args": {"rss_MiB": 0, "uss_MiB": 0}}))?;
                continue;
            }
            let mut mem = serde_json::Map::new();
            if let Some(rss) = s.rss_bytes {
                mem.insert("rss_MiB".into(), json!(mib(rss)));
            }
            if let Some(uss) = s.uss_bytes {
                mem.insert("uss_MiB".into(), json!(mib(uss)));
            }
            if !mem.is_empty() {
                events.push(&json!({"ph": "C", "pid": id, "name": "memory",
                    "ts": us(s.time_ns), "args": mem}))?;
            }
            if let Some(cpu) = s.cpu_percent {
                events.push(
                    &json!({"ph": "C", "pid": id, "name": "cpu", "ts": us(s.time_ns),
                    "args": {"percent": (cpu * 100.0).round() / 100.0}}),
                )?;
            }
            let sum = sums.entry(s.time_ns).or_default();
            sum.0 = sum.0.saturating_add(s.rss_bytes.unwrap_or(0));
            sum.1 = sum.1.saturating_add(s.uss_bytes.unwrap_or(0));
        }
        Ok(())
    })?;
    for (t, (rss, uss)) in sums {
        events.push(
            &json!({"ph": "C", "pid": MACHINE_PID, "name": "tree memory", "ts": us(t),
            "args": {"rss_MiB": mib(rss), "uss_MiB": mib(uss)}}),
        )?;
    }
    Ok(())
}

/// The machine: memory and CPU, the GPUs, and the marks as instant events.
fn machine_counters(
    tree: &Tree,
    us: &dyn Fn(i64) -> f64,
    events: &mut Events<'_>,
) -> anyhow::Result<()> {
    for s in &tree.system {
        if let Some(used) = s.mem_used_bytes {
            events.push(
                &json!({"ph": "C", "pid": MACHINE_PID, "name": "machine memory",
                "ts": us(s.time_ns), "args": {"used_MiB": mib(used)}}),
            )?;
        }
        if let Some(busy) = s.cpu_busy_percent {
            events.push(
                &json!({"ph": "C", "pid": MACHINE_PID, "name": "machine cpu",
                "ts": us(s.time_ns), "args": {"busy_percent": (busy * 100.0).round() / 100.0}}),
            )?;
        }
    }
    if let Some(gpu) = &tree.gpu {
        for row in &gpu.rows {
            let mut args = serde_json::Map::new();
            for (slot, &column) in gpu.columns.iter().enumerate() {
                if let Some(v) = row.values[slot] {
                    args.insert(GPU_COLUMNS[column].0.into(), json!(v));
                }
            }
            if !args.is_empty() {
                events.push(&json!({"ph": "C", "pid": MACHINE_PID,
                    "name": format!("gpu{}", row.gpu_index), "ts": us(row.time_ns), "args": args}))?;
            }
        }
    }
    for mark in &tree.marks {
        events.push(
            &json!({"ph": "i", "s": "g", "pid": MACHINE_PID, "tid": MACHINE_PID,
            "name": crate::analysis::report::mark_text(mark), "ts": us(mark.time_ns),
            "args": {"label": mark.label, "kind": mark.kind}}),
        )?;
    }
    Ok(())
}

/// Writes the trace of `run_dir` to `out`, through a temporary file of its own beside it
/// (renamed once complete; removed on failure).
pub fn write_perfetto(run_dir: &Path, out: &Path) -> anyhow::Result<()> {
    let temp = crate::analysis::export::temp_beside(out);
    let written = (|| {
        let file = crate::store::userfs::create_replacing(&temp)
            .with_context(|| format!("cannot create {}", temp.display()))?;
        let mut writer = std::io::BufWriter::with_capacity(1 << 16, file);
        write_trace(run_dir, &mut writer)
            .and_then(|()| writer.flush().map_err(anyhow::Error::from))
            .with_context(|| format!("cannot write {}", temp.display()))?;
        drop(writer);
        crate::store::userfs::rename(&temp, out)
            .with_context(|| format!("cannot rename {} to {}", temp.display(), out.display()))
    })();
    if written.is_err() {
        // No half-written leftover.
        let _ = crate::store::userfs::remove_file(&temp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::time::Duration;

    fn fixture() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/run-small")
    }

    fn trace_of(dir: &Path) -> Value {
        let mut bytes = Vec::new();
        write_trace(dir, &mut bytes).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    fn events<'a>(trace: &'a Value, ph: &str, name: Option<&str>) -> Vec<&'a Value> {
        trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == ph && name.is_none_or(|n| e["name"] == n))
            .collect()
    }

    /// The streamed trace holds every process `load` reads, each once, with its figures, and
    /// orders the tracks so that a parent comes before its children.
    fn assert_matches_load(dir: &Path) {
        let trace = trace_of(dir);
        let data = load::load(dir).unwrap();
        let mut expected: Vec<(u64, String, String, String, String)> = data
            .processes
            .iter()
            .map(|p| {
                (
                    u64::from(p.pid),
                    exe_name(p),
                    p.command_line(),
                    exit_text(p),
                    p.comm.clone(),
                )
            })
            .collect();
        let slices = events(&trace, "X", None);
        let comm_of: HashMap<u64, String> = events(&trace, "M", Some("thread_name"))
            .iter()
            .map(|e| {
                let name = e["args"]["name"].as_str().unwrap().to_string();
                (e["pid"].as_u64().unwrap(), name)
            })
            .collect();
        let mut got: Vec<(u64, String, String, String, String)> = slices
            .iter()
            .map(|e| {
                let text = |v: &Value| v.as_str().unwrap().to_string();
                (
                    e["args"]["pid"].as_u64().unwrap(),
                    text(&e["name"]),
                    text(&e["args"]["command"]),
                    text(&e["args"]["exit"]),
                    comm_of[&e["pid"].as_u64().unwrap()].clone(),
                )
            })
            .collect();
        expected.sort();
        got.sort();
        assert_eq!(got, expected, "{}", dir.display());
        // Ranks: 0..n once each; every parent in the tree before its children.
        let rank: HashMap<u64, u64> = events(&trace, "M", Some("process_sort_index"))
            .iter()
            .filter(|e| e["pid"] != MACHINE_PID)
            .map(|e| {
                let rank = e["args"]["sort_index"].as_u64().unwrap();
                (e["pid"].as_u64().unwrap(), rank)
            })
            .collect();
        let mut ranks: Vec<u64> = rank.values().copied().collect();
        ranks.sort();
        assert_eq!(ranks, (0..data.processes.len() as u64).collect::<Vec<_>>());
        let (children, _) = data.children_and_roots();
        let track_of = |i: usize| -> u64 {
            let p = &data.processes[i];
            let slice = slices
                .iter()
                .find(|e| {
                    e["args"]["pid"] == p.pid
                        && (e["ts"].as_f64().unwrap() * 1e3).round() as i64
                            == p.start_ns - data.time_range().0
                })
                .unwrap();
            slice["pid"].as_u64().unwrap()
        };
        for (parent, kids) in children.iter().enumerate() {
            for &kid in kids {
                assert!(rank[&track_of(parent)] < rank[&track_of(kid)]);
            }
        }
        // Every sample of a live process is a counter or an exit.
        let samples = data.samples.len();
        let exits = data.samples.iter().filter(|s| s.exit).count();
        let memory = events(&trace, "C", Some("memory")).len();
        assert!(
            memory >= exits && memory <= samples,
            "{memory} of {samples}"
        );
        assert_eq!(
            events(&trace, "C", Some("cpu")).len(),
            data.samples
                .iter()
                .filter(|s| !s.exit && s.cpu_percent.is_some())
                .count()
        );
        assert_eq!(events(&trace, "i", None).len(), data.marks.len());
    }

    #[test]
    fn the_fixture_run_streams_every_process_and_counter() {
        assert_matches_load(&fixture());
        let trace = trace_of(&fixture());
        let data = load::load(&fixture()).unwrap();
        assert_eq!(
            events(&trace, "C", Some("machine memory")).len(),
            data.system.len()
        );
        assert!(!events(&trace, "C", Some("tree memory")).is_empty());
        // The tree's root comes first.
        let root = data.processes.iter().min_by_key(|p| p.start_ns).unwrap();
        let first = events(&trace, "M", Some("process_sort_index"))
            .into_iter()
            .find(|e| e["args"]["sort_index"] == 0)
            .unwrap();
        assert_eq!(first["pid"].as_u64(), Some(u64::from(root.pid)));
        assert_eq!(trace["displayTimeUnit"], "ms");
        assert!(trace["otherData"]["command"]
            .as_str()
            .unwrap()
            .starts_with("sh -c"));
    }

    /// A run killed while it ran: part of processes.parquet flushed, the rest only in its events
    /// and samples (stand-ins, some forked from a flushed row).
    #[test]
    fn a_killed_run_streams_its_stand_ins_as_load_names_them() {
        let tmp = tempfile::tempdir().unwrap();
        for table in ["events", "samples"] {
            let parts = tmp.path().join(format!("{table}.parts"));
            std::fs::create_dir(&parts).unwrap();
            std::fs::copy(
                fixture().join(format!("{table}.parquet")),
                parts.join(format!("{table}-000000.parquet")),
            )
            .unwrap();
        }
        let batches = load::read_file(&fixture().join("processes.parquet")).unwrap();
        let all: usize = batches.iter().map(|b| b.num_rows()).sum();
        let parts = tmp.path().join("processes.parts");
        std::fs::create_dir(&parts).unwrap();
        let file = std::fs::File::create(parts.join("processes-000000.parquet")).unwrap();
        let mut writer =
            parquet::arrow::ArrowWriter::try_new(file, batches[0].schema(), None).unwrap();
        // Half the rows flushed, in the file's order (the root's among them).
        let mut left = all / 2;
        for batch in &batches {
            let take = left.min(batch.num_rows());
            writer.write(&batch.slice(0, take)).unwrap();
            left -= take;
        }
        writer.close().unwrap();
        let data = load::load(tmp.path()).unwrap();
        assert_eq!(data.processes.len(), all);
        assert!(data.processes.iter().any(|p| p.unflushed));
        assert_matches_load(tmp.path());
        let tree = Tree::read(tmp.path()).unwrap();
        assert_eq!(tree.stand_ins.len(), all - all / 2);
    }

    #[test]
    fn a_synthetic_run_streams_as_it_loads() {
        let run = tempfile::tempdir().unwrap();
        crate::analysis::report::synthetic_run(
            run.path(),
            40,
            Duration::from_secs(5),
            Duration::from_millis(200),
        )
        .unwrap();
        assert_matches_load(run.path());
        assert_eq!(events(&trace_of(run.path()), "i", None).len(), 3);
    }

    #[test]
    fn reused_pids_get_their_own_tracks() {
        use crate::store::records::ProcessRecord;
        let run = tempfile::tempdir().unwrap();
        let mut table = crate::store::writer::PartedTable::processes(run.path()).unwrap();
        for start in [1_000_000_000, 2_000_000_000] {
            table
                .push(ProcessRecord {
                    pid: 77,
                    start_time_ns: start,
                    end_time_ns: Some(start + 1_000),
                    comm: "again".into(),
                    ..Default::default()
                })
                .unwrap();
        }
        table.finish().unwrap();
        let trace = trace_of(run.path());
        let ids: Vec<u64> = events(&trace, "X", None)
            .iter()
            .map(|e| e["pid"].as_u64().unwrap())
            .collect();
        assert_eq!(ids.len(), 2);
        assert!(ids.contains(&77));
        assert!(ids.contains(&(STAND_IN_PIDS + 1)));
    }

    #[test]
    fn program_names_beyond_the_budget_leave_the_pid() {
        let mut names = Names::default();
        let long = "x".repeat(NAME_BUDGET_BYTES);
        assert_eq!(names.intern("make"), 0);
        assert_eq!(names.intern(&long), NO_NAME);
        assert_eq!(names.intern("make"), 0);
        assert_eq!(names.get(0), Some("make"));
        assert_eq!(names.get(NO_NAME), None);
    }
}
