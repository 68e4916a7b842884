//! The live status line: while stderr is a terminal, about twice a second, one line that is
//! rewritten in place. It goes to stderr only, so the command's own stdout stays clean.
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

/// Writes the line when enabled (stderr is a terminal and not --quiet).
pub struct LiveLine {
    enabled: bool,
}

impl LiveLine {
    pub fn new(quiet: bool) -> LiveLine {
        // SAFETY: isatty has no memory-safety preconditions.
        let tty = unsafe { libc::isatty(libc::STDERR_FILENO) } == 1;
        LiveLine {
            enabled: tty && !quiet,
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn show(&self, status: &Status) {
        if self.enabled {
            // \r and erase-line: the line replaces itself; errors writing it are not worth a
            // failed run.
            let _ = write!(std::io::stderr(), "\r\x1b[K{}", format_status(status));
        }
    }

    /// Clears the line before the summary or anything else is printed.
    pub fn clear(&self) {
        if self.enabled {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
