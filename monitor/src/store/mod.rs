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
