//! Reading a JSON file of montrace's that carries a `schema_version` (run.json, summary.json):
//! fields an older montrace did not write read as their defaults, a newer layout is refused.

use serde::de::DeserializeOwned;

/// Why a versioned JSON file cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Io(std::io::Error),
    #[error("not JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("schema version {found}, newer than this montrace reads ({reads})")]
    Newer { found: u64, reads: u32 },
    /// JSON, but not the file's shape.
    #[error("not a montrace {what}: {error}")]
    Invalid {
        what: &'static str,
        error: serde_json::Error,
    },
}

/// Parses `bytes` (or the error of reading them) as `what` (e.g. "run.json"), refusing a
/// `schema_version` above `reads`.
pub fn parse<T: DeserializeOwned>(
    bytes: std::io::Result<Vec<u8>>,
    what: &'static str,
    reads: u32,
) -> Result<T, ReadError> {
    let bytes = bytes.map_err(ReadError::Io)?;
    let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(ReadError::NotJson)?;
    if let Some(found) = value.get("schema_version").and_then(|v| v.as_u64()) {
        if found > u64::from(reads) {
            return Err(ReadError::Newer { found, reads });
        }
    }
    serde_json::from_value(value).map_err(|error| ReadError::Invalid { what, error })
}
