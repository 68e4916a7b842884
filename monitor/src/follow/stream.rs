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
        /// Lines not delivered because the reader did not keep up.
        dropped_lines: u64,
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

/// `--stream`'s value: a path, never `-`. Stdout is the command's stdout too: the stream would
/// interleave with what the command prints, the command could forge its lines (a `"final"`
/// line with any exit status), and a reader that stops reading would stall both.
pub fn parse_path(value: &str) -> Result<std::path::PathBuf, String> {
    if value == "-" {
        return Err(
            "`--stream -` would share stdout with the command (its output would mix \
                    with the stream, and it could forge lines): give a PATH, or --stream-fd N \
                    for a descriptor the command does not get, e.g. `--stream-fd 3 3>&1 >&2 | jq`"
                .into(),
        );
    }
    if value.is_empty() {
        return Err("an empty path".into());
    }
    Ok(value.into())
}

/// Lines waiting for the writer at most: a reader that stops reading makes montrace drop lines
/// (counted, and said at the end), never wait.
const QUEUE_LINES: usize = 4_096;
/// How long the end of a run waits for the writer to pass on the last lines.
const FINISH_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Where the lines go: a new file (created with the user's identity, never over an existing
/// one), or a descriptor montrace was given (`--stream-fd`, which the command does not get). The
/// lines are written by a thread of their own from a bounded queue: a slow or stalled reader
/// loses lines (counted in the last line, `dropped_lines`), never holds the run.
pub struct Stream {
    queue: Option<std::sync::mpsc::SyncSender<String>>,
    writer: Option<std::thread::JoinHandle<()>>,
    failed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    dropped: u64,
}

impl Stream {
    /// The stream `--stream` or `--stream-fd` asks for, if any.
    pub fn from_options(
        path: Option<&std::path::Path>,
        fd: Option<i32>,
    ) -> anyhow::Result<Option<Stream>> {
        use anyhow::Context as _;
        let out: Box<dyn Write + Send> = match (path, fd) {
            (Some(path), _) => {
                Box::new(crate::store::userfs::create_new(path).with_context(|| {
                    format!(
                        "cannot create the stream file {} (--stream writes a new file: give a \
                     path that does not exist yet)",
                        path.display()
                    )
                })?)
            }
            (None, Some(fd)) => Box::new(std::fs::File::from(take_fd(fd)?)),
            (None, None) => return Ok(None),
        };
        Ok(Some(Stream::start(out)?))
    }

    fn start(mut out: Box<dyn Write + Send>) -> std::io::Result<Stream> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<String>(QUEUE_LINES);
        let failed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let failed = failed.clone();
            // Made before the granted binary drops its capabilities (the stream is opened
            // before anything is created); it needs none to write to a descriptor it holds.
            crate::kernel::privilege::spawn_without_capabilities("montrace-stream", move || {
                for text in rx {
                    if let Err(err) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                        failed.store(true, std::sync::atomic::Ordering::Release);
                        crate::say!(
                            "montrace: warning: the --stream stopped: {err}; the run goes on"
                        );
                        return;
                    }
                }
            })?
        };
        Ok(Stream {
            queue: Some(tx),
            writer: Some(writer),
            failed,
            dropped: 0,
        })
    }

    /// Queues one line; dropped (and counted) when the writer is that far behind; nothing more
    /// after the writer failed.
    pub fn send(&mut self, line: &Line) {
        if self.failed.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let Some(queue) = &self.queue else { return };
        match queue.try_send(encode(line)) {
            Ok(()) => {}
            Err(std::sync::mpsc::TrySendError::Full(_)) => {
                if self.dropped == 0 {
                    crate::say!(
                        "montrace: warning: the --stream's reader does not keep up: lines are \
                         dropped (counted in the last line's dropped_lines)"
                    );
                }
                self.dropped += 1;
            }
            Err(std::sync::mpsc::TrySendError::Disconnected(_)) => {}
        }
    }

    /// Lines dropped so far because the reader did not keep up.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// After the last line: waits a moment for the writer to pass on what is queued; a reader
    /// that still does not read is left behind (said once), and the run ends.
    pub fn finish(&mut self) {
        self.queue = None;
        let Some(writer) = self.writer.take() else {
            return;
        };
        let deadline = std::time::Instant::now() + FINISH_WAIT;
        while !writer.is_finished() {
            if std::time::Instant::now() >= deadline {
                crate::say!(
                    "montrace: warning: the --stream's reader stopped reading: its last lines \
                     were not delivered"
                );
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let _ = writer.join();
    }
}

/// `--stream-fd N`: takes the descriptor over, checks that it is open for writing, and makes it
/// close-on-exec, so that the command never gets it.
fn take_fd(fd: i32) -> anyhow::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd as _;
    // SAFETY: fcntl on any number is safe; the result says whether it is open.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        anyhow::bail!("--stream-fd {fd}: no such open descriptor (open it for montrace, e.g. `{fd}>stream.jsonl` or `{fd}>&1`)");
    }
    if flags & libc::O_ACCMODE == libc::O_RDONLY {
        anyhow::bail!("--stream-fd {fd}: the descriptor is open for reading only");
    }
    // SAFETY: as above; FD_CLOEXEC keeps it from the command.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    // SAFETY: the descriptor is open (checked above) and nothing else in montrace owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
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
            dropped_lines: 0,
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
        let mut stream = Stream::start(Box::new(Full(0))).unwrap();
        let line = Line::of_mark(&MarkRecord {
            time_ns: 0,
            pid: 1,
            start_time_ns: None,
            label: "x".into(),
            kind: Default::default(),
        });
        stream.send(&line);
        stream.finish();
        assert!(stream.failed.load(std::sync::atomic::Ordering::Acquire));
        stream.send(&line);
        assert_eq!(stream.dropped(), 0);
    }
}
