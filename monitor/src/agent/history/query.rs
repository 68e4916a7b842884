//! Reads the flight recorder's files for one `montrace history` request: the files whose exit
//! times can hold the interval, one batch at a time, each row kept when the asker may see it,
//! it lived in the interval, and the filter holds. Blocking: the agent runs it on a thread of
//! the runtime's blocking pool, never on its event loop.
use std::path::Path;

use arrow_array::types::{Int32Type, UInt32Type, UInt64Type};
use arrow_array::Array as _;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::{filter::Filter, parse_file_name, HistoryRow};
use crate::store::read::{opt, time_at, Cols};

/// The most rows one answer holds (a request's `limit` is at most this).
pub const MAX_ROWS: usize = 100_000;
/// The most bytes of rows (as JSON lines) one answer holds.
pub const MAX_ANSWER_BYTES: usize = 64 << 20;

/// What one request asks, its limits checked.
#[derive(Clone, Debug)]
pub struct Ask {
    /// The client's uid (SO_PEERCRED), never the request's.
    pub uid: u32,
    pub since_ns: i64,
    pub until_ns: i64,
    pub filter: Filter,
    pub limit: usize,
}

/// The rows of an answer, as JSON lines, and whether more matched than it holds.
#[derive(Debug, Default)]
pub struct Answer {
    pub lines: Vec<u8>,
    pub rows: usize,
    pub truncated: bool,
    /// Files that could not be read (named, with why): the others still answer.
    pub unreadable: Vec<String>,
}

/// The history files under `dir` that may hold rows of processes alive in the interval: their
/// last exit at or after `since_ns` (the first exit may be later than `until_ns` for a process
/// that lived through it), oldest first.
pub fn files_for(dir: &Path, since_ns: i64) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut found: Vec<(i64, std::path::PathBuf)> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name();
            let (first, last) = parse_file_name(name.to_str()?)?;
            (last >= since_ns).then(|| (first, entry.path()))
        })
        .collect();
    found.sort();
    Ok(found.into_iter().map(|(_, path)| path).collect())
}

/// Answers `ask` from the files under `dir`.
pub fn answer(dir: &Path, ask: &Ask) -> Answer {
    let mut answer = Answer::default();
    let files = match files_for(dir, ask.since_ns) {
        Ok(files) => files,
        Err(err) => {
            answer.unreadable.push(format!("{}: {err}", dir.display()));
            return answer;
        }
    };
    for path in files {
        if let Err(err) = answer_file(&path, ask, &mut answer) {
            answer
                .unreadable
                .push(format!("{}: {err:#}", path.display()));
        }
        if answer.truncated {
            break;
        }
    }
    answer
}

fn answer_file(path: &Path, ask: &Ask, answer: &mut Answer) -> anyhow::Result<()> {
    let file = std::fs::File::open(path)?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)?
        .with_batch_size(crate::store::read::STREAM_BATCH_ROWS)
        .build()?;
    for batch in reader {
        let batch = batch?;
        let cols = Cols {
            batch: &batch,
            path,
        };
        for row in rows(&cols)? {
            if !(row.visible_to(ask.uid)
                && row.lived_within(ask.since_ns, ask.until_ns)
                && ask.filter.matches(&row))
            {
                continue;
            }
            let line = serde_json::to_vec(&row)?;
            if answer.rows >= ask.limit || answer.lines.len() + line.len() + 1 > MAX_ANSWER_BYTES {
                answer.truncated = true;
                return Ok(());
            }
            answer.lines.extend_from_slice(&line);
            answer.lines.push(b'\n');
            answer.rows += 1;
        }
    }
    Ok(())
}

/// The rows of one batch of a history file.
pub fn rows(cols: &Cols<'_>) -> anyhow::Result<Vec<HistoryRow>> {
    let n = cols.batch.num_rows();
    let pid = cols.req::<UInt32Type>("pid")?;
    let start = cols.req_times_ns("start_time")?;
    let end = cols.times_ns("end_time");
    let parent = cols.prim::<UInt32Type>("parent_pid");
    let uid = cols.prim::<UInt32Type>("uid");
    let cgroup_id = cols.prim::<UInt64Type>("cgroup_id");
    let cgroup = cols.str("cgroup");
    let comm = cols.str("comm");
    let filename = cols.str("filename");
    let argv = cols.list("argv");
    let exit_code = cols.prim::<Int32Type>("exit_code");
    let exit_signal = cols.prim::<Int32Type>("exit_signal");
    let user = cols.prim::<UInt64Type>("cpu_user_ns");
    let system = cols.prim::<UInt64Type>("cpu_system_ns");
    let rss = cols.prim::<UInt64Type>("peak_rss_bytes");
    let read = cols.prim::<UInt64Type>("read_bytes");
    let write = cols.prim::<UInt64Type>("write_bytes");
    let text = |a: Option<&arrow_array::StringArray>, i: usize| {
        a.filter(|a| a.is_valid(i)).map(|a| a.value(i).to_owned())
    };
    Ok((0..n)
        .map(|i| HistoryRow {
            pid: pid.value(i),
            parent_pid: opt(parent, i),
            uid: opt(uid, i),
            cgroup_id: opt(cgroup_id, i),
            cgroup: text(cgroup, i),
            comm: text(comm, i).unwrap_or_default(),
            filename: text(filename, i),
            argv: argv.filter(|a| a.is_valid(i)).map(|a| {
                let items = a.value(i);
                let items = items.as_any().downcast_ref::<arrow_array::StringArray>();
                items
                    .map(|s| s.iter().map(|v| v.unwrap_or_default().to_owned()).collect())
                    .unwrap_or_default()
            }),
            start_ns: start[i],
            end_ns: time_at(end.as_ref(), i),
            exit_code: opt(exit_code, i),
            exit_signal: opt(exit_signal, i),
            cpu_user_ns: opt(user, i),
            cpu_system_ns: opt(system, i),
            peak_rss_bytes: opt(rss, i),
            read_bytes: opt(read, i),
            write_bytes: opt(write, i),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::history::{file_name, history_batch, history_schema, Exited};
    use crate::store::records::ProcessRecord;

    fn exited(pid: u32, uid: u32, end: i64, comm: &str) -> Exited {
        Exited {
            process: ProcessRecord {
                pid,
                start_time_ns: end - 2_000_000,
                end_time_ns: Some(end),
                comm: comm.into(),
                argv: Some(vec![comm.into(), "-x".into()]),
                exit_code: Some(0),
                cpu_user_ns: Some(1_000_000),
                cpu_system_ns: Some(500_000),
                ..ProcessRecord::default()
            },
            uid: Some(uid),
            cgroup_id: Some(9),
            cgroup: Some("/a.slice".into()),
        }
    }

    fn write(dir: &Path, rows: &[Exited]) {
        let first = rows.first().unwrap().process.end_time_ns.unwrap();
        let last = rows.last().unwrap().process.end_time_ns.unwrap();
        let batch = history_batch(rows).unwrap();
        crate::store::writer::write_table(
            &dir.join(file_name(first, last)),
            history_schema(),
            &batch,
        )
        .unwrap();
    }

    fn ask(uid: u32, since: i64, until: i64, filter: &str, limit: usize) -> Ask {
        Ask {
            uid,
            since_ns: since,
            until_ns: until,
            filter: super::super::filter::parse(filter).unwrap(),
            limit,
        }
    }

    fn pids(answer: &Answer) -> Vec<u32> {
        answer
            .lines
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice::<HistoryRow>(l).unwrap().pid)
            .collect()
    }

    #[test]
    fn an_answer_holds_what_the_asker_may_see_in_the_interval_and_filter() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            &[
                exited(1, 1000, 10_000_000, "make"),
                exited(2, 1001, 20_000_000, "cc"),
            ],
        );
        write(
            dir.path(),
            &[
                exited(3, 1000, 30_000_000, "cc"),
                exited(4, 1000, 40_000_000, "ld"),
            ],
        );
        // A stray file that is not the recorder's is not read.
        std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
        let all = answer(dir.path(), &ask(0, 0, i64::MAX, "", 100));
        assert_eq!(pids(&all), vec![1, 2, 3, 4]);
        assert!(all.unreadable.is_empty(), "{:?}", all.unreadable);
        assert_eq!(
            pids(&answer(dir.path(), &ask(1000, 0, i64::MAX, "", 100))),
            vec![1, 3, 4]
        );
        assert_eq!(
            pids(&answer(dir.path(), &ask(1001, 0, i64::MAX, "", 100))),
            vec![2]
        );
        assert!(pids(&answer(dir.path(), &ask(1002, 0, i64::MAX, "", 100))).is_empty());
        // The interval: 4 lived from 38 ms to 40 ms.
        assert_eq!(
            pids(&answer(
                dir.path(),
                &ask(0, 35_000_000, 39_000_000, "", 100)
            )),
            vec![4]
        );
        assert_eq!(
            pids(&answer(dir.path(), &ask(0, 0, i64::MAX, "comm=cc", 100))),
            vec![2, 3]
        );
        // The limit cuts, and says so.
        let cut = answer(dir.path(), &ask(0, 0, i64::MAX, "", 3));
        assert_eq!(pids(&cut), vec![1, 2, 3]);
        assert!(cut.truncated);
        // Rows read back whole.
        let row: HistoryRow =
            serde_json::from_slice(all.lines.split(|b| *b == b'\n').next().unwrap()).unwrap();
        assert_eq!(row.argv, Some(vec!["make".to_string(), "-x".to_string()]));
        assert_eq!(row.cgroup.as_deref(), Some("/a.slice"));
        assert_eq!(row.cpu_user_ns, Some(1_000_000));
    }

    #[test]
    fn a_damaged_file_is_named_and_the_others_answer() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &[exited(1, 1000, 10_000_000, "make")]);
        std::fs::write(dir.path().join(file_name(20, 30)), b"not parquet").unwrap();
        let got = answer(dir.path(), &ask(0, 0, i64::MAX, "", 100));
        assert_eq!(pids(&got), vec![1]);
        assert_eq!(got.unreadable.len(), 1, "{:?}", got.unreadable);
    }
}
