//! Who, where, what: the context a run records about itself so that runs from many machines
//! form one dataset (run.json `run_id`, `labels`, `context`). Pure: the environment, files' text
//! and git's answers come in as arguments; [`gather`] is the thin edge that reads them.
use std::collections::BTreeMap;

pub use crate::store::model::{Ci, Context, Git, Kubernetes, Slurm};

/// What [`Context::build`] reads, gathered by [`gather`] (or made by tests).
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    pub host: String,
    pub kernel: String,
    pub env: BTreeMap<String, String>,
    /// /proc/cpuinfo, /proc/meminfo, /proc/self/cgroup, the service account's namespace file.
    pub cpuinfo: String,
    pub meminfo: String,
    pub cgroup: String,
    pub k8s_namespace_file: Option<String>,
    pub cpus: usize,
    pub git: Option<Git>,
    /// What `scontrol show job` said the job asked for, inside a Slurm job.
    pub slurm_job: Option<crate::fleet::slurm::JobRequest>,
}

impl Context {
    pub fn build(i: &Inputs) -> Context {
        Context {
            host: i.host.clone(),
            kernel: i.kernel.clone(),
            cpu_model: cpu_model(&i.cpuinfo),
            cpus: i.cpus,
            memory_bytes: crate::sampling::capacity::mem_total(&i.meminfo),
            git: i.git.clone(),
            ci: ci(&i.env),
            slurm: crate::fleet::slurm::from_env(&i.env, i.slurm_job.as_ref()),
            kubernetes: kubernetes(&i.env, &i.cgroup, i.k8s_namespace_file.as_deref()),
        }
    }
}

fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "model name").then(|| value.trim().to_string())
    })
}

fn ci(env: &BTreeMap<String, String>) -> Option<Ci> {
    let get = |key: &str| env.get(key).filter(|v| !v.is_empty()).cloned();
    if get("GITHUB_ACTIONS").as_deref() == Some("true") {
        let server = get("GITHUB_SERVER_URL").unwrap_or_else(|| "https://github.com".into());
        let url = match (get("GITHUB_REPOSITORY"), get("GITHUB_RUN_ID")) {
            (Some(repo), Some(run)) => Some(format!("{server}/{repo}/actions/runs/{run}")),
            _ => None,
        };
        return Some(Ci {
            system: "github".into(),
            repository: get("GITHUB_REPOSITORY"),
            pipeline: get("GITHUB_RUN_ID"),
            job: get("GITHUB_JOB"),
            commit: get("GITHUB_SHA"),
            branch: get("GITHUB_HEAD_REF").or_else(|| get("GITHUB_REF_NAME")),
            url,
        });
    }
    if get("GITLAB_CI").as_deref() == Some("true") {
        return Some(Ci {
            system: "gitlab".into(),
            repository: get("CI_PROJECT_PATH"),
            pipeline: get("CI_PIPELINE_ID"),
            job: get("CI_JOB_ID"),
            commit: get("CI_COMMIT_SHA"),
            branch: get("CI_COMMIT_REF_NAME"),
            url: get("CI_JOB_URL"),
        });
    }
    if get("BUILDKITE").as_deref() == Some("true") {
        return Some(Ci {
            system: "buildkite".into(),
            repository: get("BUILDKITE_PIPELINE_SLUG"),
            pipeline: get("BUILDKITE_BUILD_NUMBER"),
            job: get("BUILDKITE_JOB_ID"),
            commit: get("BUILDKITE_COMMIT"),
            branch: get("BUILDKITE_BRANCH"),
            url: get("BUILDKITE_BUILD_URL"),
        });
    }
    if get("JENKINS_URL").is_some() {
        return Some(Ci {
            system: "jenkins".into(),
            repository: get("JOB_NAME"),
            pipeline: get("BUILD_NUMBER"),
            job: get("BUILD_TAG"),
            commit: get("GIT_COMMIT"),
            branch: get("GIT_BRANCH").or_else(|| get("BRANCH_NAME")),
            url: get("BUILD_URL"),
        });
    }
    None
}

/// A pod: the service environment Kubernetes injects, or a kubepods cgroup path.
fn kubernetes(
    env: &BTreeMap<String, String>,
    cgroup: &str,
    namespace_file: Option<&str>,
) -> Option<Kubernetes> {
    let pod_uid = cgroup.lines().find_map(pod_uid_of);
    let container_id = cgroup.lines().find_map(container_id_of);
    let in_pod = env.contains_key("KUBERNETES_SERVICE_HOST") || pod_uid.is_some();
    if !in_pod {
        return None;
    }
    let get = |key: &str| env.get(key).filter(|v| !v.is_empty()).cloned();
    Some(Kubernetes {
        namespace: get("POD_NAMESPACE").or_else(|| {
            namespace_file
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty())
        }),
        pod: get("POD_NAME").or_else(|| get("HOSTNAME")),
        pod_uid,
        container_id,
    })
}

/// The pod uid in one /proc/self/cgroup line: `pod<uid>` (cgroupfs, dashes) or
/// `kubepods-...-pod<uid>.slice` (systemd, underscores for dashes).
fn pod_uid_of(line: &str) -> Option<String> {
    kubepods_path(line)?.split('/').find_map(pod_segment_uid)
}

/// The cgroup path of one /proc/self/cgroup line, when it is a pod's.
fn kubepods_path(line: &str) -> Option<&str> {
    let path = line.splitn(3, ':').nth(2)?;
    path.contains("kubepods").then_some(path)
}

/// The pod uid a path segment names, if it is the pod's own.
fn pod_segment_uid(part: &str) -> Option<String> {
    let part = part.strip_suffix(".slice").unwrap_or(part);
    let uid = part
        .rsplit_once("-pod")
        .map(|(_, u)| u)
        .or_else(|| part.strip_prefix("pod"))?;
    let uid = uid.replace('_', "-");
    (uid.len() == 36 && uid.chars().all(|c| c.is_ascii_hexdigit() || c == '-')).then_some(uid)
}

/// The container id in one /proc/self/cgroup line of a pod: the 64 hex digits of the segment
/// after the pod's, bare (cgroupfs) or as `<runtime>-<id>.scope` (systemd: `cri-containerd`,
/// `crio`, `docker`). A runtime's own process (`crio-conmon-<id>.scope`) is not a container.
fn container_id_of(line: &str) -> Option<String> {
    let mut parts = kubepods_path(line)?
        .split('/')
        .skip_while(|part| pod_segment_uid(part).is_none());
    parts.next()?; // the pod's own segment
    let last = parts.next()?;
    let id = match last.strip_suffix(".scope") {
        None => last,
        Some(unit) => ["cri-containerd-", "crio-", "docker-"]
            .iter()
            .find_map(|runtime| unit.strip_prefix(runtime))?,
    };
    (id.len() == 64 && id.chars().all(|c| c.is_ascii_hexdigit())).then(|| id.to_string())
}

/// `--label KEY=VALUE`: a key of letters, digits, `_`, `-` and `.` (at most 64), a value of at
/// most 256 characters without control characters.
pub fn parse_label(text: &str) -> Result<(String, String), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}`: a label is KEY=VALUE, e.g. --label branch=main"))?;
    if key.is_empty()
        || key.len() > 64
        || !key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err(format!(
            "`{key}`: a label's key is 1 to 64 letters, digits, `_`, `-` or `.`"
        ));
    }
    if value.chars().count() > 256 || value.chars().any(char::is_control) {
        return Err(format!(
            "the value of label `{key}` must be at most 256 characters, without control characters"
        ));
    }
    Ok((key.to_string(), value.to_string()))
}

/// A new run's id: its start (UTC, to the second) and 64 random bits, so that ids sort by time
/// and never collide across machines; safe in a path and a Hive partition value.
pub fn new_run_id(start_unix_ns: i64, random: u64) -> String {
    format!("{}-{random:016x}", crate::units::compact_utc(start_unix_ns))
}

/// One recording's id and context: the id at its start; the machine's facts (a few small files
/// of /proc, the environment) while the command starts ([`Capture::read_machine`]), where the
/// end would wait for them; the checkout's commit and branch, and git's `status` of it, asked
/// once the command has ended (it walks the checkout: beside the command it would take CPU and
/// disk from what is measured), on a thread while montrace closes its tables.
pub struct Capture {
    pub run_id: String,
    as_user: Option<(u32, u32)>,
    /// The machine's facts, once read.
    machine: Option<Inputs>,
    /// The working directory's checkout, once asked: (commit, branch), None outside one.
    checkout: Option<Option<Checkout>>,
    dirty: Option<std::thread::JoinHandle<Option<bool>>>,
}

/// A checkout's commit and branch, as its git files say (None where they do not).
type Checkout = (Option<String>, Option<String>);

impl Capture {
    pub fn start(started_wall_ns: i64, as_user: Option<(u32, u32)>) -> Capture {
        let mut random = [0u8; 8];
        // SAFETY: a valid buffer of its length; getrandom fills it (or fails, leaving zeros,
        // and the time part still orders the id).
        unsafe { libc::getrandom(random.as_mut_ptr().cast(), random.len(), 0) };
        Capture {
            run_id: new_run_id(started_wall_ns, u64::from_le_bytes(random)),
            as_user,
            machine: None,
            checkout: None,
            dirty: None,
        }
    }

    /// Reads the machine's facts now (`run` and `attach` call it as following begins, while the
    /// command starts), not at the end: 0.1 ms of a `/bin/true` run's end.
    pub fn read_machine(&mut self) {
        if self.machine.is_none() {
            self.machine = Some(machine_inputs());
        }
    }

    /// The command and its tree are done (nothing reaps montrace's children any more): read the
    /// checkout's files, and ask git only where there is a checkout (starting git elsewhere
    /// cost every run a process and milliseconds, to hear "not a git repository").
    pub fn command_ended(&mut self) {
        if self.checkout.is_some() {
            return;
        }
        let checkout = std::env::current_dir().ok().and_then(|cwd| git_of(&cwd));
        if checkout.is_some() {
            self.dirty = Some(dirty_check(self.as_user));
        }
        self.checkout = Some(checkout);
    }

    pub fn finish(mut self) -> (String, Context) {
        self.command_ended();
        let dirty = self.dirty.and_then(|thread| thread.join().ok().flatten());
        let git = self.checkout.flatten().map(|(commit, branch)| Git {
            commit,
            branch,
            dirty,
        });
        let machine = self.machine.take().unwrap_or_else(machine_inputs);
        (self.run_id, gather(machine, git))
    }
}

/// The thin edge: `machine` (see [`machine_inputs`]) with `git`, what [`Capture`] read of the
/// working directory's checkout (as the user: see `userfs`) and what git itself answered, if
/// anything (see [`dirty_check`]), and inside a Slurm job what `scontrol` says of it.
pub fn gather(machine: Inputs, git: Option<Git>) -> Context {
    let slurm_job = machine
        .env
        .get("SLURM_JOB_ID")
        .and_then(|id| crate::fleet::slurm::show_job(id));
    Context::build(&Inputs {
        git,
        slurm_job,
        ..machine
    })
}

/// Reads the environment, /proc and the service-account file: everything [`Context::build`]
/// reads but the checkout and the Slurm job.
fn machine_inputs() -> Inputs {
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
    let (host, kernel) = crate::host::uname();
    let read = |path: &str| crate::host::read_small_file(path).unwrap_or_default();
    Inputs {
        host,
        kernel,
        env: std::env::vars().collect(),
        // The first processor's lines name the model; the kernel makes the file as it is read,
        // and the whole of it costs a read of every CPU's frequency (milliseconds on a machine
        // of a hundred CPUs, at the end of every run).
        cpuinfo: read_start("/proc/cpuinfo", 16 * 1024),
        meminfo: read("/proc/meminfo"),
        cgroup: read("/proc/self/cgroup"),
        k8s_namespace_file: std::fs::read_to_string(
            "/var/run/secrets/kubernetes.io/serviceaccount/namespace",
        )
        .ok(),
        cpus,
        git: None,
        slurm_job: None,
    }
}

/// The first `limit` bytes of `path` (all of a shorter file), lossily as text; empty when it
/// cannot be read.
fn read_start(path: &str, limit: usize) -> String {
    let bytes = crate::host::read_start(path, limit).unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// What HEAD names.
#[derive(Debug, PartialEq)]
enum Head {
    Branch(String),
    Detached(String),
}

fn parse_head(text: &str) -> Option<Head> {
    let text = text.trim();
    match text.strip_prefix("ref: ") {
        Some(r) => Some(Head::Branch(r.trim().to_string())),
        None if text.len() >= 40 && text.chars().all(|c| c.is_ascii_hexdigit()) => {
            Some(Head::Detached(text.to_string()))
        }
        None => None,
    }
}

/// A ref's commit in a `packed-refs` file.
fn packed_ref(text: &str, name: &str) -> Option<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('^'))
        .find_map(|l| {
            let (sha, r) = l.split_once(' ')?;
            (r.trim() == name).then(|| sha.to_string())
        })
}

/// The commit and branch of the checkout holding `dir`, read from its git files with the
/// user's identity (montrace never runs git as root over a user's checkout: its config could run
/// commands). (None, None) parts where the files do not say.
fn git_of(dir: &std::path::Path) -> Option<Checkout> {
    let read =
        |p: &std::path::Path| crate::store::userfs::as_user(|| std::fs::read_to_string(p)).ok();
    // The nearest `.git`: a directory, or a file `gitdir: PATH` (worktrees, submodules).
    let (git_dir, _) = dir.ancestors().find_map(|d| {
        let dot = d.join(".git");
        if let Some(text) = read(&dot) {
            let target = text.trim().strip_prefix("gitdir: ")?.to_string();
            return Some((d.join(target), d.to_path_buf()));
        }
        crate::store::userfs::as_user(|| std::fs::metadata(dot.join("HEAD")))
            .ok()
            .map(|_| (dot, d.to_path_buf()))
    })?;
    // A worktree's refs live in the common directory.
    let common = read(&git_dir.join("commondir"))
        .map(|c| git_dir.join(c.trim()))
        .unwrap_or_else(|| git_dir.clone());
    match parse_head(&read(&git_dir.join("HEAD"))?)? {
        Head::Detached(sha) => Some((Some(sha), None)),
        Head::Branch(name) => {
            let commit = read(&common.join(&name))
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .or_else(|| packed_ref(&read(&common.join("packed-refs"))?, &name));
            let branch = name
                .strip_prefix("refs/heads/")
                .unwrap_or(&name)
                .to_string();
            Some((commit, Some(branch)))
        }
    }
}

/// Runs `cmd` (no stdin, stderr dropped, its stdout read on a thread of its own so that a full
/// pipe cannot hold it), waiting at most `limit`: its status and stdout, or None when it could
/// not start or took longer (it is then killed). git's status and scontrol's answer go through
/// it.
pub(crate) fn output_within(
    cmd: &mut std::process::Command,
    limit: std::time::Duration,
) -> Option<(std::process::ExitStatus, Vec<u8>)> {
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdout = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut text).map(|_| text)
    });
    let Some(status) = wait_within(&mut child, limit) else {
        let _ = child.kill();
        let _ = child.wait();
        return None;
    };
    Some((status, reader.join().ok()?.ok()?))
}

/// `child`'s exit status once it exits, or None when it has not within `limit` (or cannot be
/// waited for). It waits on a pidfd, which wakes at the exit: sleeping in steps of 5 ms added
/// 2.5 ms to every run on average (end of the run, git's status); 1 ms steps where pidfds are
/// missing (before Linux 5.3).
fn wait_within(
    child: &mut std::process::Child,
    limit: std::time::Duration,
) -> Option<std::process::ExitStatus> {
    use std::os::fd::AsRawFd as _;
    let deadline = std::time::Instant::now() + limit;
    let pidfd = crate::host::pidfd_open(child.id()).ok();
    loop {
        if let Some(status) = child.try_wait().ok()? {
            return Some(status);
        }
        let left = deadline.checked_duration_since(std::time::Instant::now())?;
        match &pidfd {
            Some(fd) => {
                let mut poll = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                let ms = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
                // SAFETY: one valid pollfd; an interrupted or failed poll loops to try_wait.
                unsafe { libc::poll(&mut poll, 1, ms) };
            }
            None => std::thread::sleep(left.min(std::time::Duration::from_millis(1))),
        }
    }
}

/// Asks `git status` whether tracked files of the working directory's checkout were changed, on
/// a thread, as the user (`as_user`: montrace under sudo; git refuses a checkout its user does
/// not own), within 2 s. Only once the tree is done: the polling fallback reaps every child of
/// montrace's while it follows the tree, git's included.
pub fn dirty_check(as_user: Option<(u32, u32)>) -> std::thread::JoinHandle<Option<bool>> {
    std::thread::spawn(move || {
        let mut cmd = std::process::Command::new("git");
        cmd.args([
            "-c",
            "core.fsmonitor=false",
            "--no-optional-locks",
            "status",
            "--porcelain",
            "--untracked-files=no",
        ])
        .env("GIT_TERMINAL_PROMPT", "0");
        if let Some((uid, gid)) = as_user {
            use std::os::unix::process::CommandExt as _;
            cmd.uid(uid).gid(gid);
        }
        let (status, text) = output_within(&mut cmd, std::time::Duration::from_secs(2))?;
        status.success().then_some(!text.is_empty())
    })
}

/// A context with every part present, for the docs' field checks.
#[cfg(test)]
pub fn full_example() -> Context {
    let some = || Some("x".to_string());
    Context {
        host: "h".into(),
        kernel: "k".into(),
        cpu_model: some(),
        cpus: 1,
        memory_bytes: Some(1),
        git: Some(Git {
            commit: some(),
            branch: some(),
            dirty: Some(false),
        }),
        ci: Some(Ci {
            system: "github".into(),
            repository: some(),
            pipeline: some(),
            job: some(),
            commit: some(),
            branch: some(),
            url: some(),
        }),
        slurm: Some(Slurm {
            job_id: some(),
            step_id: some(),
            array_job_id: some(),
            array_task_id: some(),
            cluster: some(),
            user: some(),
            partition: some(),
            account: some(),
            node: some(),
            task_id: some(),
            requested_cpus: Some(1),
            requested_memory_bytes: Some(1),
            time_limit_s: Some(1),
            requested_gpus: Some(1),
        }),
        kubernetes: Some(Kubernetes {
            namespace: some(),
            pod: some(),
            pod_uid: some(),
            container_id: some(),
        }),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An environment of `pairs` (also the Slurm tests').
    pub(crate) fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The start of /proc/cpuinfo names this machine's CPU model, as the whole file does; a
    /// longer file is cut at the limit.
    #[test]
    fn the_start_of_cpuinfo_names_the_model() {
        let whole = std::fs::read_to_string("/proc/cpuinfo").unwrap();
        let start = read_start("/proc/cpuinfo", 16 * 1024);
        assert_eq!(cpu_model(&start), cpu_model(&whole));
        #[cfg(target_arch = "x86_64")]
        assert!(cpu_model(&start).is_some(), "{start}");
        assert_eq!(read_start("/proc/cpuinfo", 10).len(), 10);
        assert_eq!(read_start("/nonexistent", 10), "");
    }

    #[test]
    fn ci_systems_are_told_apart_by_their_variables() {
        let gh = ci(&env(&[
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_REPOSITORY", "acme/app"),
            ("GITHUB_RUN_ID", "42"),
            ("GITHUB_JOB", "build"),
            ("GITHUB_SHA", "abc"),
            ("GITHUB_REF_NAME", "main"),
        ]))
        .unwrap();
        assert_eq!(gh.system, "github");
        assert_eq!(gh.branch.as_deref(), Some("main"));
        assert_eq!(
            gh.url.as_deref(),
            Some("https://github.com/acme/app/actions/runs/42")
        );
        // A pull request's branch is its head.
        let pr = ci(&env(&[
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_HEAD_REF", "feature"),
            ("GITHUB_REF_NAME", "7/merge"),
        ]))
        .unwrap();
        assert_eq!(pr.branch.as_deref(), Some("feature"));
        let gl = ci(&env(&[
            ("GITLAB_CI", "true"),
            ("CI_PROJECT_PATH", "g/p"),
            ("CI_PIPELINE_ID", "9"),
            ("CI_COMMIT_REF_NAME", "dev"),
        ]))
        .unwrap();
        assert_eq!(
            (gl.system.as_str(), gl.pipeline.as_deref()),
            ("gitlab", Some("9"))
        );
        let bk = ci(&env(&[("BUILDKITE", "true"), ("BUILDKITE_BRANCH", "b")])).unwrap();
        assert_eq!(bk.system, "buildkite");
        let jk = ci(&env(&[("JENKINS_URL", "http://j/"), ("BUILD_NUMBER", "3")])).unwrap();
        assert_eq!(
            (jk.system.as_str(), jk.pipeline.as_deref()),
            ("jenkins", Some("3"))
        );
        assert_eq!(
            ci(&env(&[("CI", "true")])),
            None,
            "an unknown CI says nothing"
        );
    }

    #[test]
    fn slurm_and_kubernetes_from_environment_and_cgroup() {
        let s = crate::fleet::slurm::from_env(
            &env(&[
                ("SLURM_JOB_ID", "1234"),
                ("SLURM_STEP_ID", "0"),
                ("SLURM_ARRAY_JOB_ID", "1200"),
                ("SLURM_ARRAY_TASK_ID", "34"),
            ]),
            None,
        )
        .unwrap();
        assert_eq!(
            (s.job_id.as_deref(), s.array_task_id.as_deref()),
            (Some("1234"), Some("34"))
        );
        assert_eq!(crate::fleet::slurm::from_env(&env(&[]), None), None);

        let cgroupfs = "0::/kubepods/burstable/pod3f5e1c2a-1b2c-4d5e-8f90-0123456789ab/abcdef\n";
        let k = kubernetes(
            &env(&[
                ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
                ("HOSTNAME", "web-7f9"),
            ]),
            cgroupfs,
            Some("prod\n"),
        )
        .unwrap();
        assert_eq!(k.namespace.as_deref(), Some("prod"));
        assert_eq!(k.pod.as_deref(), Some("web-7f9"));
        assert_eq!(
            k.pod_uid.as_deref(),
            Some("3f5e1c2a-1b2c-4d5e-8f90-0123456789ab")
        );
        let systemd = "0::/kubepods.slice/kubepods-burstable.slice/\
             kubepods-burstable-pod3f5e1c2a_1b2c_4d5e_8f90_0123456789ab.slice/cri-containerd-1.scope\n";
        assert_eq!(
            pod_uid_of(systemd.trim()).as_deref(),
            Some("3f5e1c2a-1b2c-4d5e-8f90-0123456789ab")
        );
        assert_eq!(kubernetes(&env(&[]), "0::/user.slice\n", None), None);
    }

    #[test]
    fn a_pods_container_id_from_either_cgroup_driver() {
        let id = "6f1d9b0c2e7a4a8b9c0d1e2f3a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d";
        let pod = "3f5e1c2a-1b2c-4d5e-8f90-0123456789ab";
        let systemd_pod = "kubepods-burstable-pod3f5e1c2a_1b2c_4d5e_8f90_0123456789ab.slice";
        for line in [
            format!("0::/kubepods/burstable/pod{pod}/{id}"),
            format!("12:memory:/kubepods/besteffort/pod{pod}/{id}"),
            format!("0::/kubepods.slice/kubepods-burstable.slice/{systemd_pod}/cri-containerd-{id}.scope"),
            format!("0::/kubepods.slice/kubepods-burstable.slice/{systemd_pod}/crio-{id}.scope"),
            format!("0::/kubepods.slice/{systemd_pod}/docker-{id}.scope"),
        ] {
            assert_eq!(container_id_of(&line).as_deref(), Some(id), "{line}");
            let k = kubernetes(&env(&[]), &line, None).unwrap();
            assert_eq!((k.pod_uid.as_deref(), k.container_id.as_deref()), (Some(pod), Some(id)));
        }
        for line in [
            format!("0::/kubepods/burstable/pod{pod}"), // the pod itself
            format!("0::/kubepods.slice/{systemd_pod}/crio-conmon-{id}.scope"), // the runtime's monitor
            format!("0::/kubepods/burstable/pod{pod}/{}", &id[..12]),           // not a whole id
            format!("0::/system.slice/docker-{id}.scope"), // a container, not a pod's
            "0::/user.slice/user-1000.slice/session-2.scope".to_string(),
        ] {
            assert_eq!(container_id_of(&line), None, "{line}");
        }
    }

    #[test]
    fn the_machine_from_proc() {
        let i = Inputs {
            host: "ci-7".into(),
            kernel: "6.18".into(),
            cpuinfo: "processor\t: 0\nmodel name\t: AMD EPYC 7B13\n".into(),
            meminfo: "MemTotal:       24684132 kB\n".into(),
            cpus: 2,
            ..Inputs::default()
        };
        let c = Context::build(&i);
        assert_eq!(c.cpu_model.as_deref(), Some("AMD EPYC 7B13"));
        assert_eq!(c.memory_bytes, Some(24_684_132 * 1024));
        assert_eq!((c.host.as_str(), c.cpus), ("ci-7", 2));
    }

    #[test]
    fn a_command_is_waited_for_within_its_limit_and_killed_past_it() {
        use std::process::Command;
        let mut quick = Command::new("sh").args(["-c", "exit 3"]).spawn().unwrap();
        let status = wait_within(&mut quick, std::time::Duration::from_secs(30)).unwrap();
        assert_eq!(status.code(), Some(3));
        // Past the limit: no status (output_within then kills it), and the child still there.
        let mut slow = Command::new("sleep").arg("30").spawn().unwrap();
        assert_eq!(
            wait_within(&mut slow, std::time::Duration::from_millis(50)),
            None
        );
        assert_eq!(slow.try_wait().unwrap(), None);
        slow.kill().unwrap();
        slow.wait().unwrap();
        // output_within gives what it printed, and nothing for one that outlives its limit.
        let (status, out) = output_within(
            Command::new("sh").args(["-c", "echo hello"]),
            std::time::Duration::from_secs(30),
        )
        .unwrap();
        assert!(status.success());
        assert_eq!(out, b"hello\n");
        assert_eq!(
            output_within(
                Command::new("sleep").arg("30"),
                std::time::Duration::from_millis(50)
            ),
            None
        );
    }

    #[test]
    fn heads_and_packed_refs() {
        assert_eq!(
            parse_head("ref: refs/heads/main\n"),
            Some(Head::Branch("refs/heads/main".into()))
        );
        let sha = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(parse_head(sha), Some(Head::Detached(sha.into())));
        assert_eq!(parse_head("garbage"), None);
        let packed = format!("# pack-refs with: peeled\n{sha} refs/heads/main\n^{sha}\n");
        assert_eq!(packed_ref(&packed, "refs/heads/main").as_deref(), Some(sha));
        assert_eq!(packed_ref(&packed, "refs/heads/dev"), None);
    }

    #[test]
    fn a_checkout_is_read_from_its_files() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path();
        let sha = "89abcdef0123456789abcdef0123456789abcdef";
        std::fs::create_dir_all(repo.join(".git/refs/heads")).unwrap();
        std::fs::write(repo.join(".git/HEAD"), "ref: refs/heads/feature/x\n").unwrap();
        std::fs::create_dir_all(repo.join(".git/refs/heads/feature")).unwrap();
        std::fs::write(repo.join(".git/refs/heads/feature/x"), format!("{sha}\n")).unwrap();
        std::fs::create_dir_all(repo.join("src/deep")).unwrap();
        assert_eq!(
            git_of(&repo.join("src/deep")),
            Some((Some(sha.to_string()), Some("feature/x".to_string())))
        );
        // A branch only in packed-refs; a worktree's `.git` file.
        std::fs::remove_file(repo.join(".git/refs/heads/feature/x")).unwrap();
        std::fs::write(
            repo.join(".git/packed-refs"),
            format!("{sha} refs/heads/feature/x\n"),
        )
        .unwrap();
        assert_eq!(git_of(repo).unwrap().0.as_deref(), Some(sha));
        let wt = tmp.path().join("wt");
        std::fs::create_dir_all(repo.join(".git/worktrees/wt")).unwrap();
        std::fs::write(repo.join(".git/worktrees/wt/HEAD"), sha).unwrap();
        std::fs::write(repo.join(".git/worktrees/wt/commondir"), "../..").unwrap();
        std::fs::create_dir_all(&wt).unwrap();
        std::fs::write(
            wt.join(".git"),
            format!("gitdir: {}\n", repo.join(".git/worktrees/wt").display()),
        )
        .unwrap();
        assert_eq!(git_of(&wt), Some((Some(sha.to_string()), None)));
        let outside = tempfile::tempdir().unwrap();
        assert_eq!(git_of(outside.path()), None);
    }

    #[test]
    fn labels_are_checked() {
        assert_eq!(
            parse_label("branch=main").unwrap(),
            ("branch".into(), "main".into())
        );
        assert_eq!(parse_label("k=a=b").unwrap().1, "a=b");
        assert_eq!(parse_label("empty=").unwrap().1, "");
        for bad in [
            "novalue",
            "=x",
            "sp ace=1",
            "k=line\nbreak",
            &format!("{}=1", "k".repeat(65)),
        ] {
            assert!(parse_label(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn run_ids_sort_by_time_and_fit_a_path() {
        let a = new_run_id(1_795_513_066_751_269_947, 0xdead_beef);
        assert_eq!(a, "20261124T093746Z-00000000deadbeef");
        let b = new_run_id(1_795_513_067_000_000_000, 1);
        assert!(a < b);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
    }
}
