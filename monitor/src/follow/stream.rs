//! `--stream PATH|-`: the run as it goes, one JSON object per line (JSON Lines), for
//! `tail -f stream.jsonl | jq` on a remote machine and for callbacks: one line per sampling sweep
//! with the tree's totals, one per process start, exec and exit, one per phase mark, one per
//! limit breach, and a last one at the end (`"final": true`).
//!
//! Pure: [`Line`] and [`encode`] (unit-tested). The edge, [`Stream`], writes each line with one
//! `write` and flushes it; a write that fails (a full disk, a reader gone) stops the stream with
//! one warning and never the run.
use std::io::Write;

use serde::Serialize;

use crate::store::records::{EventKind, EventRecord, MarkRecord};
use crate::units::rfc3339;

/// Version of the stream's layout, in every line (`"v"`).
pub const STREAM_VERSION: u32 = 1;

/// One line of the stream. Times are RFC 3339 in UTC; figures are in the units of the tables.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Line {
    /// One sampling sweep: the whole tree at one moment.
    Sweep {
        time: String,
        elapsed_s: f64,
        /// Processes of the tree alive, and started so far.
        live: usize,
        started: usize,
        /// Sums over the processes read in the sweep (100 = one core for CPU).
        cpu_percent: f64,
        /// The same as shares of the run's capacity (run.json `capacity`: a container's
        /// limits, or the host's CPUs and memory).
        cpu_percent_of_capacity: f64,
        rss_bytes: u64,
        rss_percent_of_capacity: f64,
        uss_bytes: Option<u64>,
        pss_bytes: Option<u64>,
        read_bytes: u64,
        write_bytes: u64,
        gpu_memory_bytes: Option<u64>,
    },
    /// A process of the tree was forked (the command itself: at its first exec).
    Start {
        time: String,
        pid: u32,
        start_time: String,
        parent_pid: Option<u32>,
    },
    Exec {
        time: String,
        pid: u32,
        filename: Option<String>,
        argv: Option<Vec<String>>,
    },
    /// A process ended, with its exact exit figures.
    Exit {
        time: String,
        pid: u32,
        start_time: String,
        exit_code: Option<i32>,
        exit_signal: Option<i32>,
        cpu_user_ns: Option<u64>,
        cpu_system_ns: Option<u64>,
        peak_rss_bytes: Option<u64>,
    },
    Mark {
        time: String,
        pid: u32,
        label: String,
        kind: &'static str,
    },
    /// A `--limit` was crossed: the tree is being stopped.
    Limit {
        time: String,
        limit: String,
        threshold: f64,
        value: f64,
    },
    /// The last line.
    End {
        time: String,
        exit_status: i32,
        wall_s: f64,
        processes_started: usize,
        cpu_s: f64,
        peak_rss_bytes: Option<u64>,
        #[serde(rename = "final")]
        is_final: bool,
    },
}

impl Line {
    /// The lines of one lifecycle event: a fork starts a process, an exec names it, an exit ends
    /// it; a thread's exit says nothing about the tree. The command montrace started has no fork
    /// event: its first exec also starts it.
    pub fn of_event(row: &EventRecord, root_pid: u32, first_exec: bool) -> Vec<Line> {
        let time = rfc3339(row.time_ns);
        let start = || Line::Start {
            time: time.clone(),
            pid: row.pid,
            start_time: rfc3339(row.start_time_ns),
            parent_pid: row.parent_pid,
        };
        match row.kind {
            EventKind::Fork => vec![start()],
            EventKind::Exec => {
                let exec = Line::Exec {
                    time: time.clone(),
                    pid: row.pid,
                    filename: row.filename.clone(),
                    argv: row.argv.clone(),
                };
                if row.pid == root_pid && first_exec {
                    vec![start(), exec]
                } else {
                    vec![exec]
                }
            }
            EventKind::Exit => vec![Line::Exit {
                time,
                pid: row.pid,
                start_time: rfc3339(row.start_time_ns),
                exit_code: row.exit_code,
                exit_signal: row.exit_signal,
                cpu_user_ns: row.cpu_user_ns,
                cpu_system_ns: row.cpu_system_ns,
                peak_rss_bytes: row.peak_rss_bytes,
            }],
            EventKind::ThreadExit => Vec::new(),
        }
    }

    pub fn of_mark(mark: &MarkRecord) -> Line {
        Line::Mark {
            time: rfc3339(mark.time_ns),
            pid: mark.pid,
            label: mark.label.clone(),
            kind: mark.kind.as_str(),
        }
    }
}

/// One line of JSON, newline-terminated, with the layout's version first.
pub fn encode(line: &Line) -> String {
    let mut value = serde_json::to_value(line).expect("stream lines serialize");
    if let serde_json::Value::Object(map) = &mut value {
        map.insert("v".into(), STREAM_VERSION.into());
    }
    let mut text = value.to_string();
    text.push('\n');
    text
}

/// Where the lines go: a new file (created with the user's identity, never over an existing
/// one), or montrace's stdout for `-`.
pub struct Stream {
    out: Box<dyn Write + Send>,
    failed: bool,
}

impl Stream {
    pub fn open(path: &std::path::Path) -> anyhow::Result<Stream> {
        use anyhow::Context as _;
        let out: Box<dyn Write + Send> = if path.as_os_str() == "-" {
            Box::new(std::io::stdout())
        } else {
            Box::new(crate::store::userfs::create_new(path).with_context(|| {
                format!(
                    "cannot create the stream file {} (--stream writes a new file: give a \
                     path that does not exist yet, or - for stdout)",
                    path.display()
                )
            })?)
        };
        Ok(Stream { out, failed: false })
    }

    /// Writes one line; after a failure, nothing more (said once).
    pub fn send(&mut self, line: &Line) {
        if self.failed {
            return;
        }
        let text = encode(line);
        if let Err(err) = self
            .out
            .write_all(text.as_bytes())
            .and_then(|()| self.out.flush())
        {
            self.failed = true;
            crate::say!("montrace: warning: the --stream stopped: {err}; the run goes on");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventKind, pid: u32) -> EventRecord {
        EventRecord {
            time_ns: 1_700_000_000_000_000_000,
            kind,
            pid,
            start_time_ns: 1_699_999_999_000_000_000,
            parent_pid: Some(1),
            parent_start_time_ns: None,
            filename: Some("/bin/true".into()),
            argv: Some(vec!["true".into()]),
            tid: Some(pid),
            exit_code: Some(0),
            exit_signal: None,
            cpu_user_ns: Some(5),
            cpu_system_ns: Some(7),
            peak_rss_bytes: Some(4096),
        }
    }

    #[test]
    fn events_make_start_exec_and_exit_lines() {
        let fork = Line::of_event(&event(EventKind::Fork, 9), 1, false);
        assert_eq!(
            encode(&fork[0]),
            "{\"parent_pid\":1,\"pid\":9,\"start_time\":\"2023-11-14T22:13:19.000000Z\",\
             \"time\":\"2023-11-14T22:13:20.000000Z\",\"type\":\"start\",\"v\":1}\n"
        );
        // The command's first exec starts it; another process's exec only names it.
        let root = Line::of_event(&event(EventKind::Exec, 1), 1, true);
        assert!(matches!(
            root.as_slice(),
            [Line::Start { .. }, Line::Exec { .. }]
        ));
        assert_eq!(
            Line::of_event(&event(EventKind::Exec, 1), 1, false).len(),
            1
        );
        assert_eq!(Line::of_event(&event(EventKind::Exec, 9), 1, true).len(), 1);
        let exit: serde_json::Value = serde_json::from_str(&encode(
            &Line::of_event(&event(EventKind::Exit, 9), 1, false)[0],
        ))
        .unwrap();
        assert_eq!(exit["type"], "exit");
        assert_eq!(exit["cpu_system_ns"], 7);
        assert!(Line::of_event(&event(EventKind::ThreadExit, 9), 1, false).is_empty());
    }

    #[test]
    fn the_end_line_is_final() {
        let end = Line::End {
            time: rfc3339(0),
            exit_status: 3,
            wall_s: 1.5,
            processes_started: 4,
            cpu_s: 0.25,
            peak_rss_bytes: None,
            is_final: true,
        };
        let v: serde_json::Value = serde_json::from_str(&encode(&end)).unwrap();
        assert_eq!(
            (v["type"].as_str(), v["final"].as_bool()),
            (Some("end"), Some(true))
        );
        assert_eq!(v["exit_status"], 3);
    }

    #[test]
    fn a_failed_write_stops_the_stream_once() {
        struct Full(usize);
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                self.0 += 1;
                Err(std::io::Error::from_raw_os_error(libc::ENOSPC))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut stream = Stream {
            out: Box::new(Full(0)),
            failed: false,
        };
        let line = Line::of_mark(&MarkRecord {
            time_ns: 0,
            pid: 1,
            start_time_ns: None,
            label: "x".into(),
            kind: Default::default(),
        });
        stream.send(&line);
        stream.send(&line);
        assert!(stream.failed);
    }
}
