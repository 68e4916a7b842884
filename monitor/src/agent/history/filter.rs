//! `montrace history --where`: a small filter language over the flight recorder's rows. Pure:
//! text in, a [`Filter`] out; a row in, yes or no out.
//!
//! A filter is terms joined by whitespace, `,` or `and`, every one of which must hold:
//! `FIELD OP VALUE`, with OP one of `=`, `!=`, `>`, `>=`, `<`, `<=` and, for text, `~` (contains).
//! A value with spaces is written in double quotes. The fields:
//!
//! | field | what | value |
//! |---|---|---|
//! | `pid`, `ppid`, `uid` | the process, its parent, its real uid at exit | a number |
//! | `comm`, `exe`, `cmd`, `cgroup` | its name, the file it exec'd, its argv joined with spaces, its cgroup's path | text |
//! | `exit` | its exit status, 128 + N when signal N killed it (the shell's `$?`) | a number |
//! | `signal` | the signal that killed it (no match for one that exited) | a number |
//! | `cpu`, `user`, `sys` | CPU time (user + system, user, system) | a duration: `1s`, `20ms` |
//! | `wall` | how long it lived | a duration |
//! | `rss` | its peak resident memory | a size: `100MiB` |
//! | `read`, `write` | its storage I/O | a size |
//!
//! A row without the figure a term asks about (e.g. no peak RSS) does not match that term.
use std::time::Duration;

use super::HistoryRow;
use crate::units;

/// The longest `--where` the agent reads.
pub const MAX_FILTER_BYTES: usize = 1024;
/// The most terms in one filter.
pub const MAX_TERMS: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    Contains,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NumField {
    Pid,
    Ppid,
    Uid,
    Exit,
    Signal,
    CpuNs,
    UserNs,
    SysNs,
    WallNs,
    RssBytes,
    ReadBytes,
    WriteBytes,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextField {
    Comm,
    Exe,
    Cmd,
    Cgroup,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Term {
    Num(NumField, Op, i128),
    Text(TextField, Op, String),
}

/// Every term must hold (an empty filter holds for every row).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    pub terms: Vec<Term>,
}

const OPS: [(&str, Op); 7] = [
    ("!=", Op::Ne),
    (">=", Op::Ge),
    ("<=", Op::Le),
    ("=", Op::Eq),
    (">", Op::Gt),
    ("<", Op::Lt),
    ("~", Op::Contains),
];

/// How a numeric field's value is written.
enum Unit {
    Count,
    Duration,
    Bytes,
}

fn field(name: &str) -> Option<Result<(NumField, Unit), TextField>> {
    use NumField::*;
    Some(Ok(match name {
        "pid" => (Pid, Unit::Count),
        "ppid" => (Ppid, Unit::Count),
        "uid" => (Uid, Unit::Count),
        "exit" => (Exit, Unit::Count),
        "signal" => (Signal, Unit::Count),
        "cpu" => (CpuNs, Unit::Duration),
        "user" => (UserNs, Unit::Duration),
        "sys" => (SysNs, Unit::Duration),
        "wall" => (WallNs, Unit::Duration),
        "rss" => (RssBytes, Unit::Bytes),
        "read" => (ReadBytes, Unit::Bytes),
        "write" => (WriteBytes, Unit::Bytes),
        "comm" => return Some(Err(TextField::Comm)),
        "exe" => return Some(Err(TextField::Exe)),
        "cmd" => return Some(Err(TextField::Cmd)),
        "cgroup" => return Some(Err(TextField::Cgroup)),
        _ => return None,
    }))
}

const FIELDS: &str = "pid, ppid, uid, comm, exe, cmd, cgroup, exit, signal, cpu, user, sys, \
                      wall, rss, read, write";

/// Splits at whitespace and commas outside double quotes; the quotes are dropped.
fn tokens(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in text.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if !quoted && (c.is_whitespace() || c == ',') => {
                if any {
                    out.push(std::mem::take(&mut current));
                    any = false;
                }
            }
            c => {
                current.push(c);
                any = true;
            }
        }
    }
    if quoted {
        return Err("a double quote is not closed".into());
    }
    if any {
        out.push(current);
    }
    Ok(out)
}

/// Parses a `--where` text (see the module).
pub fn parse(text: &str) -> Result<Filter, String> {
    if text.len() > MAX_FILTER_BYTES {
        return Err(format!("a filter is at most {MAX_FILTER_BYTES} bytes"));
    }
    let mut terms = Vec::new();
    for token in tokens(text)? {
        if token.eq_ignore_ascii_case("and") {
            continue;
        }
        if terms.len() == MAX_TERMS {
            return Err(format!("a filter has at most {MAX_TERMS} terms"));
        }
        terms.push(term(&token)?);
    }
    Ok(Filter { terms })
}

fn term(token: &str) -> Result<Term, String> {
    let (at, symbol, op) = OPS
        .iter()
        .filter_map(|(symbol, op)| token.find(symbol).map(|at| (at, *symbol, *op)))
        // The leftmost operator; at one place, the longest (`!=` before `=`).
        .min_by_key(|(at, symbol, _)| (*at, usize::MAX - symbol.len()))
        .ok_or_else(|| {
            format!("`{token}`: write FIELD OP VALUE, e.g. comm=make, cpu>1s, exit!=0")
        })?;
    let name = token[..at].trim();
    let value = token[at + symbol.len()..].trim();
    if value.is_empty() {
        return Err(format!("`{token}`: no value after `{symbol}`"));
    }
    match field(name) {
        None => Err(format!("`{name}` is not a field: use one of {FIELDS}")),
        Some(Err(text)) => Ok(Term::Text(text, op, value.to_owned())),
        Some(Ok((_, _))) if op == Op::Contains => Err(format!(
            "`{token}`: `~` (contains) is for text fields (comm, exe, cmd, cgroup)"
        )),
        Some(Ok((num, unit))) => {
            let number = match unit {
                Unit::Count => value
                    .parse::<i64>()
                    .map(i128::from)
                    .map_err(|_| format!("`{token}`: `{value}` is not a whole number"))?,
                Unit::Duration => units::parse_duration(value)
                    .map(|d: Duration| d.as_nanos() as i128)
                    .map_err(|e| format!("`{token}`: {e}"))?,
                Unit::Bytes => units::parse_bytes(value)
                    .map(i128::from)
                    .map_err(|e| format!("`{token}`: {e}"))?,
            };
            Ok(Term::Num(num, op, number))
        }
    }
}

fn compare<T: PartialOrd + ?Sized>(left: &T, op: Op, right: &T) -> bool {
    match op {
        Op::Eq => left == right,
        Op::Ne => left != right,
        Op::Gt => left > right,
        Op::Ge => left >= right,
        Op::Lt => left < right,
        Op::Le => left <= right,
        Op::Contains => false,
    }
}

impl Filter {
    pub fn matches(&self, row: &HistoryRow) -> bool {
        self.terms.iter().all(|t| t.matches(row))
    }
}

impl Term {
    fn matches(&self, row: &HistoryRow) -> bool {
        match self {
            Term::Num(field, op, value) => {
                number(row, *field).is_some_and(|n| compare(&n, *op, value))
            }
            Term::Text(field, op, value) => text(row, *field).is_some_and(|t| match op {
                Op::Contains => t.contains(value.as_str()),
                _ => compare(t.as_str(), *op, value.as_str()),
            }),
        }
    }
}

fn number(row: &HistoryRow, field: NumField) -> Option<i128> {
    use NumField::*;
    let n = |v: Option<u64>| v.map(i128::from);
    match field {
        Pid => Some(row.pid.into()),
        Ppid => row.parent_pid.map(i128::from),
        Uid => row.uid.map(i128::from),
        Exit => match (row.exit_code, row.exit_signal) {
            (Some(code), _) => Some(code.into()),
            (None, Some(signal)) => Some(128 + i128::from(signal)),
            (None, None) => None,
        },
        Signal => row.exit_signal.map(i128::from),
        CpuNs => Some(n(row.cpu_user_ns)? + n(row.cpu_system_ns)?),
        UserNs => n(row.cpu_user_ns),
        SysNs => n(row.cpu_system_ns),
        WallNs => row
            .end_ns
            .map(|end| i128::from(end) - i128::from(row.start_ns)),
        RssBytes => n(row.peak_rss_bytes),
        ReadBytes => n(row.read_bytes),
        WriteBytes => n(row.write_bytes),
    }
}

fn text(row: &HistoryRow, field: TextField) -> Option<String> {
    match field {
        TextField::Comm => Some(row.comm.clone()),
        TextField::Exe => row.filename.clone(),
        TextField::Cmd => row.argv.as_ref().map(|a| a.join(" ")),
        TextField::Cgroup => row.cgroup.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> HistoryRow {
        HistoryRow {
            pid: 123,
            parent_pid: Some(100),
            uid: Some(1000),
            cgroup_id: Some(77),
            cgroup: Some("/user.slice/user-1000.slice/session-3.scope".into()),
            comm: "make".into(),
            filename: Some("/usr/bin/make".into()),
            argv: Some(vec!["make".into(), "-j".into(), "4".into()]),
            start_ns: 1_000_000_000,
            end_ns: Some(3_500_000_000),
            exit_code: Some(2),
            exit_signal: None,
            cpu_user_ns: Some(1_200_000_000),
            cpu_system_ns: Some(300_000_000),
            peak_rss_bytes: Some(200 << 20),
            read_bytes: Some(4096),
            write_bytes: Some(0),
        }
    }

    fn holds(text: &str) -> bool {
        parse(text)
            .unwrap_or_else(|e| panic!("{text}: {e}"))
            .matches(&row())
    }

    #[test]
    fn numbers_durations_and_sizes_compare_in_their_units() {
        assert!(holds("pid=123"));
        assert!(!holds("pid=124"));
        assert!(holds("ppid=100 uid=1000"));
        assert!(holds("cpu>1s"));
        assert!(holds("cpu=1.5s"));
        assert!(!holds("cpu>1.5s"));
        assert!(holds("user>=1200ms sys<301ms"));
        assert!(holds("wall=2.5s"));
        assert!(holds("rss>100MiB, rss<=200MiB"));
        assert!(holds("read=4KiB and write=0"));
        assert!(holds("exit!=0"));
        assert!(holds("exit=2"));
        assert!(!holds("signal=9"), "it exited: no signal to match");
    }

    #[test]
    fn a_signal_reads_as_the_shells_status() {
        let killed = HistoryRow {
            exit_code: None,
            exit_signal: Some(9),
            ..row()
        };
        let f = |t: &str| parse(t).unwrap().matches(&killed);
        assert!(f("exit=137"));
        assert!(f("signal=9"));
        assert!(f("exit!=0"));
    }

    #[test]
    fn text_matches_whole_or_contained_and_quotes_keep_spaces() {
        assert!(holds("comm=make"));
        assert!(!holds("comm=mak"));
        assert!(holds("comm~mak"));
        assert!(holds("exe=/usr/bin/make"));
        assert!(holds(r#"cmd="make -j 4""#));
        assert!(holds("cmd~-j"));
        assert!(holds("cgroup~session-3"));
        assert!(holds("comm!=cc"));
        assert!(holds(""), "no terms: every row");
    }

    #[test]
    fn missing_figures_match_nothing() {
        let bare = HistoryRow {
            cpu_user_ns: None,
            filename: None,
            uid: None,
            ..row()
        };
        let f = |t: &str| parse(t).unwrap().matches(&bare);
        assert!(!f("cpu>0ns"));
        assert!(!f("cpu<1h"));
        assert!(!f("exe~make"));
        assert!(!f("uid=1000"));
        assert!(f("pid=123"));
    }

    #[test]
    fn bad_filters_are_refused_with_why() {
        assert!(parse("color=red").unwrap_err().contains("not a field"));
        assert!(parse("comm").unwrap_err().contains("FIELD OP VALUE"));
        assert!(parse("pid=").unwrap_err().contains("no value"));
        assert!(parse("pid=abc").unwrap_err().contains("whole number"));
        assert!(parse("cpu>5").unwrap_err().contains("no unit"));
        assert!(parse("rss>5furlongs").unwrap_err().contains("unknown unit"));
        assert!(parse("pid~12").unwrap_err().contains("text fields"));
        assert!(parse("comm=\"make").unwrap_err().contains("quote"));
        let long = "pid=1 ".repeat(MAX_FILTER_BYTES);
        assert!(parse(&long).unwrap_err().contains("bytes"));
        let many = "pid=1 ".repeat(MAX_TERMS + 1);
        assert!(parse(&many).unwrap_err().contains("terms"));
    }

    #[test]
    fn operators_are_read_leftmost_and_longest() {
        assert_eq!(
            parse("exit!=0").unwrap().terms,
            vec![Term::Num(NumField::Exit, Op::Ne, 0)]
        );
        assert_eq!(
            parse("pid>=5").unwrap().terms,
            vec![Term::Num(NumField::Pid, Op::Ge, 5)]
        );
        // An operator inside the value is the value's.
        assert_eq!(
            parse("cmd=a=b").unwrap().terms,
            vec![Term::Text(TextField::Cmd, Op::Eq, "a=b".into())]
        );
    }
}
