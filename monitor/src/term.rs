//! Writing to the terminal without ever failing the run. `eprintln!` and `println!` panic when
//! stderr or stdout is closed or full (`2>/dev/full`, a pipe whose reader went away): montrace's
//! messages are not worth the command's supervision, so every message goes through these macros,
//! which drop what cannot be written.

/// `eprintln!` that never panics: a line to stderr, or nothing when stderr cannot take it.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        // Formatted first, written at once: stderr is unbuffered, and a line written a piece at
        // a time (five writes for some) could be split by what the command writes to the same
        // terminal.
        let mut line = ::std::format!($($arg)*);
        line.push('\n');
        let _ = ::std::io::stderr().lock().write_all(line.as_bytes());
    }};
}

/// `eprint!` that never panics.
#[macro_export]
macro_rules! say_raw {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        // At once, as `say!`.
        let text = ::std::format!($($arg)*);
        let _ = ::std::io::stderr().lock().write_all(text.as_bytes());
    }};
}

/// `println!` that never panics: a line to stdout, or nothing when stdout cannot take it.
#[macro_export]
macro_rules! say_out {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::writeln!(::std::io::stdout().lock(), $($arg)*);
    }};
}

/// An error and its causes on one line, `outer: cause: root cause`, leaving out a cause whose
/// text the line already holds (an error type that prints its source, wrapped by a context that
/// does too, would otherwise say "File exists (os error 17): File exists (os error 17)").
pub fn error_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd as _;

    #[test]
    fn error_line_says_each_cause_once() {
        let io = std::io::Error::from_raw_os_error(libc::EEXIST);
        let err = anyhow::Error::new(crate::store::writer::WriteError::Io {
            op: "create",
            path: "/x/events.parts".into(),
            source: io,
        })
        .context("cannot start the run");
        assert_eq!(
            super::error_line(&err),
            "cannot start the run: cannot create /x/events.parts: File exists (os error 17)"
        );
    }

    /// With stderr pointed at /dev/full (ENOSPC on every write), `say!` returns normally where
    /// `eprintln!` would panic.
    #[test]
    fn say_survives_a_full_stderr() {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        // SAFETY: dup/dup2 on valid descriptors; stderr is restored before the test ends.
        unsafe {
            let saved = libc::dup(libc::STDERR_FILENO);
            assert!(saved >= 0);
            libc::dup2(full.as_raw_fd(), libc::STDERR_FILENO);
            say!("this line goes nowhere {}", 1);
            say_raw!("nor this");
            libc::dup2(saved, libc::STDERR_FILENO);
            libc::close(saved);
        }
    }
}
