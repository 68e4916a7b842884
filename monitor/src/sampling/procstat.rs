//! The one parser of `/proc/PID/stat`, for the sampler (every sweep, in place, allocation-free),
//! the poller (the tree without eBPF) and a process's start time (`proc_start_boot_ns`).
//!
//! comm (field 2) is whatever bytes the process chose, spaces and ')' included, so fields are
//! counted after the LAST ')'. Field numbers are those of proc_pid_stat(5).

/// The fields of /proc/PID/stat montrace uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    /// Where comm (field 2) is in the text: `&text[comm_start..comm_end]`.
    pub comm_start: usize,
    pub comm_end: usize,
    /// 3
    pub state: char,
    /// 4
    pub ppid: u32,
    /// 9
    pub flags: u64,
    /// 10
    pub minor_faults: u64,
    /// 12
    pub major_faults: u64,
    /// 14
    pub utime_ticks: u64,
    /// 15
    pub stime_ticks: u64,
    /// 20
    pub threads: u64,
    /// 22
    pub start_ticks: u64,
    /// 23
    pub vsize_bytes: u64,
    /// 24
    pub rss_pages: u64,
    /// 52, read for a zombie only: its exit code (wait-status encoding).
    pub exit_code: Option<i32>,
}

impl Stat {
    /// comm, from the text this was parsed from.
    pub fn comm<'t>(&self, text: &'t [u8]) -> &'t [u8] {
        &text[self.comm_start..self.comm_end]
    }
}

/// Parses /proc/PID/stat in place: no String, no UTF-8 check. None when a field up to rss (24)
/// is missing or not a number.
pub fn parse(stat: &[u8]) -> Option<Stat> {
    let open = stat.iter().position(|&b| b == b'(')?;
    let close = stat.iter().rposition(|&b| b == b')')?;
    if close < open {
        return None;
    }
    let mut fields = stat[close + 1..]
        .split(u8::is_ascii_whitespace)
        .filter(|field| !field.is_empty());
    let state = match fields.next()? {
        [state] => char::from(*state),
        _ => return None,
    };
    let mut parsed = Stat {
        comm_start: open + 1,
        comm_end: close,
        state,
        ..Stat::default()
    };
    for (number, field) in (4..=24).zip(fields.by_ref()) {
        let slot = match number {
            4 => {
                parsed.ppid = u32::try_from(parse_u64(field)?).ok()?;
                continue;
            }
            9 => &mut parsed.flags,
            10 => &mut parsed.minor_faults,
            12 => &mut parsed.major_faults,
            14 => &mut parsed.utime_ticks,
            15 => &mut parsed.stime_ticks,
            20 => &mut parsed.threads,
            22 => &mut parsed.start_ticks,
            23 => &mut parsed.vsize_bytes,
            24 => {
                parsed.rss_pages = parse_u64(field)?;
                if state == 'Z' {
                    // Fields 25 to 51 follow; 52 is the exit code.
                    parsed.exit_code = fields
                        .nth(52 - 25)
                        .and_then(parse_u64)
                        .and_then(|c| i32::try_from(c).ok());
                }
                return Some(parsed);
            }
            _ => continue,
        };
        *slot = parse_u64(field)?;
    }
    None
}

/// A decimal number of bytes, with no sign, no space, no overflow.
pub fn parse_u64(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &b| {
        let digit = b.checked_sub(b'0').filter(|d| *d <= 9)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// Start time of a process, ns since boot, from /proc/PID/stat (clock-tick resolution).
pub fn proc_start_boot_ns(pid: u32) -> std::io::Result<u64> {
    let stat = crate::host::read_small_file(format!("/proc/{pid}/stat"))?;
    parse_stat_start_ticks(&stat)
        .map(|ticks| ticks * 1_000_000_000 / crate::host::ticks_per_second())
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("malformed /proc/{pid}/stat"),
            )
        })
}

/// Every process in /proc, with its stat text and what [`parse`] read of it: the one walk of
/// /proc that the poller, the tree's signals and the agent's checks share. A process that ends
/// during the walk, or whose stat does not parse, is skipped.
pub fn each_process(mut visit: impl FnMut(u32, &[u8], &Stat)) {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(text) = crate::host::read_small(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if let Some(stat) = parse(&text) {
            visit(pid, &text, &stat);
        }
    }
}

/// Field 22 (starttime) of /proc/PID/stat; comm (field 2) may hold spaces and parentheses,
/// so fields are counted after its last ')'.
pub fn parse_stat_start_ticks(stat: &str) -> Option<u64> {
    parse(stat.as_bytes()).map(|s| s.start_ticks)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn each_process_visits_this_process_and_its_child() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let (me, kid) = (std::process::id(), child.id());
        let mut seen = std::collections::HashMap::new();
        each_process(|pid, text, stat| {
            seen.insert(pid, (stat.ppid, stat.comm(text).to_vec()));
        });
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(seen[&kid].0, me);
        assert_eq!(seen[&kid].1, b"sleep");
        assert!(seen.contains_key(&me));
        assert!(seen.contains_key(&1), "init too: {} processes", seen.len());
    }

    #[test]
    fn stat_start_time_survives_odd_comm() {
        let stat = "1234 (we ird) (x)) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 10";
        assert_eq!(parse_stat_start_ticks(stat), Some(98765));
        assert_eq!(parse_stat_start_ticks("garbage"), None);
    }

    #[test]
    fn own_start_time_is_in_the_past() {
        let start = proc_start_boot_ns(std::process::id()).unwrap();
        assert!(start > 0 && start <= crate::host::boottime_ns());
    }

    /// Shaped like a real /proc/PID/stat; comm has a space and a ')' to check the parser finds
    /// the last one. utime 250, stime 75 ticks; 4 threads; starttime 206709; vsize 12345344
    /// bytes; rss 1024 pages.
    pub const STAT: &str =
        "123 (my prog) (x)) S 1 123 123 0 -1 4194560 5432 0 12 0 250 75 0 0 20 0 \
        4 0 206709 12345344 1024 18446744073709551615 93830273077248 93830273097129 \
        140735164818512 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 93830273113136 93830273114752 \
        93831026782208 140735164819939 140735164819959 140735164819959 140735164821483 0\n";
    #[test]
    fn stat_parses_from_the_last_paren() {
        let parsed = parse(STAT.as_bytes()).unwrap();
        assert_eq!(
            Stat {
                comm_start: 0,
                comm_end: 0,
                ..parsed
            },
            Stat {
                comm_start: 0,
                comm_end: 0,
                state: 'S',
                ppid: 1,
                flags: 4194560,
                minor_faults: 5432,
                major_faults: 12,
                utime_ticks: 250,
                stime_ticks: 75,
                threads: 4,
                start_ticks: 206709,
                vsize_bytes: 12345344,
                rss_pages: 1024,
                exit_code: None,
            }
        );
        assert_eq!(parsed.comm(STAT.as_bytes()), b"my prog) (x)");
        // comm is up to 16 arbitrary bytes: spaces, parentheses, a newline, invalid UTF-8, and
        // what looks like the fields that follow it.
        for comm in [
            &b"a) b ) (c"[..],
            b") R 9 9 9 9 9 9 9 9 9 9 9 9 9 (",
            b"x\ny",
            b"\xff\xfe)",
            b"",
        ] {
            let mut stat = b"123 (".to_vec();
            stat.extend_from_slice(comm);
            stat.extend_from_slice(&STAT.as_bytes()[STAT.find(")) ").unwrap() + 1..]);
            let again = parse(&stat).unwrap();
            assert_eq!(
                again.comm(&stat),
                comm,
                "{}",
                String::from_utf8_lossy(&stat)
            );
            assert_eq!(again.start_ticks, parsed.start_ticks);
            assert_eq!(again.rss_pages, parsed.rss_pages);
        }
    }

    #[test]
    fn a_zombie_carries_its_exit_code() {
        let zombie = STAT.replace(")) S ", ")) Z ");
        // Field 52 of STAT is its last, 0; make it 256 (exit 1, wait-status encoding).
        let zombie = zombie.trim_end().rsplit_once(' ').unwrap().0.to_string() + " 256\n";
        assert_eq!(parse(zombie.as_bytes()).unwrap().exit_code, Some(256));
        assert_eq!(
            parse(STAT.as_bytes()).unwrap().exit_code,
            None,
            "only zombies"
        );
    }

    #[test]
    fn stat_cut_short_or_not_numeric_does_not_parse() {
        let rss_end = STAT.find(" 1024 ").unwrap() + " 1024".len();
        assert!(parse(&STAT.as_bytes()[..rss_end]).is_some());
        assert_eq!(
            parse(&STAT.as_bytes()[..rss_end - 1]).map(|s| s.rss_pages),
            Some(102)
        );
        assert_eq!(parse(&STAT.as_bytes()[..rss_end - 5]), None);
        assert_eq!(parse(STAT.replace(" 250 ", " 2x0 ").as_bytes()), None);
        assert_eq!(parse(STAT.replace(" 250 ", " -250 ").as_bytes()), None);
        assert_eq!(parse(STAT.replace(")) S ", ")) SS ").as_bytes()), None);
        assert_eq!(parse(b"123 no comm S 1"), None);
        assert_eq!(parse(b""), None);
    }
}
