//! The run directory, its one owner: the rows (`records`), the Arrow schemas (`schema`, the one
//! place they live), the crash-safe Parquet writer (`writer`), run.json (`run_json`) and
//! summary.json (`summary_json`), and the reader that `report` and `export` read a run through
//! (`read`: a finished or a killed run, older versions too), all with the invoking user's
//! identity (`userfs`).
#[cfg(test)]
pub(crate) mod doc_check;
pub mod model;
pub mod read;
pub mod records;
pub mod run_json;
pub mod schema;
pub mod summary_json;
pub mod userfs;
pub mod versioned;
pub mod writer;

use std::time::Duration;

/// Whether the files of a run are on the disk before montrace ends, or left to the kernel's
/// writeback (about 30 s later by default).
///
/// A sync waits for the disk: 0.2 to 0.7 ms a file on the 2-core test machine, longer beside a
/// neighbour that writes, 7 files a run. A run shorter than its flush interval is not synced: a
/// power cut or an OS crash soon after it may leave its files empty or absent, which is what the
/// flush interval already allows a run that is going on to lose (its parts are never synced),
/// and such a run costs less to run again than its syncs cost. A longer run is synced before
/// montrace ends. Either way every file appears whole or not at all to a reader on a running
/// system (written under a temporary name and renamed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Each file's data is on the disk before it is renamed into place.
    Synced,
    /// Written and renamed without waiting for the disk.
    Unsynced,
}

impl Durability {
    /// A run that recorded for `recorded` with `flush_interval` between flushes of its tables.
    pub fn of_run(recorded: Duration, flush_interval: Duration) -> Self {
        match recorded >= flush_interval {
            true => Durability::Synced,
            false => Durability::Unsynced,
        }
    }
}

#[cfg(test)]
mod durability_tests {
    use super::Durability;
    use std::time::Duration;

    #[test]
    fn a_run_is_synced_from_its_flush_interval_on() {
        let flush = Duration::from_secs(5);
        let of = |ms| Durability::of_run(Duration::from_millis(ms), flush);
        assert_eq!(of(3), Durability::Unsynced);
        assert_eq!(of(4_999), Durability::Unsynced);
        assert_eq!(of(5_000), Durability::Synced);
        assert_eq!(of(3_600_000), Durability::Synced);
        assert_eq!(
            Durability::of_run(Duration::from_millis(150), Duration::from_millis(100)),
            Durability::Synced
        );
    }
}
