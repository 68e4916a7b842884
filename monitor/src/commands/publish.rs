//! `montrace publish RUN... DEST`: every run, said one per line; exit 0 when all were published
//! (or were already), 1 when one failed (the others are still published).
use anyhow::Context as _;

use super::{CommandError, Exit};
use crate::{
    cli::PublishArgs,
    fleet::publish::{publish_paths, store_url, unsupported},
};

pub fn publish(args: PublishArgs) -> Exit {
    let (dest, runs) = args
        .paths
        .split_last()
        .context("publish needs RUN... DEST")?;
    if let Some(message) =
        unsupported(dest).or_else(|| store_url(dest).err().map(|e| e.to_string()))
    {
        return Err(CommandError::usage(message));
    }
    let runs: Vec<std::path::PathBuf> = runs.iter().map(std::path::PathBuf::from).collect();
    Ok(if publish_paths(&runs, dest)? == 0 {
        0
    } else {
        1
    })
}
