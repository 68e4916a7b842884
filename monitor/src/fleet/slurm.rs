//! Slurm: what a job asked for (`scontrol show job -o`'s answer, parsed by [`parse_job`]), the
//! job's labels from the task's environment ([`from_env`]), and where `montrace slurm task` puts
//! each task's run ([`task_dir`]). Pure, apart from [`show_job`], the thin edge that asks
//! `scontrol`.
use std::collections::BTreeMap;
use std::path::PathBuf;

pub use crate::store::model::Slurm;

/// What `scontrol show job -o` says a job was given: CPUs, memory, time limit, GPUs, partition
/// and account.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobRequest {
    pub cpus: Option<u32>,
    pub memory_bytes: Option<u64>,
    /// None: no limit (`UNLIMITED`) or not said.
    pub time_limit_s: Option<u64>,
    pub gpus: Option<u32>,
    pub partition: Option<String>,
    pub account: Option<String>,
}

/// Parses one job's line of `scontrol show job -o` (`Key=Value` fields separated by spaces).
/// Only fields whose values hold no space are read: `TRES` (`cpu=2,mem=100M,node=1,gres/gpu=1`,
/// Slurm's M being MiB), `TimeLimit` (`[D-]HH:MM:SS`, `MM:SS`, `UNLIMITED`), `Partition`,
/// `Account` (`(null)` is none).
pub fn parse_job(text: &str) -> JobRequest {
    let field = |key: &str| {
        text.split_whitespace()
            .find_map(|token| token.strip_prefix(key)?.strip_prefix('='))
            .filter(|v| !v.is_empty() && *v != "(null)" && *v != "N/A")
    };
    let tres: BTreeMap<&str, &str> = field("TRES")
        .map(|t| t.split(',').filter_map(|kv| kv.split_once('=')).collect())
        .unwrap_or_default();
    JobRequest {
        cpus: tres.get("cpu").and_then(|v| v.parse().ok()),
        memory_bytes: tres.get("mem").and_then(|v| slurm_bytes(v)),
        time_limit_s: field("TimeLimit").and_then(duration_s),
        gpus: tres.get("gres/gpu").and_then(|v| v.parse().ok()),
        partition: field("Partition").map(str::to_string),
        account: field("Account").map(str::to_string),
    }
}

/// Slurm's memory figures: a number with an optional K, M, G, T suffix, powers of 1024 (no
/// suffix is MiB, as in `--mem`).
fn slurm_bytes(text: &str) -> Option<u64> {
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => text.split_at(i),
        None => (text, "M"),
    };
    let shift = match unit {
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return None,
    };
    let value: f64 = digits.parse().ok()?;
    Some((value * (1u64 << shift) as f64).round() as u64)
}

/// Slurm's durations: `D-HH:MM:SS`, `HH:MM:SS`, `MM:SS`, `MM` (minutes), `UNLIMITED` (None).
fn duration_s(text: &str) -> Option<u64> {
    let (days, clock) = match text.split_once('-') {
        Some((d, rest)) => (d.parse::<u64>().ok()?, rest),
        None => (0, text),
    };
    let parts: Vec<u64> = clock
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let seconds = match parts[..] {
        [h, m, s] => h * 3600 + m * 60 + s,
        [m, s] if days == 0 => m * 60 + s,
        [h, m] => h * 3600 + m * 60,
        [m] if days == 0 => m * 60,
        [h] => h * 3600,
        _ => return None,
    };
    Some(days * 86_400 + seconds)
}

/// The job a task belongs to, from the variables slurmstepd sets (None outside a job), with
/// what `scontrol` said the job asked for.
pub fn from_env(env: &BTreeMap<String, String>, job: Option<&JobRequest>) -> Option<Slurm> {
    let get = |key: &str| env.get(key).filter(|v| !v.is_empty()).cloned();
    let job_id = get("SLURM_JOB_ID").or_else(|| get("SLURM_JOBID"))?;
    let job = job.cloned().unwrap_or_default();
    Some(Slurm {
        job_id: Some(job_id),
        // The batch script has no step variable; sbatch marks its environment.
        step_id: get("SLURM_STEP_ID")
            .or_else(|| get("SLURM_STEPID"))
            .map(|s| step_name(&s))
            .or_else(|| (get("ENVIRONMENT").as_deref() == Some("BATCH")).then(|| "batch".into())),
        array_job_id: get("SLURM_ARRAY_JOB_ID"),
        array_task_id: get("SLURM_ARRAY_TASK_ID"),
        cluster: get("SLURM_CLUSTER_NAME"),
        user: get("SLURM_JOB_USER"),
        partition: get("SLURM_JOB_PARTITION").or(job.partition),
        account: get("SLURM_JOB_ACCOUNT").or(job.account),
        node: get("SLURMD_NODENAME"),
        task_id: get("SLURM_PROCID"),
        requested_cpus: job.cpus,
        requested_memory_bytes: job.memory_bytes,
        time_limit_s: job.time_limit_s,
        requested_gpus: job.gpus,
    })
}

/// Slurm's reserved step ids by name (`slurm.h`: SLURM_BATCH_SCRIPT, SLURM_EXTERN_CONT,
/// SLURM_INTERACTIVE_STEP), as `sacct` shows them.
fn step_name(id: &str) -> String {
    match id {
        "4294967294" => "batch".into(),
        "4294967291" => "extern".into(),
        "4294967290" => "interactive".into(),
        other => other.into(),
    }
}

/// The job's part of a user's directory: its job id (an array's task has one of its own; the
/// array's id and index are in run.json, and Slurm's Epilog is not told them).
pub fn job_name(slurm: &Slurm) -> Option<String> {
    slurm.job_id.clone()
}

/// Where `montrace slurm task` writes a task's run, under the site's directory:
/// `USER/JOB/STEP.TASK` ([`job_name`]), STEP `batch` for the batch script. None when a part is
/// missing or could climb out (a `/` or a leading dot in a name the job controls).
pub fn task_dir(slurm: &Slurm) -> Option<(String, PathBuf)> {
    let user = slurm.user.clone()?;
    let job = job_name(slurm)?;
    let step = format!(
        "{}.{}",
        slurm.step_id.as_deref().unwrap_or("batch"),
        slurm.task_id.as_deref().unwrap_or("0")
    );
    [&user, &job, &step]
        .iter()
        .all(|p| is_plain_name(p))
        .then(|| (user.clone(), PathBuf::from(&job).join(step)))
}

/// A name that stays where it is put in a path: not empty, no `/`, no leading dot.
pub fn is_plain_name(part: &str) -> bool {
    !part.is_empty() && !part.starts_with('.') && !part.contains('/') && !part.contains('\0')
}

/// Asks `scontrol show job -o ID` (at most 2 s; None when scontrol is missing, slow or fails).
pub fn show_job(job_id: &str) -> Option<JobRequest> {
    if !job_id.bytes().all(|b| b.is_ascii_digit() || b == b'_') {
        return None;
    }
    let mut cmd = std::process::Command::new("scontrol");
    cmd.args(["show", "job", "-o", job_id]);
    let (status, text) =
        crate::fleet::context::output_within(&mut cmd, std::time::Duration::from_secs(2))?;
    status
        .success()
        .then(|| parse_job(&String::from_utf8_lossy(&text)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::context::tests::env;

    const RUNNING: &str = "JobId=3 JobName=bash UserId=slu1(1001) GroupId=slu1(1001) \
        MCS_label=N/A Priority=4294901757 Nice=0 Account=(null) QOS=(null) JobState=RUNNING \
        TimeLimit=00:05:00 TimeMin=N/A Partition=debug AllocNode:Sid=localhost:18003 \
        NumCPUs=1 TRES=cpu=1,mem=100M,node=1,billing=1 Command=bash -c x WorkDir=/tmp/a b";

    #[test]
    fn a_running_jobs_line_gives_what_it_asked_for() {
        let job = parse_job(RUNNING);
        assert_eq!(
            job,
            JobRequest {
                cpus: Some(1),
                memory_bytes: Some(100 << 20),
                time_limit_s: Some(300),
                gpus: None,
                partition: Some("debug".into()),
                account: None,
            }
        );
        let gpu = parse_job("TRES=cpu=8,mem=2G,node=1,gres/gpu=2 TimeLimit=1-02:00:00 Account=ml");
        assert_eq!(
            (gpu.cpus, gpu.memory_bytes, gpu.gpus),
            (Some(8), Some(2 << 30), Some(2))
        );
        assert_eq!(gpu.time_limit_s, Some(86_400 + 7_200));
        assert_eq!(gpu.account.as_deref(), Some("ml"));
        assert_eq!(parse_job("TimeLimit=UNLIMITED").time_limit_s, None);
        assert_eq!(parse_job(""), JobRequest::default());
    }

    #[test]
    fn slurm_durations_and_sizes() {
        assert_eq!(duration_s("05:30"), Some(330));
        assert_eq!(duration_s("10"), Some(600));
        assert_eq!(duration_s("2-00:00:00"), Some(172_800));
        assert_eq!(duration_s("2-5"), Some(2 * 86_400 + 5 * 3600));
        assert_eq!(duration_s("1:2:3:4"), None);
        assert_eq!(slurm_bytes("512"), Some(512 << 20));
        assert_eq!(slurm_bytes("1.5G"), Some(3 << 29));
        assert_eq!(slurm_bytes("7X"), None);
    }

    #[test]
    fn a_tasks_environment_names_its_job_and_where_its_run_goes() {
        let vars = env(&[
            ("SLURM_JOB_ID", "41"),
            ("ENVIRONMENT", "BATCH"),
            ("SLURM_ARRAY_JOB_ID", "40"),
            ("SLURM_ARRAY_TASK_ID", "7"),
            ("SLURM_JOB_USER", "ana"),
            ("SLURM_JOB_PARTITION", "gpu"),
            ("SLURMD_NODENAME", "n1"),
            ("SLURM_PROCID", "0"),
        ]);
        let s = from_env(&vars, Some(&parse_job(RUNNING))).unwrap();
        assert_eq!(s.step_id.as_deref(), Some("batch"));
        // The task's own variable wins over scontrol's (the same job either way).
        assert_eq!(s.partition.as_deref(), Some("gpu"));
        assert_eq!((s.requested_cpus, s.time_limit_s), (Some(1), Some(300)));
        assert_eq!(
            task_dir(&s),
            Some(("ana".into(), PathBuf::from("41/batch.0")))
        );
        assert_eq!(from_env(&env(&[]), None), None);
        let reserved = env(&[("SLURM_JOB_ID", "41"), ("SLURM_STEP_ID", "4294967291")]);
        assert_eq!(
            from_env(&reserved, None).unwrap().step_id.as_deref(),
            Some("extern")
        );

        let plain = from_env(
            &env(&[
                ("SLURM_JOB_ID", "9"),
                ("SLURM_STEP_ID", "2"),
                ("SLURM_PROCID", "3"),
                ("SLURM_JOB_USER", "bo"),
            ]),
            None,
        )
        .unwrap();
        assert_eq!(task_dir(&plain).unwrap().1, PathBuf::from("9/2.3"));
        for user in ["..", "a/b", ".hidden", ""] {
            let climbing = Slurm {
                user: Some(user.into()),
                ..plain.clone()
            };
            assert_eq!(task_dir(&climbing), None, "{user:?}");
        }
    }
}
