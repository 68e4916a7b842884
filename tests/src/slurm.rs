//! A real single-node Slurm cluster for the tests (issue 34): Debian's munged, slurmctld and
//! slurmd on 127.0.0.1, configured in a directory of their own, with montrace's SPANK plugin
//! (dist/slurm/montrace_spank.c, compiled here) and a node agent (`montrace agent`), so that
//! every task of every job becomes a montrace run under `jobs/`.
//!
//! Nothing of the machine's own Slurm set-up is used or touched: the daemons read the
//! configuration this fixture writes (SLURM_CONF), on ports the kernel picked free, and stop
//! when the fixture is dropped.
use std::{
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crate::{agent::Agent, montrace_bin, require_root, run_timeout, users::TestUser};

pub struct Cluster {
    pub dir: PathBuf,
    /// The site's directory for job runs (mode 1777, as docs/cluster.md sets it up).
    pub jobs: PathBuf,
    /// The dataset Slurm's Epilog (`montrace slurm epilog`) publishes each ended job's runs into.
    pub dataset: PathBuf,
    pub conf: PathBuf,
    pub agent: Agent,
    daemons: Vec<Child>,
}

/// What the cluster is configured with beyond its defaults.
#[derive(Default)]
pub struct Options {
    /// Whether the plugin is in plugstack.conf (without it, jobs run as Slurm alone runs them).
    pub without_plugin: bool,
    /// Whether the epilog times itself (for the cost per job, `cargo xtask bench --only slurm`):
    /// each run appends a line to [`Cluster::epilog_times`].
    pub time_epilog: bool,
    /// Whether Slurm keeps accounting, as sites do: slurmdbd on a MariaDB of the fixture's own,
    /// `sacct` answering, and jobacct_gather sampling each task at Slurm's default period (30 s).
    pub accounting: bool,
}

/// One run of the epilog, timed by the shell that runs it.
#[derive(Debug, Clone, PartialEq)]
pub struct EpilogTime {
    pub job: u32,
    /// When it started (the job's end, on the node), ns since the epoch.
    pub start_ns: u64,
    pub wall_s: f64,
    /// CPU of the epilog's processes (montrace slurm epilog and what it ran), user and system.
    pub user_s: f64,
    pub system_s: f64,
}

impl Cluster {
    pub fn start() -> Cluster {
        Cluster::start_with(Options::default())
    }

    pub fn start_with(options: Options) -> Cluster {
        require_root();
        for tool in ["munged", "slurmctld", "slurmd", "sbatch", "cc"] {
            assert!(
                which(tool),
                "{tool} is not installed: `cargo xtask setup` installs Slurm (slurm-wlm, munge, \
                 libslurm-dev)"
            );
        }
        let agent = Agent::start();
        let dir = PathBuf::from(format!("/tmp/montrace-slurm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["", "state", "spool", "log", "munge", "bin", "jobs"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let jobs = dir.join("jobs");
        std::fs::set_permissions(&jobs, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let montrace = dir.join("bin/montrace");
        std::fs::copy(montrace_bin(), &montrace).unwrap();
        std::fs::set_permissions(dir.join("bin"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let plugin = compile_plugin(&dir);

        let munge_dir = dir.join("munge");
        let key = munge_dir.join("munge.key");
        std::fs::write(&key, random_bytes(1024)).unwrap();
        chown_to_munge(&munge_dir);
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).unwrap();
        let socket = munge_dir.join("munge.socket");
        let munged = Command::new("runuser")
            .args(["-u", "munge", "--", "munged", "--foreground", "--force"])
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--key-file={}", key.display()))
            .arg(format!(
                "--pid-file={}",
                munge_dir.join("munged.pid").display()
            ))
            .arg(format!(
                "--log-file={}",
                munge_dir.join("munged.log").display()
            ))
            .arg(format!("--seed-file={}", munge_dir.join("seed").display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting munged");
        wait_for(&socket, "munged made no socket");

        let dataset = dir.join("dataset");
        let epilog = dir.join("epilog");
        let publish = format!(
            "{} slurm epilog --dir {} --dataset {} >>{}/log/epilog.log 2>&1",
            montrace.display(),
            jobs.display(),
            dataset.display(),
            dir.display()
        );
        let script = if options.time_epilog {
            // `times`' second line: the CPU of the shell's children (montrace and its own), as
            // `0m0.012000s 0m0.004000s`; run by this shell (in a pipe, a subshell would answer).
            format!(
                "#!/bin/sh\nstart=$(date +%s%N)\n{publish}\nrc=$?\nend=$(date +%s%N)\n\
                 times >{d}/log/epilog.$$\n\
                 echo \"$SLURM_JOB_ID $start $end $(tail -n 1 {d}/log/epilog.$$)\" >>{d}/log/epilog.times\n\
                 rm -f {d}/log/epilog.$$\nexit $rc\n",
                d = dir.display()
            )
        } else {
            format!("#!/bin/sh\nexec {publish}\n")
        };
        std::fs::write(&epilog, script).unwrap();
        std::fs::set_permissions(&epilog, std::fs::Permissions::from_mode(0o755)).unwrap();
        let conf = dir.join("slurm.conf");
        let mut slurm_conf = slurm_conf(&dir, &socket);
        let mut daemons = vec![munged];
        if options.accounting {
            let (dbd_port, started) = start_accounting(&dir, &socket);
            daemons.extend(started);
            slurm_conf = slurm_conf
                .replace(
                    "AccountingStorageType=accounting_storage/none\n",
                    &format!(
                        "AccountingStorageType=accounting_storage/slurmdbd\n\
                         AccountingStorageHost=127.0.0.1\nAccountingStoragePort={dbd_port}\n\
                         AccountingStoragePass={}\n",
                        socket.display()
                    ),
                )
                .replace(
                    "JobAcctGatherFrequency=task=1",
                    "JobAcctGatherFrequency=task=30",
                );
        }
        std::fs::write(&conf, slurm_conf).unwrap();
        std::fs::write(dir.join("cgroup.conf"), cgroup_conf()).unwrap();
        let plugstack = if options.without_plugin {
            String::new()
        } else {
            format!(
                "required {} montrace={} dir={} agent={}\n",
                plugin.display(),
                montrace.display(),
                jobs.display(),
                agent.socket.display()
            )
        };
        std::fs::write(dir.join("plugstack.conf"), plugstack).unwrap();

        for (daemon, args) in [("slurmctld", &["-D", "-i"][..]), ("slurmd", &["-D"][..])] {
            daemons.push(
                Command::new(daemon)
                    .args(args)
                    .env("SLURM_CONF", &conf)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap_or_else(|e| panic!("starting {daemon}: {e}")),
            );
        }
        let cluster = Cluster {
            dir,
            jobs,
            dataset,
            conf,
            agent,
            daemons,
        };
        cluster.wait_until_idle();
        cluster
    }

    /// A Slurm client command (sbatch, srun, scontrol, ...) as `user`, against this cluster.
    pub fn command(&self, user: &TestUser, program: &str) -> Command {
        let mut cmd = user.command(program);
        cmd.current_dir(&user.home)
            .env_clear()
            .env("HOME", &user.home)
            .env("USER", &user.name)
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("SLURM_CONF", &self.conf);
        cmd
    }

    /// `sbatch --wait ARGS --wrap SCRIPT` as `user`: the job's id once it has ended.
    pub fn sbatch(&self, user: &TestUser, args: &[&str], script: &str) -> (u32, crate::Finished) {
        let mut cmd = self.command(user, "sbatch");
        cmd.arg("--wait")
            .arg("--parsable")
            .args(args)
            .args(["--wrap", script]);
        let done = crate::run_with_timeout(&mut cmd, run_timeout() * 4);
        let id = done
            .stdout
            .trim()
            .split(';')
            .next()
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(|| panic!("sbatch gave no job id: {done:?}\n{}", self.logs()));
        (id, done)
    }

    /// The run directories the plugin wrote for `user`'s job `job` (its id):
    /// `STEP.TASK` name and path.
    pub fn runs_of(&self, user: &TestUser, job: &str) -> Vec<(String, PathBuf)> {
        let dir = self.jobs.join(&user.name).join(job);
        let mut runs: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", dir.display(), self.logs()))
            .map(|e| e.unwrap())
            .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
            .collect();
        runs.sort();
        runs
    }

    /// Waits until the epilogs have published `n` runs (each run's row in the dataset's `runs`
    /// table), at most a minute: the epilog of a job runs after sbatch --wait returns.
    pub fn wait_for_published(&self, n: usize) {
        let deadline = Instant::now() + run_timeout();
        loop {
            let rows = walk(&self.dataset.join("runs"))
                .into_iter()
                .filter(|p| p.file_name().is_some_and(|n| n == "part-0.parquet"))
                .count();
            if rows >= n {
                assert_eq!(rows, n, "more runs published than the jobs made");
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{rows} of {n} runs published\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The epilog's runs so far, each timed by its shell ([`Options::time_epilog`]).
    pub fn epilog_times(&self) -> Vec<EpilogTime> {
        let text = std::fs::read_to_string(self.dir.join("log/epilog.times")).unwrap_or_default();
        text.lines()
            .map(|line| parse_epilog_time(line).unwrap_or_else(|| panic!("epilog.times: {line:?}")))
            .collect()
    }

    /// `sacct -P` for job `job` ([`Options::accounting`]): each line (the job, then its steps)
    /// as `FIELD → value`, once slurmctld has sent the batch step's end to slurmdbd (at most a
    /// minute after the job ended).
    pub fn sacct(
        &self,
        job: u32,
        fields: &[&str],
    ) -> Vec<std::collections::BTreeMap<String, String>> {
        let deadline = Instant::now() + run_timeout();
        loop {
            let out = Command::new("sacct")
                .args(["-n", "-P", "-j", &job.to_string(), "-o"])
                .arg(format!("JobID,State,{}", fields.join(",")))
                .env("SLURM_CONF", &self.conf)
                .output()
                .expect("running sacct");
            let text = String::from_utf8_lossy(&out.stdout);
            let lines: Vec<std::collections::BTreeMap<String, String>> = text
                .lines()
                .map(|line| {
                    ["JobID", "State"]
                        .iter()
                        .chain(fields)
                        .map(|f| f.to_string())
                        .zip(line.split('|').map(str::to_string))
                        .collect()
                })
                .collect();
            let batch_done = lines.iter().any(|l| {
                l["JobID"] == format!("{job}.batch")
                    && l["State"] != "RUNNING"
                    && l["State"] != "PENDING"
            });
            if batch_done {
                return lines;
            }
            assert!(
                Instant::now() < deadline,
                "sacct has no ended batch step of job {job}: {text}{}\n{}",
                String::from_utf8_lossy(&out.stderr),
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// The daemons' logs, for a failing test's message.
    pub fn logs(&self) -> String {
        ["slurmctld.log", "slurmd.log", "epilog.log", "slurmdbd.log"]
            .iter()
            .map(|name| {
                let text =
                    std::fs::read_to_string(self.dir.join("log").join(name)).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(30).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- {name} (last lines)\n{}", tail.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn wait_until_idle(&self) {
        let deadline = Instant::now() + run_timeout();
        loop {
            let state = Command::new("sinfo")
                .args(["-h", "-o", "%T"])
                .env("SLURM_CONF", &self.conf)
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_default();
            if state == "idle" {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the node is not idle (sinfo: {state:?})\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// MariaDB (a data directory of the fixture's own, on 127.0.0.1) and slurmdbd on it, both
/// started and answering: slurmdbd's port and the two daemons, MariaDB first. slurmctld adds
/// the cluster to the database itself when it first connects.
fn start_accounting(dir: &Path, munge_socket: &Path) -> (u16, Vec<Child>) {
    for tool in ["mariadbd", "mariadb-install-db", "slurmdbd"] {
        assert!(
            which(tool),
            "{tool} is not installed: `cargo xtask setup` installs slurmdbd and MariaDB \
             (slurmdbd, mariadb-server-core, mariadb-client-core)"
        );
    }
    let db = dir.join("mariadb");
    std::fs::create_dir_all(db.join("data")).unwrap();
    let log = |name: &str| std::fs::File::create(dir.join("log").join(name)).unwrap();
    let installed = Command::new("mariadb-install-db")
        .args(["--no-defaults", "--user=root", "--skip-test-db"])
        .arg("--auth-root-authentication-method=normal")
        .arg(format!("--datadir={}", db.join("data").display()))
        .stdout(log("mariadb-install.log"))
        .stderr(log("mariadb-install.err"))
        .status()
        .expect("running mariadb-install-db");
    assert!(
        installed.success(),
        "mariadb-install-db failed: see {}/log",
        dir.display()
    );
    let port = free_port();
    let socket = db.join("mysql.sock");
    let mariadbd = Command::new("mariadbd")
        .args([
            "--no-defaults",
            "--user=root",
            "--bind-address=127.0.0.1",
            "--skip-log-bin",
        ])
        .arg("--innodb-buffer-pool-size=16M")
        .arg(format!("--datadir={}", db.join("data").display()))
        .arg(format!("--port={port}"))
        .arg(format!("--socket={}", socket.display()))
        .arg(format!("--pid-file={}", db.join("mariadbd.pid").display()))
        .arg(format!(
            "--log-error={}",
            dir.join("log/mariadbd.log").display()
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting mariadbd");
    wait_for(&socket, "mariadbd made no socket");
    let grant = "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm'; \
                 GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';";
    let granted = Command::new("mariadb")
        .args(["--no-defaults", "-u", "root", "-S"])
        .arg(&socket)
        .args(["-e", grant])
        .status()
        .expect("running mariadb");
    assert!(granted.success(), "could not make slurmdbd's database user");
    let dbd_port = free_port();
    let d = dir.display();
    // slurmdbd reads slurmdbd.conf beside SLURM_CONF, and refuses one others may read.
    let dbd_conf = dir.join("slurmdbd.conf");
    std::fs::write(
        &dbd_conf,
        format!(
            "AuthType=auth/munge\nAuthInfo=socket={munge}\n\
             DbdHost=localhost\nDbdAddr=127.0.0.1\nDbdPort={dbd_port}\nSlurmUser=root\n\
             StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\nStoragePort={port}\n\
             StorageUser=slurm\nStoragePass=slurm\nStorageLoc=slurm_acct_db\n\
             LogFile={d}/log/slurmdbd.log\nPidFile={d}/slurmdbd.pid\n",
            munge = munge_socket.display(),
        ),
    )
    .unwrap();
    std::fs::set_permissions(&dbd_conf, std::fs::Permissions::from_mode(0o600)).unwrap();
    let slurmdbd = Command::new("slurmdbd")
        .arg("-D")
        .env("SLURM_CONF", dir.join("slurm.conf"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting slurmdbd");
    // Up once it listens: slurmctld gives up at start when the database does not answer.
    let deadline = Instant::now() + run_timeout();
    while std::net::TcpStream::connect(("127.0.0.1", dbd_port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "slurmdbd does not listen on {dbd_port}: see {d}/log/slurmdbd.log"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    (dbd_port, vec![mariadbd, slurmdbd])
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("scancel")
            .args(["--full", "--state=RUNNING"])
            .env("SLURM_CONF", &self.conf)
            .output();
        // slurmd, slurmctld, then munged (they still talk to it while stopping).
        for mut daemon in self.daemons.drain(..).rev() {
            // SAFETY: plain kill(2) of a daemon this fixture started.
            unsafe { libc::kill(daemon.id() as libc::pid_t, libc::SIGTERM) };
            let _ = daemon.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `JOB START_NS END_NS 0mU.UUs 0mS.SSs`, a line of the timed epilog.
fn parse_epilog_time(line: &str) -> Option<EpilogTime> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [job, start, end, user, system] = fields[..] else {
        return None;
    };
    let ns = |s: &str| s.parse::<u64>().ok();
    // `times` prints minutes and seconds: `1m2.500000s`.
    let minsec = |s: &str| -> Option<f64> {
        let (m, s) = s.strip_suffix('s')?.split_once('m')?;
        Some(m.parse::<f64>().ok()? * 60.0 + s.parse::<f64>().ok()?)
    };
    Some(EpilogTime {
        job: job.parse().ok()?,
        start_ns: ns(start)?,
        wall_s: ns(end)?.checked_sub(ns(start)?)? as f64 / 1e9,
        user_s: minsec(user)?,
        system_s: minsec(system)?,
    })
}

/// Every file under `dir` (none when it does not exist).
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .flat_map(|e| {
            let path = e.path();
            if path.is_dir() {
                walk(&path)
            } else {
                vec![path]
            }
        })
        .collect()
}

fn which(tool: &str) -> bool {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .any(|dir| dir.join(tool).is_file())
}

fn wait_for(path: &Path, what: &str) {
    let deadline = Instant::now() + run_timeout();
    while !path.exists() {
        assert!(Instant::now() < deadline, "{what}: {}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn random_bytes(n: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; n];
    // SAFETY: a valid buffer of its length.
    let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), n, 0) };
    assert_eq!(got, n as isize, "getrandom");
    bytes
}

fn chown_to_munge(dir: &Path) {
    let out = Command::new("chown")
        .args(["-R", "munge:munge"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "chown munge: {out:?}");
}

/// The plugin, compiled from the repository's source against Debian's slurm/spank.h.
fn compile_plugin(dir: &Path) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dist/slurm/montrace_spank.c");
    let plugin = dir.join("montrace_spank.so");
    let out = Command::new("cc")
        .args([
            "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o",
        ])
        .arg(&plugin)
        .arg(&source)
        .output()
        .expect("running cc");
    assert!(
        out.status.success(),
        "compiling {}: {}",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
    plugin
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn short_hostname() -> String {
    let out = Command::new("hostname").arg("-s").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// One node (this machine, as 127.0.0.1), one partition; cgroups confine each job's memory
/// (task/cgroup), and the FIFO scheduler starts each job as soon as the node has room.
fn slurm_conf(dir: &Path, munge_socket: &Path) -> String {
    let d = dir.display();
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1);
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let total_mb = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb / 1024)
        .unwrap_or(2048);
    let node = short_hostname();
    format!(
        "ClusterName=montrace\n\
         SlurmctldHost={node}(127.0.0.1)\n\
         SlurmUser=root\nSlurmdUser=root\n\
         SlurmctldPort={ctld}\nSlurmdPort={slurmd}\n\
         AuthType=auth/munge\nCredType=cred/munge\n\
         AuthInfo=socket={munge}\n\
         StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n\
         SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n\
         SlurmctldLogFile={d}/log/slurmctld.log\nSlurmdLogFile={d}/log/slurmd.log\n\
         PlugStackConfig={d}/plugstack.conf\nEpilog={d}/epilog\n\
         ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup\n\
         SchedulerType=sched/builtin\n\
         SchedulerParameters=sched_min_interval=0,batch_sched_delay=0\n\
         SelectType=select/cons_tres\nSelectTypeParameters=CR_Core_Memory\n\
         ReturnToService=2\nMpiDefault=none\n\
         JobAcctGatherType=jobacct_gather/linux\nJobAcctGatherFrequency=task=1\n\
         AccountingStorageType=accounting_storage/none\nJobCompType=jobcomp/none\n\
         NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem} State=UNKNOWN\n\
         PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP\n",
        ctld = free_port(),
        slurmd = free_port(),
        munge = munge_socket.display(),
        mem = total_mb / 2,
    )
}

/// cgroup v2 where the machine has it (without systemd: slurmd makes its own tree), v1 where
/// it has the legacy hierarchies.
fn cgroup_conf() -> String {
    let plugin = if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        "CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\n"
    } else {
        "CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n"
    };
    format!("{plugin}ConstrainRAMSpace=yes\nConstrainSwapSpace=yes\nAllowedSwapSpace=0\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timed_epilogs_line_reads_back() {
        assert_eq!(
            parse_epilog_time("42 1000000000 1250000000 0m0.012000s 1m0.500000s"),
            Some(EpilogTime {
                job: 42,
                start_ns: 1_000_000_000,
                wall_s: 0.25,
                user_s: 0.012,
                system_s: 60.5,
            })
        );
        assert_eq!(parse_epilog_time("42 1000 900 0m0s 0m0s"), None);
        assert_eq!(parse_epilog_time("42 1000 2000 0m0.0s"), None);
    }
}
