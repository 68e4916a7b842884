//! Parquet output: zstd-compressed files whose key-value metadata carries the schema's metadata
//! (the schema version among it). Every error names the file it concerns.
//!
//! A Parquet file can be read only once its footer is written. So a table that grows while the
//! run goes ([`PartedTable`]) is written as a sequence of closed part files,
//! `<name>.parts/<name>-NNNNNN.parquet`, each one complete, and merged into `<name>.parquet`
//! when the run ends cleanly. Every file is written under a temporary name that does not end in
//! `.parquet` (`.<file>.tmp`) and renamed once its footer is written, so neither a reader nor a
//! `*.parquet` glob ever sees a half-written file, even after montrace is killed.

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, SchemaRef};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::errors::ParquetError;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};

use crate::store::records::{
    EventRecord, GpuProcessRecord, GpuRecord, MarkRecord, ProcessRecord, SampleRecord, SystemRecord,
};
use crate::store::schema;
use crate::store::Durability;

/// Rows a [`PartedTable`] holds in memory at most: when this many are buffered,
/// [`PartedTable::push`] writes them out as a part by itself.
pub const MAX_BUFFERED_ROWS: usize = 65_536;
/// Most rows in one row group of a file; bounds the memory the Parquet encoder holds, in
/// particular while [`PartedTable::finish`] merges the parts.
pub const ROW_GROUP_ROWS: usize = 2 * MAX_BUFFERED_ROWS;
/// Most encoded bytes in one row group (whichever limit comes first), for wide rows.
pub const ROW_GROUP_BYTES: usize = 64 << 20;
/// Rows read from a part at a time while merging.
const MERGE_BATCH_ROWS: usize = 8192;

const ZSTD_LEVEL: i32 = 3;
/// Files of fewer rows are written uncompressed. parquet-rs makes a zstd compression and a
/// decompression context for every column it writes, and making them costs more than a small
/// file gains from compression: the tables of a `/bin/true` run (a row or a few each) spent
/// 8.6 ms of CPU per run in `ZSTD_createCCtx` and `ZSTD_createDCtx` alone (`perf record`, ten
/// runs through the agent on the 2-core test machine), for files of a few kilobytes either way.
/// They are written without dictionary encoding too: a dictionary encoder per column cost such
/// a run 0.4 ms of wall at its end (40 interleaved runs through the agent); and without
/// statistics (min and max of each page and column, and the page index), which let a reader skip
/// the pages of a large file and cost a one-row `processes.parquet` about 40 of its 190 µs to
/// write (on tmpfs, 400 files).
pub const COMPRESS_FROM_ROWS: u64 = 1024;

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("cannot {op} {}: {source}", .path.display())]
    Io {
        /// What failed: "create", "open", "sync", "remove".
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot rename {} to {}: {source}", .from.display(), .to.display())]
    Rename {
        from: PathBuf,
        to: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", .path.display())]
    Parquet { path: PathBuf, source: ParquetError },
    #[error("cannot write {}: {source}", .path.display())]
    Arrow { path: PathBuf, source: ArrowError },
    #[error("cannot read {}: {source}", .path.display())]
    Read { path: PathBuf, source: ParquetError },
    /// A thread of montrace's failed while it wrote (a bug): the parts it worked on stay.
    #[error("montrace's thread failed while {0}; the table's parts stay in its .parts directory")]
    Panicked(String),
}

fn io_error(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> WriteError {
    let path = path.to_path_buf();
    move |source| WriteError::Io { op, path, source }
}

/// One Parquet file being written. Rows are encoded in memory and written out a row group at a
/// time ([`ROW_GROUP_ROWS`]); [`TableWriter::finish`] writes the footer, without which the file
/// is unreadable. It writes `path` itself: [`write_table`] and [`PartedTable`] add the temporary
/// name.
pub struct TableWriter {
    path: PathBuf,
    schema: SchemaRef,
    inner: ArrowWriter<File>,
}

impl TableWriter {
    /// Creates `path` for rows of `schema`: a new file (a leftover or a symlink at `path` is
    /// removed first, never written through), with the run directory owner's identity. `rows`
    /// is how many it will hold: zstd-compressed from [`COMPRESS_FROM_ROWS`] on.
    pub fn create(path: &Path, schema: SchemaRef, rows: u64) -> Result<Self, WriteError> {
        let path = path.to_path_buf();
        let props = properties(&schema, rows);
        let file =
            crate::store::userfs::create_replacing(&path).map_err(io_error("create", &path))?;
        match ArrowWriter::try_new(file, schema.clone(), Some(props)) {
            Ok(inner) => Ok(TableWriter {
                path,
                schema,
                inner,
            }),
            Err(source) => Err(WriteError::Parquet { path, source }),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Adds rows. The batch must have the writer's columns.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), WriteError> {
        check_columns(batch, &self.schema, &self.path)?;
        self.inner
            .write(batch)
            .map_err(|source| WriteError::Parquet {
                path: self.path.clone(),
                source,
            })
    }

    /// Writes the footer and closes the file; returns how many rows it holds.
    pub fn finish(self) -> Result<u64, WriteError> {
        self.close(Durability::Unsynced)
    }

    /// [`TableWriter::finish`], and when `Synced` waits until the file is on the disk.
    fn close(self, durability: Durability) -> Result<u64, WriteError> {
        let TableWriter {
            path, mut inner, ..
        } = self;
        let metadata = match inner.finish() {
            Ok(metadata) => metadata,
            Err(source) => return Err(WriteError::Parquet { path, source }),
        };
        if durability == Durability::Synced {
            inner.inner().sync_all().map_err(io_error("sync", &path))?;
        }
        Ok(metadata.file_metadata().num_rows() as u64)
    }
}

/// The properties of a file of `rows` rows of `schema`: compressed, dictionary-encoded and with
/// statistics from [`COMPRESS_FROM_ROWS`] rows on; the schema's metadata as the file's.
fn properties(schema: &SchemaRef, rows: u64) -> WriterProperties {
    let metadata = schema
        .metadata()
        .iter()
        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
        .collect();
    let compression = match rows >= COMPRESS_FROM_ROWS {
        true => Compression::ZSTD(ZstdLevel::try_new(ZSTD_LEVEL).expect("valid zstd level")),
        false => Compression::UNCOMPRESSED,
    };
    WriterProperties::builder()
        .set_compression(compression)
        .set_dictionary_enabled(rows >= COMPRESS_FROM_ROWS)
        .set_statistics_enabled(match rows >= COMPRESS_FROM_ROWS {
            true => EnabledStatistics::Page,
            false => EnabledStatistics::None,
        })
        .set_key_value_metadata(Some(metadata))
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_max_row_group_bytes(Some(ROW_GROUP_BYTES))
        .build()
}

/// ArrowWriter does not check this itself: a batch whose columns are not the file's would
/// corrupt it.
fn check_columns(batch: &RecordBatch, schema: &SchemaRef, path: &Path) -> Result<(), WriteError> {
    if batch.schema().fields() == schema.fields() {
        return Ok(());
    }
    let source = ArrowError::SchemaError(format!(
        "batch columns {:?} do not match the file's {:?}",
        field_names(&batch.schema()),
        field_names(schema)
    ));
    Err(WriteError::Arrow {
        path: path.to_path_buf(),
        source,
    })
}

fn field_names(schema: &SchemaRef) -> Vec<&str> {
    schema.fields().iter().map(|f| f.name().as_str()).collect()
}

/// `dir/.name.tmp` for `dir/name`: where a file is written before it is renamed to its name.
/// It does not match `*.parquet`.
fn temp_path(path: &Path) -> PathBuf {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!(".{name}.tmp"))
}

/// Writes `path` (of `rows` rows) through [`TableWriter`] under its temporary name, then renames
/// it: `path` is either absent or complete. `Synced`, the data is on the disk before the rename.
/// On error the temporary file is removed. Returns the rows written.
fn write_file(
    path: &Path,
    schema: SchemaRef,
    rows: u64,
    durability: Durability,
    fill: impl FnOnce(&mut TableWriter) -> Result<(), WriteError>,
) -> Result<u64, WriteError> {
    let temp = temp_path(path);
    let result = TableWriter::create(&temp, schema, rows).and_then(|mut writer| {
        fill(&mut writer)?;
        writer.close(durability)
    });
    let result = result.and_then(|rows| match crate::store::userfs::rename(&temp, path) {
        Ok(()) => Ok(rows),
        Err(source) => Err(WriteError::Rename {
            from: temp.clone(),
            to: path.to_path_buf(),
            source,
        }),
    });
    if result.is_err() {
        let _ = crate::store::userfs::remove_file(&temp);
    }
    result
}

/// The writer of a small file of `schema` (see [`PartedTable::is_small`]), in memory: its
/// properties, the schema's Parquet form and its encoded Arrow form, 0.13 ms of CPU for four
/// tables of a `/bin/true` run (`perf`), made ahead of the run's end (see
/// [`PartedTable::set_ready`]). None where parquet refuses the schema (then the file is written
/// as any other, and says why).
pub fn small_writer(schema: &SchemaRef) -> Option<ReadyWriter> {
    let writer = ArrowWriter::try_new(Vec::new(), schema.clone(), Some(properties(schema, 0)));
    Some(ReadyWriter {
        schema: schema.clone(),
        writer: writer.ok()?,
    })
}

/// A small file's writer made ahead ([`small_writer`]), with the schema it was made for: a table
/// takes only one made for its own ([`PartedTable::set_ready`]), as ArrowWriter does not check
/// the batches it is given.
pub struct ReadyWriter {
    schema: SchemaRef,
    writer: ArrowWriter<Vec<u8>>,
}

/// Writes `path` through `ready`, a writer made ahead in memory ([`small_writer`]): the
/// rows of `batch` encoded, then the whole file written under its temporary name and renamed
/// (synced first when `Synced`), as [`write_file`] does. Returns the rows written.
fn write_ready(
    path: &Path,
    ready: ReadyWriter,
    batch: Option<&RecordBatch>,
    durability: Durability,
) -> Result<u64, WriteError> {
    let parquet = |source| WriteError::Parquet {
        path: path.to_path_buf(),
        source,
    };
    let ReadyWriter { schema, mut writer } = ready;
    if let Some(batch) = batch {
        check_columns(batch, &schema, path)?;
        writer.write(batch).map_err(parquet)?;
    }
    let bytes = writer.into_inner().map_err(parquet)?;
    crate::store::userfs::write_atomic_with(path, &bytes, durability)
        .map_err(io_error("write", path))?;
    Ok(batch.map_or(0, |batch| batch.num_rows() as u64))
}

/// Writes a whole table at once (a flight-recorder file, a published row); returns its rows.
/// The file appears complete or not at all, and is synced.
pub fn write_table(path: &Path, schema: SchemaRef, batch: &RecordBatch) -> Result<u64, WriteError> {
    let rows = batch.num_rows() as u64;
    write_file(path, schema, rows, Durability::Synced, |writer| {
        writer.write(batch)
    })
}

/// A table written while the run goes, readable at any moment up to its last flush.
///
/// Rows are buffered in memory; [`PartedTable::flush`] (called by the run every flush interval)
/// writes them as one new closed part, `<dir>/<name>.parts/<name>-NNNNNN.parquet`, numbered from
/// 000000 in write order. At most [`MAX_BUFFERED_ROWS`] rows are buffered: the push that reaches
/// it writes a part by itself. [`PartedTable::finish`] merges the parts, in order, into
/// `<dir>/<name>.parquet` and removes the parts directory.
///
/// The parts directory is made with the first part ([`PartsDir::WithFirstPart`]), or when the
/// table is created ([`PartsDir::Now`]: `processes.parts/` says that a directory holds a run
/// that is going on or was killed). A short run's tables have no parts: making and removing
/// their directories was 0.8 ms of a `/bin/true` run through the agent (4 tables, ext4 mounted
/// with `discard`, whose rmdir waits for the disk; 50 interleaved runs on the 2-core test
/// machine).
///
/// If montrace dies before `finish`, the parts stay: each is a complete Parquet file, and
/// `<dir>/<name>.parts/*.parquet` reads every flushed row. (Parts are not synced to the disk,
/// the merged file is, but for a run shorter than its flush interval (`Durability`): after an
/// OS crash or a power cut the newest parts may be missing or damaged.) Dropping the table
/// without `finish` flushes what is buffered (errors ignored) and leaves the parts.
pub struct PartedTable<R> {
    /// `<dir>/<name>.parquet`.
    path: PathBuf,
    /// `<dir>/<name>.parts`.
    parts_dir: PathBuf,
    name: String,
    schema: SchemaRef,
    to_batch: fn(&[R]) -> Result<RecordBatch, ArrowError>,
    buffer: Vec<R>,
    /// Parts written so far; the next one is numbered `parts`.
    parts: usize,
    /// `parts_dir` was made (it is made once, and must not exist before).
    dir_made: bool,
    /// The final file's writer, made ahead in memory for a table that stays small
    /// ([`PartedTable::set_ready`]).
    ready: Option<ReadyWriter>,
    /// Rows in the parts written so far.
    written: u64,
}

/// When a table's parts directory is made: see [`PartedTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartsDir {
    /// When the table is created.
    Now,
    /// With the table's first part; a table that never writes one has none.
    WithFirstPart,
}

/// `processes.parquet`, see [`PartedTable::processes`].
pub type ProcessTable = PartedTable<ProcessRecord>;
/// `events.parquet`, see [`PartedTable::events`].
pub type EventTable = PartedTable<EventRecord>;
/// `samples.parquet`, see [`PartedTable::samples`].
pub type SampleTable = PartedTable<SampleRecord>;
/// `system.parquet`, see [`PartedTable::system`].
pub type SystemTable = PartedTable<SystemRecord>;

/// `events` for `events.parquet`.
fn table_name(file: &str) -> &str {
    file.strip_suffix(".parquet").unwrap_or(file)
}

impl PartedTable<ProcessRecord> {
    /// `<dir>/processes.parquet`.
    pub fn processes(dir: &Path) -> Result<Self, WriteError> {
        Self::create(
            dir,
            table_name(schema::PROCESSES_FILE),
            schema::processes_schema(),
            schema::processes_batch,
            PartsDir::Now,
        )
    }
}

impl PartedTable<EventRecord> {
    /// `<dir>/events.parquet`.
    pub fn events(dir: &Path) -> Result<Self, WriteError> {
        Self::create(
            dir,
            table_name(schema::EVENTS_FILE),
            schema::events_schema(),
            schema::events_batch,
            PartsDir::WithFirstPart,
        )
    }
}

impl PartedTable<SampleRecord> {
    /// `<dir>/samples.parquet`.
    pub fn samples(dir: &Path) -> Result<Self, WriteError> {
        Self::create(
            dir,
            table_name(schema::SAMPLES_FILE),
            schema::samples_schema(),
            schema::samples_batch,
            PartsDir::WithFirstPart,
        )
    }
}

impl PartedTable<MarkRecord> {
    /// `<dir>/marks.parquet`.
    pub fn marks(dir: &Path) -> Result<Self, WriteError> {
        Self::create(
            dir,
            table_name(schema::MARKS_FILE),
            schema::marks_schema(),
            schema::marks_batch,
            PartsDir::WithFirstPart,
        )
    }
}

/// `marks.parquet`, see [`PartedTable::marks`].
pub type MarkTable = PartedTable<MarkRecord>;

impl PartedTable<SystemRecord> {
    /// `<dir>/system.parquet`.
    pub fn system(dir: &Path) -> Result<Self, WriteError> {
        Self::create(
            dir,
            table_name(schema::SYSTEM_FILE),
            schema::system_schema(),
            schema::system_batch,
            PartsDir::WithFirstPart,
        )
    }
}

/// `gpu.parquet`, see [`PartedTable::gpu`].
pub type GpuTable = PartedTable<GpuRecord>;
/// `gpu_processes.parquet`, see [`PartedTable::gpu_processes`].
pub type GpuProcessTable = PartedTable<GpuProcessRecord>;

impl PartedTable<GpuRecord> {
    /// `<dir>/gpu.parquet`.
    pub fn gpu(dir: &Path) -> Result<Self, WriteError> {
        Self::create(
            dir,
            table_name(schema::GPU_FILE),
            schema::gpu_schema(),
            schema::gpu_batch,
            PartsDir::WithFirstPart,
        )
    }
}

impl PartedTable<GpuProcessRecord> {
    /// `<dir>/gpu_processes.parquet`.
    pub fn gpu_processes(dir: &Path) -> Result<Self, WriteError> {
        Self::create(
            dir,
            table_name(schema::GPU_PROCESSES_FILE),
            schema::gpu_processes_schema(),
            schema::gpu_processes_batch,
            PartsDir::WithFirstPart,
        )
    }
}

impl<R> PartedTable<R> {
    /// A table whose parts go to `<dir>/<name>.parts/` (made `when` says; it must not exist
    /// yet then) and whose final file is `<dir>/<name>.parquet`. `to_batch` turns rows into a
    /// batch of `schema`.
    pub fn create(
        dir: &Path,
        name: &str,
        schema: SchemaRef,
        to_batch: fn(&[R]) -> Result<RecordBatch, ArrowError>,
        when: PartsDir,
    ) -> Result<Self, WriteError> {
        let mut table = PartedTable {
            path: dir.join(format!("{name}.parquet")),
            parts_dir: dir.join(format!("{name}.parts")),
            name: name.to_owned(),
            schema,
            to_batch,
            buffer: Vec::new(),
            parts: 0,
            dir_made: false,
            ready: None,
            written: 0,
        };
        if when == PartsDir::Now {
            table.make_parts_dir()?;
        }
        Ok(table)
    }

    /// Makes the parts directory, once: one that is there already (a leftover, or the
    /// command's) is an error, never taken over.
    fn make_parts_dir(&mut self) -> Result<(), WriteError> {
        if !self.dir_made {
            crate::store::userfs::create_dir(&self.parts_dir)
                .map_err(io_error("create", &self.parts_dir))?;
            self.dir_made = true;
        }
        Ok(())
    }

    /// The final file, `<dir>/<name>.parquet`, written by [`PartedTable::finish`].
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the parts are while the run goes.
    pub fn parts_dir(&self) -> &Path {
        &self.parts_dir
    }

    /// The table's schema.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Gives the table its final file's writer, made ahead by [`small_writer`]:
    /// [`PartedTable::finish_with`] of a table that stayed small then only encodes the rows and
    /// writes the file at once; one that grew past small drops it. A writer made for another
    /// schema is not taken.
    pub fn set_ready(&mut self, ready: Option<ReadyWriter>) {
        self.ready = ready.filter(|ready| ready.schema == self.schema);
    }

    /// A table whose closing is little work: no parts to merge, and too few rows to compress
    /// ([`COMPRESS_FROM_ROWS`]).
    pub fn is_small(&self) -> bool {
        self.parts == 0 && self.rows() < COMPRESS_FROM_ROWS
    }

    /// Rows pushed so far, buffered ones included.
    pub fn rows(&self) -> u64 {
        self.written + self.buffer.len() as u64
    }

    /// Adds a row; when [`MAX_BUFFERED_ROWS`] are buffered, writes them as a part. On error the
    /// rows stay buffered (the next flush tries again).
    pub fn push(&mut self, row: R) -> Result<(), WriteError> {
        self.buffer.push(row);
        if self.buffer.len() >= MAX_BUFFERED_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the buffered rows as one new closed part (footer written, then renamed into
    /// place); does nothing when none are buffered. On error the rows stay buffered and no part
    /// appears.
    pub fn flush(&mut self) -> Result<(), WriteError> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let path = self.part_path(self.parts);
        let batch = (self.to_batch)(&self.buffer).map_err(|source| WriteError::Arrow {
            path: path.clone(),
            source,
        })?;
        self.make_parts_dir()?;
        let rows = self.buffer.len() as u64;
        write_file(
            &path,
            self.schema.clone(),
            rows,
            Durability::Unsynced,
            |writer| writer.write(&batch),
        )?;
        self.parts += 1;
        self.written += self.buffer.len() as u64;
        self.buffer.clear();
        Ok(())
    }

    /// Merges every part in order into `<dir>/<name>.parquet`, then the rows still buffered, and
    /// removes the parts directory; returns the rows of the final file. The merge streams part
    /// by part, so it holds at most a row group in memory. With no rows at all, the file still
    /// has the schema (and 0 rows). On error the parts stay in place, and the buffered rows
    /// become one more part when the table is dropped.
    ///
    /// The buffered rows go straight into the final file rather than into a part of their own
    /// first: a part written, read back and encoded again cost more than half of a short run's
    /// finish (a zstd context for each column, each way). A crash during the merge loses them, as
    /// a crash before the next flush would have. The file is synced: see
    /// [`PartedTable::finish_with`].
    pub fn finish(self) -> Result<u64, WriteError> {
        self.finish_with(Durability::Synced)
    }

    /// [`PartedTable::finish`], the final file synced to the disk before it is renamed into
    /// place or not (a short run's, see [`Durability`]).
    pub fn finish_with(self, durability: Durability) -> Result<u64, WriteError> {
        let (rows, left) = self.finish_leaving_parts(durability)?;
        left.remove()?;
        Ok(rows)
    }

    /// [`PartedTable::finish_with`] but for the parts directory, left in place for the caller to
    /// remove ([`LeftParts::remove`]) when that suits it: removing it takes the run directory's
    /// lock, and waits for the disk where the filesystem discards freed blocks at once (see
    /// [`crate::follow::recorder::Closer`]).
    pub fn finish_leaving_parts(
        mut self,
        durability: Durability,
    ) -> Result<(u64, LeftParts), WriteError> {
        let batch = match self.buffer.is_empty() {
            true => None,
            false => Some(
                (self.to_batch)(&self.buffer).map_err(|source| WriteError::Arrow {
                    path: self.path.clone(),
                    source,
                })?,
            ),
        };
        let rows = match self.ready.take().filter(|_| self.is_small()) {
            Some(ready) => write_ready(&self.path, ready, batch.as_ref(), durability)?,
            None => write_file(
                &self.path,
                self.schema.clone(),
                self.rows(),
                durability,
                |writer| {
                    (0..self.parts).try_for_each(|i| copy_rows(&self.part_path(i), writer))?;
                    batch.as_ref().map_or(Ok(()), |batch| writer.write(batch))
                },
            )?,
        };
        self.written += self.buffer.len() as u64;
        self.buffer.clear();
        let left = LeftParts {
            dir: self.dir_made.then(|| self.parts_dir.clone()),
            parts: self.parts,
        };
        Ok((rows, left))
    }

    /// `<name>.parts/<name>-NNNNNN.parquet`.
    fn part_path(&self, index: usize) -> PathBuf {
        self.parts_dir
            .join(format!("{}-{index:06}.parquet", self.name))
    }
}

/// A finished table's parts directory, still in place ([`PartedTable::finish_leaving_parts`]);
/// its table's file is complete.
#[must_use = "the parts directory stays until it is removed"]
pub struct LeftParts {
    /// None where the table never made one.
    dir: Option<PathBuf>,
    parts: usize,
}

impl LeftParts {
    /// Removes the parts directory and the parts in it.
    pub fn remove(self) -> Result<(), WriteError> {
        let Some(dir) = self.dir else {
            return Ok(());
        };
        // Without parts the directory is empty, unless the command put something there: one
        // rmdir, not a listing.
        let emptied = self.parts == 0 && crate::store::userfs::remove_dir(&dir).is_ok();
        if !emptied {
            crate::store::userfs::remove_dir_all(&dir).map_err(io_error("remove", &dir))?;
        }
        Ok(())
    }
}

impl<R> Drop for PartedTable<R> {
    /// Keeps what is buffered when the run ends without `finish` (an error unwinding): the parts
    /// are then the table.
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// Appends the rows of the Parquet file `part` to `writer`, a batch at a time.
fn copy_rows(part: &Path, writer: &mut TableWriter) -> Result<(), WriteError> {
    let read_error = |source| WriteError::Read {
        path: part.to_path_buf(),
        source,
    };
    let file = crate::store::userfs::open(part).map_err(io_error("open", part))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(read_error)?
        .with_batch_size(MERGE_BATCH_ROWS)
        .build()
        .map_err(read_error)?;
    for batch in reader {
        let batch = batch.map_err(|e| read_error(ParquetError::External(Box::new(e))))?;
        writer.write(&batch)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
