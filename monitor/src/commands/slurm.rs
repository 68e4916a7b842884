//! `montrace slurm task -- CMD`: what dist/slurm's SPANK plugin runs as each task of a job step,
//! as the job's user: the task's command recorded as `montrace run` would, into the site's
//! directory (`DIR/USER/JOB/STEP.TASK`), with the job's context in run.json (ids, user,
//! partition, account, what the job asked for: `fleet::slurm`).
//!
//! The job's command always runs: where the run directory cannot be made (no such site
//! directory, a user part this user does not own), montrace says why on the task's stderr and
//! execs the command itself, unrecorded.
use std::ffi::OsString;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

use clap::Parser as _;

use super::{CommandError, Exit};
use crate::cli::{Cli, Command, SlurmArgs, SlurmCommand, SlurmTaskArgs};
use crate::exit_code::EXIT_NOT_FOUND;

pub fn slurm(args: SlurmArgs) -> Exit {
    match args.command {
        SlurmCommand::Task(task) => self::task(task),
    }
}

fn task(args: SlurmTaskArgs) -> Exit {
    let env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    let Some(job) = crate::fleet::slurm::from_env(&env, None) else {
        return Err(CommandError::usage(
            "montrace slurm task runs inside a Slurm job (no SLURM_JOB_ID): use `montrace run`",
        ));
    };
    let out = match run_dir(&args.dir, &job) {
        Ok(out) => out,
        Err(why) => {
            crate::say!("montrace: {why}: this task runs unrecorded");
            return exec_bare(&args.command);
        }
    };
    if let Some(agent) = &args.agent {
        if std::env::var_os("MONTRACE_AGENT_SOCKET").is_none() {
            // Single-threaded still: nothing else reads the environment yet.
            std::env::set_var("MONTRACE_AGENT_SOCKET", agent);
        }
    }
    // `--linger 0s`: the task ends when its command does, as it would without montrace (Slurm
    // then ends what the command left behind; those processes are recorded as alive at the
    // end). Waiting for them would hold the step open until they exit.
    let mut argv: Vec<OsString> = [
        "montrace",
        "run",
        "--quiet",
        "--no-report",
        "--linger",
        "0s",
        "--out",
    ]
    .map(OsString::from)
    .into();
    argv.push(out.into_os_string());
    argv.push("--".into());
    argv.extend(args.command.iter().cloned());
    match Cli::try_parse_from(argv) {
        Ok(Cli {
            command: Command::Run(run),
            ..
        }) => super::run::run(run),
        Ok(_) => unreachable!("the arguments name `run`"),
        Err(err) => Err(CommandError::usage(err.to_string().trim())),
    }
}

/// Makes `DIR/USER` (this user's, mode 0700) and `JOB` in it, and names the task's run directory:
/// `STEP.TASK`, or `STEP.TASK.rN` for a requeued job's N-th new run.
fn run_dir(site: &Path, job: &crate::fleet::slurm::Slurm) -> Result<PathBuf, String> {
    let (user, task) = crate::fleet::slurm::task_dir(job)
        .ok_or("the job's environment names no user, job or step montrace can use")?;
    let mine = site.join(user);
    match std::fs::DirBuilder::new().mode(0o700).create(&mine) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(format!("cannot make {}: {err}", mine.display())),
    }
    // A directory another user made (or a link) in a shared site directory is not ours to
    // write runs into.
    let meta = std::fs::symlink_metadata(&mine)
        .map_err(|err| format!("cannot read {}: {err}", mine.display()))?;
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if !meta.file_type().is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is not a directory of this user's that only they can write (owner uid {}, mode {:o})",
            mine.display(),
            meta.uid(),
            meta.mode() & 0o7777
        ));
    }
    let task = mine.join(task);
    let parent = task.parent().unwrap_or(&mine);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(parent)
        .map_err(|err| format!("cannot make {}: {err}", parent.display()))?;
    let mut candidate = task.clone();
    for restart in 1.. {
        if std::fs::symlink_metadata(&candidate).is_err() {
            break;
        }
        let mut name = task.file_name().unwrap_or_default().to_owned();
        name.push(format!(".r{restart}"));
        candidate = task.with_file_name(name);
    }
    Ok(candidate)
}

/// The command, unrecorded, in this process (its status is the task's).
fn exec_bare(command: &[OsString]) -> Exit {
    use std::os::unix::process::CommandExt as _;
    let err = std::process::Command::new(&command[0])
        .args(&command[1..])
        .exec();
    crate::say!("montrace: {}: {err}", command[0].to_string_lossy());
    Ok(EXIT_NOT_FOUND)
}
