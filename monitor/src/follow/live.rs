//! The live status line: while stderr is a terminal, about twice a second, one line that is
//! rewritten in place. It goes to stderr only, so the command's own stdout stays clean.
//!
//! A terminal cannot be shared safely: a line the command writes while the status line is drawn
//! would land on it (`…RSS 151.2 MiBcc -O2 -c …`). So the line is drawn only while no live
//! process of the tree has its stdout or stderr on that terminal (checked at each draw through
//! /proc/PID/fd); once one has, the line is cleared and stays away until none has. A command
//! that writes to a file or a pipe gets the line; one that shares the terminal keeps it intact.
use std::io::Write as _;
use std::time::Duration;

use crate::units::format_bytes;

/// What the line shows.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Status {
    pub elapsed: Duration,
    pub live: usize,
    pub started: usize,
    /// Sum of the tree's CPU% at the last sample (100 = one core).
    pub cpu_percent: Option<f64>,
    pub rss_bytes: Option<u64>,
    pub gpu_memory_bytes: Option<u64>,
}

pub fn format_status(s: &Status) -> String {
    let mut line = format!(
        "[montrace {:>7.1}s] live {} | started {}",
        s.elapsed.as_secs_f64(),
        s.live,
        s.started
    );
    if let Some(cpu) = s.cpu_percent {
        line.push_str(&format!(" | CPU {cpu:.0}%"));
    }
    if let Some(rss) = s.rss_bytes {
        line.push_str(&format!(" | RSS {}", format_bytes(rss)));
    }
    if let Some(gpu) = s.gpu_memory_bytes {
        line.push_str(&format!(" | GPU mem {}", format_bytes(gpu)));
    }
    line
}

/// Writes the line when enabled (stderr is a terminal and not --quiet) and the terminal is
/// montrace's alone.
pub struct LiveLine {
    /// The terminal's device number, when the line is enabled.
    terminal: Option<u64>,
    drawn: std::cell::Cell<bool>,
}

impl LiveLine {
    pub fn new(quiet: bool) -> LiveLine {
        // SAFETY: isatty has no memory-safety preconditions.
        let tty = unsafe { libc::isatty(libc::STDERR_FILENO) } == 1;
        LiveLine {
            terminal: (tty && !quiet)
                .then(|| char_device("/proc/self/fd/2"))
                .flatten(),
            drawn: std::cell::Cell::new(false),
        }
    }

    pub fn enabled(&self) -> bool {
        self.terminal.is_some()
    }

    /// Draws the line, unless one of `pids` (the tree's live processes) writes to the same
    /// terminal: then the line is cleared (if drawn) and not drawn.
    pub fn show(&self, status: &Status, pids: &[u32]) {
        let Some(terminal) = self.terminal else {
            return;
        };
        if shares_terminal(terminal, pids) {
            self.clear();
            return;
        }
        // \r and erase-line: the line replaces itself; errors writing it are not worth a
        // failed run.
        let _ = write!(std::io::stderr(), "\r\x1b[K{}", format_status(status));
        self.drawn.set(true);
    }

    /// Clears the line before the summary or anything else is printed.
    pub fn clear(&self) {
        if self.drawn.replace(false) {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}

/// The device number of the character device `path` leads to, None for anything else.
fn char_device(path: &str) -> Option<u64> {
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
    let meta = std::fs::metadata(path).ok()?;
    meta.file_type().is_char_device().then(|| meta.rdev())
}

/// Whether any of `pids` has its stdout or stderr on the terminal `terminal`. A process whose
/// descriptors cannot be read (gone, or not ours) does not count.
fn shares_terminal(terminal: u64, pids: &[u32]) -> bool {
    pids.iter().any(|pid| {
        [1, 2]
            .iter()
            .any(|fd| char_device(&format!("/proc/{pid}/fd/{fd}")) == Some(terminal))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_writing_to_the_terminal_is_seen() {
        // /dev/null is a character device too: a process whose stdout is /dev/null "shares"
        // it, one whose stdout is a file or a pipe does not.
        let null = char_device("/dev/null").unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        assert!(shares_terminal(null, &[child.id()]));
        assert!(!shares_terminal(null.wrapping_add(1), &[child.id()]));
        assert!(
            !shares_terminal(null, &[u32::MAX - 1]),
            "a gone process does not count"
        );
        let _ = child.kill();
        let _ = child.wait();
        let mut piped = std::process::Command::new("sleep")
            .arg("5")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        assert!(!shares_terminal(null, &[piped.id()]));
        let _ = piped.kill();
        let _ = piped.wait();
    }

    #[test]
    fn status_shows_what_is_known() {
        let s = Status {
            elapsed: Duration::from_millis(12_340),
            live: 3,
            started: 120,
            cpu_percent: Some(151.4),
            rss_bytes: Some(3 << 29),
            gpu_memory_bytes: None,
        };
        assert_eq!(
            format_status(&s),
            "[montrace    12.3s] live 3 | started 120 | CPU 151% | RSS 1.5 GiB"
        );
        let gpu = Status {
            gpu_memory_bytes: Some(2 << 30),
            ..Status::default()
        };
        assert!(format_status(&gpu).ends_with("| GPU mem 2.0 GiB"));
    }
}
