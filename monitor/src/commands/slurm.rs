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
use crate::cli::{Cli, Command, SlurmArgs, SlurmCommand, SlurmEpilogArgs, SlurmTaskArgs};
use crate::exit_code::EXIT_NOT_FOUND;

pub fn slurm(args: SlurmArgs) -> Exit {
    match args.command {
        SlurmCommand::Task(task) => self::task(task),
        SlurmCommand::Epilog(epilog) => self::epilog(epilog),
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

/// Publishes the ended job's runs (`DIR/USER/JOB/*`) into the dataset. The runs are the job
/// user's files: they are read with that user's identity (`userfs`: a link planted there leads
/// only where the user could read), and a run whose run.json names another job or user is left
/// out. Whatever happens, the status is 0: Slurm drains a node whose epilog fails.
fn epilog(args: SlurmEpilogArgs) -> Exit {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(CommandError::usage(
            "montrace slurm epilog is Slurm's Epilog, run as root (docs/cluster.md)",
        ));
    }
    if let Err(why) = publish_job(&args) {
        crate::say!("montrace slurm epilog: {why}");
    }
    Ok(0)
}

fn publish_job(args: &SlurmEpilogArgs) -> Result<(), String> {
    use crate::fleet::slurm::{from_env, is_plain_name, job_name};
    let env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    let job = from_env(&env, None).ok_or("no SLURM_JOB_ID: not run as Slurm's Epilog")?;
    let id = |key: &str| env.get(key).and_then(|v| v.parse::<u32>().ok());
    let (Some(user), Some(name), Some(uid)) =
        (job.user.clone(), job_name(&job), id("SLURM_JOB_UID"))
    else {
        return Err("the environment names no job user, uid or job".into());
    };
    if !is_plain_name(&user) || !is_plain_name(&name) {
        return Err(format!("refusing the names {user:?} / {name:?}"));
    }
    let gid = id("SLURM_JOB_GID").unwrap_or(uid);
    crate::store::userfs::set_owner(crate::store::userfs::Owner {
        uid,
        gid,
        groups: vec![gid],
    })
    .map_err(|e| e.to_string())?;
    let dir = args.dir.join(&user).join(&name);
    let names = match crate::store::userfs::list_dir(&dir) {
        Ok(names) => names,
        // Nothing recorded (the plugin is off, the user opted out): nothing to publish.
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(format!("cannot list {}: {err}", dir.display())),
    };
    let mut runs = Vec::new();
    for name in names {
        let run = dir.join(name);
        match crate::store::run_json::read(&run) {
            Ok(info) => {
                let s = info.context.and_then(|c| c.slurm).unwrap_or_default();
                if s.job_id == job.job_id && s.user.as_deref() == Some(user.as_str()) {
                    runs.push(run);
                } else {
                    crate::say!(
                        "montrace slurm epilog: {} is not a run of job {} of {user}: left out",
                        run.display(),
                        job.job_id.as_deref().unwrap_or_default()
                    );
                }
            }
            Err(err) => crate::say!("montrace slurm epilog: {}: {err}", run.display()),
        }
    }
    let failed =
        crate::fleet::publish::publish_paths(&runs, &args.dataset).map_err(|e| format!("{e:#}"))?;
    match failed {
        0 => Ok(()),
        n => Err(format!("{n} of the job's runs could not be published")),
    }
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
