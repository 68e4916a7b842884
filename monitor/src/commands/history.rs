//! `montrace history`: asks the agent's flight recorder (over its socket: the files are root's
//! alone) which processes lived in an interval, and prints them as a table, CSV or JSON lines.
use std::io::Write as _;

use super::{CommandError, Exit};
use crate::{
    agent::history::HistoryRow,
    cli::{HistoryArgs, HistoryFormat},
    follow::agent::{self as protocol, HistoryRequest},
    units,
};

pub fn history(args: HistoryArgs) -> Exit {
    let Some((socket, _)) = protocol::socket_path() else {
        return Err(CommandError::usage(format!(
            "no montrace agent here ({} is not there, and {} names none): the history is kept \
             by `montrace agent --history` (see dist/montrace-agent.service)",
            protocol::DEFAULT_SOCKET,
            protocol::SOCKET_ENV
        )));
    };
    if args.until.is_some_and(|until| until < args.since) {
        return Err(CommandError::usage("--until is before --since"));
    }
    let request = HistoryRequest {
        since_ns: args.since,
        until_ns: args.until,
        filter: args.filter.clone().unwrap_or_default(),
        limit: Some(args.limit),
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut table = Vec::new();
    if args.format == HistoryFormat::Csv {
        writeln!(out, "{}", CSV_HEADER).map_err(stdout_error)?;
    }
    // A reader that went away (`| head`) ends the listing quietly.
    let mut closed = false;
    let end = protocol::history(&socket, request, |line| {
        let row: HistoryRow = serde_json::from_slice(line)
            .map_err(|e| anyhow::anyhow!("the agent sent a row montrace cannot read: {e}"))?;
        let written = match args.format {
            // The widths need every row: held (at most the agent's limit).
            HistoryFormat::Table => {
                table.push(table_cells(&row));
                Ok(())
            }
            HistoryFormat::Csv => writeln!(out, "{}", csv_line(&row)),
            HistoryFormat::Json => out.write_all(line).and_then(|()| out.write_all(b"\n")),
        };
        if let Err(err) = written {
            closed = err.kind() == std::io::ErrorKind::BrokenPipe;
            return Err(anyhow::anyhow!("cannot write to stdout: {err}"));
        }
        Ok(())
    });
    if closed {
        return Ok(0);
    }
    let end = end.map_err(|e| {
        if e.to_string().contains("refused") {
            CommandError::usage(crate::term::error_line(&e))
        } else {
            CommandError::Failed(e)
        }
    })?;
    let table = (args.format == HistoryFormat::Table).then(|| render_table(&table));
    let finished = out
        .write_all(table.unwrap_or_default().as_bytes())
        .and_then(|()| out.flush());
    match finished {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(0),
        flushed => flushed.map_err(stdout_error)?,
    }
    for file in &end.unreadable {
        crate::say!("montrace history: warning: a history file could not be read: {file}");
    }
    if end.truncated {
        crate::say!(
            "montrace history: the first {} processes only: more matched (narrow --since/--where, \
             or raise --limit)",
            end.rows
        );
    } else if args.format == HistoryFormat::Table {
        crate::say!("montrace history: {} processes", end.rows);
    }
    Ok(0)
}

fn stdout_error(e: std::io::Error) -> CommandError {
    CommandError::Failed(anyhow::anyhow!("cannot write to stdout: {e}"))
}

const CSV_HEADER: &str = "start_time,end_time,pid,parent_pid,uid,comm,exit_code,exit_signal,\
                          cpu_user_ns,cpu_system_ns,peak_rss_bytes,read_bytes,write_bytes,\
                          cgroup,command";

/// Its command line for people: argv joined, else the file it exec'd, else its name.
fn command_line(row: &HistoryRow) -> String {
    match (&row.argv, &row.filename) {
        (Some(argv), _) if !argv.is_empty() => argv.join(" "),
        (_, Some(file)) => file.clone(),
        _ => row.comm.clone(),
    }
}

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

fn csv_line(row: &HistoryRow) -> String {
    let n = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    let i = |v: Option<i32>| v.map(|v| v.to_string()).unwrap_or_default();
    [
        units::rfc3339(row.start_ns),
        row.end_ns.map(units::rfc3339).unwrap_or_default(),
        row.pid.to_string(),
        row.parent_pid.map(|p| p.to_string()).unwrap_or_default(),
        row.uid.map(|u| u.to_string()).unwrap_or_default(),
        csv_field(&row.comm),
        i(row.exit_code),
        i(row.exit_signal),
        n(row.cpu_user_ns),
        n(row.cpu_system_ns),
        n(row.peak_rss_bytes),
        n(row.read_bytes),
        n(row.write_bytes),
        csv_field(row.cgroup.as_deref().unwrap_or_default()),
        csv_field(&command_line(row)),
    ]
    .join(",")
}

const TABLE_HEADER: [&str; 8] = [
    "END (UTC)",
    "PID",
    "UID",
    "EXIT",
    "CPU",
    "WALL",
    "PEAK RSS",
    "COMMAND",
];
/// The most characters of a command line a table shows.
const COMMAND_WIDTH: usize = 80;

fn table_cells(row: &HistoryRow) -> [String; 8] {
    let exit = match (row.exit_code, row.exit_signal) {
        (Some(code), _) => code.to_string(),
        (None, Some(signal)) => format!("sig {signal}"),
        _ => "?".into(),
    };
    let cpu = match (row.cpu_user_ns, row.cpu_system_ns) {
        (Some(u), Some(s)) => units::format_seconds_ns(u + s),
        _ => "?".into(),
    };
    let wall = row
        .end_ns
        .map(|end| units::format_seconds_ns((end - row.start_ns).max(0) as u64))
        .unwrap_or_else(|| "?".into());
    let command: String = command_line(row).chars().take(COMMAND_WIDTH).collect();
    [
        row.end_ns.map(units::rfc3339).unwrap_or_default(),
        row.pid.to_string(),
        row.uid.map(|u| u.to_string()).unwrap_or_else(|| "?".into()),
        exit,
        cpu,
        wall,
        row.peak_rss_bytes
            .map(units::format_bytes)
            .unwrap_or_else(|| "?".into()),
        command.replace(['\n', '\r', '\t'], " "),
    ]
}

fn render_table(rows: &[[String; 8]]) -> String {
    let mut widths = TABLE_HEADER.map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header = TABLE_HEADER.map(String::from);
    for row in std::iter::once(&header).chain(rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(i, (cell, w))| {
                if i == row.len() - 1 {
                    cell.clone()
                } else {
                    format!("{cell:<w$}")
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> HistoryRow {
        HistoryRow {
            pid: 42,
            parent_pid: Some(1),
            uid: Some(1000),
            comm: "sh".into(),
            argv: Some(vec!["sh".into(), "-c".into(), "echo a,\"b\"".into()]),
            start_ns: 1_000_000_000,
            end_ns: Some(1_002_000_000),
            exit_code: Some(0),
            cpu_user_ns: Some(1_000_000),
            cpu_system_ns: Some(500_000),
            ..HistoryRow::default()
        }
    }

    #[test]
    fn csv_quotes_what_needs_it_and_keeps_the_header_order() {
        let line = csv_line(&row());
        assert_eq!(
            line,
            "1970-01-01T00:00:01.000000Z,1970-01-01T00:00:01.002000Z,42,1,1000,sh,0,,1000000,\
             500000,,,,,\"sh -c echo a,\"\"b\"\"\""
        );
        assert_eq!(CSV_HEADER.split(',').count(), 15);
    }

    #[test]
    fn the_table_lines_up_and_says_what_is_unknown() {
        let unknown = HistoryRow {
            uid: None,
            cpu_user_ns: None,
            exit_code: None,
            exit_signal: Some(9),
            argv: None,
            filename: None,
            comm: "x".into(),
            ..row()
        };
        let text = render_table(&[table_cells(&row()), table_cells(&unknown)]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("END (UTC)"));
        let at = lines[0].find("COMMAND").unwrap();
        assert_eq!(&lines[1][at..], "sh -c echo a,\"b\"");
        assert_eq!(&lines[2][at..], "x");
        assert!(lines[2].contains("sig 9"), "{text}");
        assert!(lines[2].contains(" ? "), "{text}");
    }
}
