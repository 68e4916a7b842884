//! The kernel tier (`cargo xtask test --kernels`, `--kernel NAME`): boots each kernel of
//! [`KERNELS`] in a VM (virtme-ng and qemu: KVM where it works, TCG otherwise) on this machine's
//! root filesystem, and runs inside it `montrace doctor` and an exactness subset of the
//! end-to-end tests ([`SUBSET`]) against the static release build of `cargo xtask dist`. docs/kernels.md is written from what
//! the VMs report ([`render_doc`]), never by hand. `$MONTRACE_KERNEL_TESTS` picks some tests of
//! the subset by name ([`ONLY_VAR`]).
//!
//! Set-up installs the kernels (Debian packages, unpacked into [`CACHE`]), qemu, kmod (virtme-ng
//! runs depmod), a static busybox (its initramfs) and virtme-ng (pip, in a venv of its own).

use crate::util;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A kernel the tier boots: a name for people and `--kernel`, and the Debian package that
/// holds it. Adding a kernel is one entry here, with the features it must give (then `cargo
/// xtask setup`).
pub struct Kernel {
    pub name: &'static str,
    pub package: &'static str,
    /// The rows of `montrace doctor` this kernel must say yes to: a program that stops loading
    /// on it (its verifier's limits are older than this machine's) fails the tier, where runs
    /// would only fall back, quietly, to less.
    pub gives: &'static [&'static str],
}

pub const KERNELS: &[Kernel] = &[
    // Debian 12's own kernel (Amazon Linux 2023 and Container-Optimized OS run 6.1 too). The
    // generic flavour: the -cloud one lacks 9p, and the VM could not mount the root filesystem.
    Kernel {
        name: "debian-12-6.1",
        package: "linux-image-6.1.0-51-amd64",
        gives: &[
            "tree",
            "exit_figures",
            "waits",
            "task_iterator",
            "psi",
            "run_cgroup",
        ],
    },
];

impl Kernel {
    /// The kernel's release (`uname -r`), which names its modules' directory.
    pub fn release(&self) -> &'static str {
        self.package.trim_start_matches("linux-image-")
    }

    /// Where its package is unpacked.
    fn dir(&self) -> PathBuf {
        Path::new(CACHE).join(self.release())
    }

    fn vmlinuz(&self) -> PathBuf {
        self.dir()
            .join("boot")
            .join(format!("vmlinuz-{}", self.release()))
    }

    /// virtme-ng looks for the modules of the kernel it boots under /lib/modules.
    fn modules_link(&self) -> PathBuf {
        Path::new("/lib/modules").join(self.release())
    }
}

/// Where set-up keeps the kernels and virtme-ng's venv.
pub const CACHE: &str = "/opt/montrace-tests/kernels";
/// virtme-ng, pinned: its command line and how it boots are what the tier relies on.
const VIRTME_NG: &str = "virtme-ng==1.42";
/// qemu, depmod and busybox, from apt.
pub const APT_PACKAGES: [&str; 3] = ["qemu-system-x86", "kmod", "busybox-static"];

fn vng() -> PathBuf {
    Path::new(CACHE).join("venv/bin/vng")
}

/// The end-to-end tests run inside each VM: (test file, test). None times anything; each names
/// a behaviour that must hold on every kernel montrace supports.
pub const SUBSET: &[(&str, &str)] = &[
    ("kernel_exactness", "a_loop_of_ten_trues_is_twelve_rows"),
    (
        "kernel_exactness",
        "classic_tracepoints_give_the_same_twelve_rows",
    ),
    ("kernel_exactness", "a_fork_storm_of_n_processes_is_n_rows"),
    ("kernel_exactness", "an_exec_chain_is_one_row"),
    // The run cgroup is cgroup v2 in the VM (as on Debian 12 itself): the command is made in
    // it (clone3), and a sudo user's command still becomes that user.
    ("kernel_exactness", "the_command_starts_in_the_run_cgroup"),
    ("launch", "runs_as_the_invoking_sudo_user"),
    // Waits without timing: the test holds the pipe only once the kernel shows both processes
    // asleep in their calls (/proc/PID/syscall), so their sleep spans the hold however slowly
    // the VM runs. (waits::sleeping_and_waiting_on_a_pipe_count_as_sleep is not here: it
    // relies on `cat` starting within 0.5 s, and loading it from the 9p root took longer.)
    (
        "kernel_exactness",
        "a_reader_on_an_empty_pipe_and_the_shell_waiting_for_it_sleep",
    ),
    (
        "kernel_exactness",
        "exit_cpu_and_peak_match_the_kernels_rusage",
    ),
    ("tracking", "waits_for_a_double_forked_daemon"),
    (
        "short_lived",
        "cpu_of_short_processes_matches_the_kernels_rusage",
    ),
    (
        "attach",
        "attach_follows_the_tree_alive_before_and_the_children_started_after",
    ),
    // The test's user is made inside the VM (see `script`).
    (
        "capabilities",
        "the_granted_binary_tracks_an_ordinary_users_command_exactly",
    ),
    // The fork record's pids in pid namespaces (struct pid's levels, from BTF), through the
    // agent to an ordinary user's run in a namespace of its own.
    (
        "kubernetes",
        "a_run_in_a_pid_namespace_of_its_own_is_exact_in_its_own_pids",
    ),
    // cgroup v2 with a subtree delegated to the test's user (`#[ignore]`d on the host, whose
    // cgroup v1 delegates nothing: the subset runs ignored tests too).
    (
        "capacity",
        "a_users_run_cgroup_below_a_limit_is_used_and_one_beside_it_is_not",
    ),
];

/// `$MONTRACE_KERNEL_TESTS`: only the tests of [`SUBSET`] whose `file::test` contains one of its
/// comma-separated parts run (a quicker boot while working on one of them); docs/kernels.md is
/// then left as it is, and only the chosen tests count.
pub const ONLY_VAR: &str = "MONTRACE_KERNEL_TESTS";

/// The tests of [`SUBSET`] that `only` (see [`ONLY_VAR`]) picks, all of them for None.
pub fn chosen(only: Option<&str>) -> Vec<(&'static str, &'static str)> {
    SUBSET
        .iter()
        .copied()
        .filter(|(file, test)| {
            only.is_none_or(|only| {
                let name = format!("{file}::{test}");
                only.split(',')
                    .map(str::trim)
                    .any(|part| !part.is_empty() && name.contains(part))
            })
        })
        .collect()
}

fn only_tests() -> Option<String> {
    std::env::var(ONLY_VAR)
        .ok()
        .filter(|s| !s.trim().is_empty())
}

// ---- set-up ----

pub fn tools_installed() -> bool {
    [
        "/usr/bin/qemu-system-x86_64",
        "/usr/sbin/depmod",
        "/bin/busybox",
    ]
    .iter()
    .all(|p| Path::new(p).exists())
}

pub fn virtme_installed() -> bool {
    vng().exists()
}

/// virtme-ng in a venv of its own under [`CACHE`].
pub fn install_virtme(verbose: bool) -> Result<()> {
    let venv = Path::new(CACHE).join("venv");
    util::check_quietly(util::as_root("mkdir", &[]).arg("-p").arg(CACHE), verbose)?;
    util::check_quietly(
        util::as_root("python3", &[])
            .arg("-m")
            .arg("venv")
            .arg(&venv),
        verbose,
    )?;
    util::check_quietly(
        util::as_root(venv.join("bin/pip"), &[]).args(["install", "-q", VIRTME_NG]),
        verbose,
    )
}

pub fn kernels_installed() -> bool {
    KERNELS
        .iter()
        .all(|k| k.vmlinuz().exists() && k.modules_link().exists())
}

/// Each kernel of [`KERNELS`]: its package downloaded (`apt-get download`, no install: the
/// machine's own kernel stays) and unpacked into [`CACHE`], its modules linked where virtme-ng
/// looks for them.
pub fn install_kernels(verbose: bool) -> Result<()> {
    let debs = Path::new(CACHE).join("debs");
    util::check_quietly(util::as_root("mkdir", &[]).arg("-p").arg(&debs), verbose)?;
    for k in KERNELS {
        if !k.vmlinuz().exists() {
            util::check_quietly(
                util::as_root("apt-get", &[])
                    .args(["download", "-q", k.package])
                    .current_dir(&debs),
                verbose,
            )
            .with_context(|| format!("apt-get download {}", k.package))?;
            let deb = std::fs::read_dir(&debs)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .find(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(&format!("{}_", k.package)))
                })
                .with_context(|| format!("no .deb of {} in {}", k.package, debs.display()))?;
            util::check_quietly(
                util::as_root("dpkg-deb", &[])
                    .arg("-x")
                    .arg(&deb)
                    .arg(k.dir()),
                verbose,
            )?;
        }
        let link = k.modules_link();
        if !link.exists() {
            let modules = k.dir().join("lib/modules").join(k.release());
            util::check_quietly(
                util::as_root("mkdir", &[]).args(["-p", "/lib/modules"]),
                verbose,
            )?;
            util::check_quietly(
                util::as_root("ln", &[])
                    .arg("-sfn")
                    .arg(&modules)
                    .arg(&link),
                verbose,
            )
            .with_context(|| format!("linking {} to {}", link.display(), modules.display()))?;
        }
    }
    Ok(())
}

// ---- the tier ----

/// What one kernel's VM reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub kernel: String,
    /// `uname -r` inside.
    pub release: String,
    /// The feature rows of `montrace doctor`: (name, available, detail).
    pub features: Vec<(String, bool, String)>,
    /// Each test of the subset and how it went.
    pub tests: Vec<(String, Status)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Pass,
    Fail,
    /// The VM stopped (or ran past its limit) before the test ran.
    NotRun,
}

/// `cargo xtask test --kernels` (all of [`KERNELS`]) or `--kernel NAME`.
pub fn test(only: Option<&str>) -> Result<()> {
    let kernels: Vec<&Kernel> = match only {
        None => KERNELS.iter().collect(),
        Some(name) => {
            let k = KERNELS.iter().find(|k| k.name == name).with_context(|| {
                format!(
                    "no kernel {name} in the tier's list ({})",
                    KERNELS
                        .iter()
                        .map(|k| k.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?;
            vec![k]
        }
    };
    if !util::is_root() {
        bail!(
            "the kernel tier boots VMs on this machine's root filesystem as root: run it as root"
        );
    }
    let picked = only_tests();
    let tests = chosen(picked.as_deref());
    if tests.is_empty() {
        bail!("${ONLY_VAR} picks none of the tier's tests");
    }
    // The release artifact users install (the static binary of `cargo xtask dist`), not the
    // debug build: without KVM the debug build's start-up alone took most of each test's 25 to
    // 50 s, and what users run on these kernels is the release.
    let montrace = crate::dist::build_static(false)?;
    let binaries = test_binaries()?;
    let kvm = kvm_works(kernels[0]);
    let mut outcomes = Vec::new();
    let mut failed = Vec::new();
    let mut stalls = Vec::new();
    for k in &kernels {
        let started = Instant::now();
        eprintln!(
            "\nkernel tier: booting {} ({}, {})",
            k.name,
            k.release(),
            if kvm { "KVM" } else { "TCG, no KVM" }
        );
        let outcome = boot_and_boot_again(
            k,
            &montrace,
            &binaries,
            kvm,
            &tests,
            &mut failed,
            &mut stalls,
        )?;
        for (test, status) in &outcome.tests {
            eprintln!("  {status:?} {test}");
            if *status != Status::Pass {
                failed.push(format!("{}: {test} ({status:?})", k.name));
            }
        }
        for missing in missing_features(k, &outcome.features) {
            eprintln!("  Missing {missing}");
            failed.push(format!("{}: {missing}", k.name));
        }
        print_logs(k, &outcome);
        eprintln!(
            "kernel tier: {} done in {:.0} s (log: {})",
            k.name,
            started.elapsed().as_secs_f64(),
            out_dir(k).join("log").display()
        );
        outcomes.push(outcome);
    }
    if only.is_none() && picked.is_none() {
        write_doc(&outcomes)?;
    }
    for stall in &stalls {
        eprintln!("kernel tier: NOTE: {stall}; its tests ran in a second boot (see above)");
    }
    if !failed.is_empty() {
        bail!(
            "kernel tier: {} failed:\n  {}",
            failed.len(),
            failed.join("\n  ")
        );
    }
    Ok(())
}

/// Boots `k` for `tests`; when that VM stalls or stops early, prints its console's end and boots
/// once more for the tests it did not run (what failed goes to `failed`, the first VM's stall
/// to `stalls`). The outcome of every test.
fn boot_and_boot_again(
    k: &Kernel,
    montrace: &Path,
    binaries: &std::collections::HashMap<String, PathBuf>,
    kvm: bool,
    tests: &[(&'static str, &'static str)],
    failed: &mut Vec<String>,
    stalls: &mut Vec<String>,
) -> Result<Outcome> {
    let booted = boot(k, montrace, binaries, kvm, tests, true);
    Ok(match (booted, last_outcome(k, tests)) {
        (Ok(()), Ok(outcome)) => outcome,
        (Err(err), Ok(outcome)) => {
            // The VM stalled or stopped early (a VM without KVM has stalled for minutes,
            // in the middle of a test that passes on every other boot): its console's end
            // is printed, and the tests it did not run get one more boot. A montrace that
            // stops the kernel stops that one too, and the tier fails.
            let rest = not_run(&outcome, tests);
            let log = out_dir(k).join("log");
            eprintln!(
                "kernel tier: {}: {err:#}; the end of its console ({}):\n{}",
                k.name,
                log.display(),
                tail(&log, 60)
            );
            if rest.is_empty() {
                failed.push(format!("{}: {err:#}", k.name));
                outcome
            } else {
                eprintln!(
                    "kernel tier: booting {} once more for the {} tests the first VM did not run",
                    k.name,
                    rest.len()
                );
                stalls.push(format!("{}: the first VM {err:#}", k.name));
                if let Err(err) = boot(k, montrace, binaries, kvm, &rest, false) {
                    failed.push(format!("{}: the second VM: {err:#}", k.name));
                }
                last_outcome(k, tests)?
            }
        }
        (Ok(()), Err(err)) | (Err(_), Err(err)) => return Err(err),
    })
}

/// The log the VM's script writes for `test` (`file::name`), with `suffix` (`.hung`, `.1`...).
fn test_log(out: &Path, test: &str, suffix: &str) -> PathBuf {
    out.join(format!("{}.log{suffix}", test.replace("::", ".")))
}

/// What a CI log needs to tell why, since target/kernels is gone with the machine: each failed
/// test's log, those of the tests that ran past their limit, and the console's end when the VM
/// stopped before the last test.
fn print_logs(k: &Kernel, outcome: &Outcome) {
    let out = out_dir(k);
    for (test, status) in &outcome.tests {
        if *status == Status::Fail {
            let log = test_log(&out, test, "");
            eprintln!("--- the end of {}:\n{}", log.display(), tail(&log, 60));
        }
    }
    for test in std::fs::read_to_string(out.join("timed-out"))
        .unwrap_or_default()
        .lines()
    {
        let log = test_log(&out, test, "");
        eprintln!(
            "kernel tier: {test} ran past {} s once and was run again (what was running then \
             is in {}):\n{}",
            TEST_LIMIT.as_secs(),
            log.display(),
            tail(&log, 40)
        );
    }
    // A try still running at its limit left what the VM was doing then (a test that cannot be
    // killed holds the script: the VM's limit ends it, and this is all there is).
    for (test, _) in &outcome.tests {
        for hung in ["hung", "hung.1"] {
            let hung = test_log(&out, test, &format!(".{hung}"));
            if !hung.exists() {
                continue;
            }
            eprintln!(
                "--- {} (what ran when {test} passed its limit):\n{}",
                hung.display(),
                tail(&hung, 200)
            );
        }
    }
    if outcome.tests.iter().any(|(_, s)| *s == Status::NotRun) {
        let log = out.join("log");
        eprintln!(
            "--- the end of the VM's console ({}):\n{}",
            log.display(),
            tail(&log, 60)
        );
    }
}

/// The test executables of the `tests` crate, by test file, built now.
fn test_binaries() -> Result<std::collections::HashMap<String, PathBuf>> {
    let output = util::cargo()
        .args(["test", "-p", "tests", "--no-run", "--message-format=json"])
        .stderr(Stdio::inherit())
        .output()
        .context("building the end-to-end tests")?;
    if !output.status.success() {
        bail!("building the end-to-end tests failed");
    }
    let mut binaries = std::collections::HashMap::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        let is_test = msg["target"]["kind"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == "test"));
        if let (true, Some(name), Some(exe)) = (
            is_test,
            msg["target"]["name"].as_str(),
            msg["executable"].as_str(),
        ) {
            binaries.insert(name.to_owned(), PathBuf::from(exe));
        }
    }
    Ok(binaries)
}

/// The tests of `tests` that `outcome` has as not run, in their order.
fn not_run(
    outcome: &Outcome,
    tests: &[(&'static str, &'static str)],
) -> Vec<(&'static str, &'static str)> {
    tests
        .iter()
        .copied()
        .filter(|(file, test)| {
            let name = format!("{file}::{test}");
            outcome
                .tests
                .iter()
                .any(|(t, status)| *t == name && *status == Status::NotRun)
        })
        .collect()
}

/// The last `lines` lines of the file at `path` (what could be read of it).
fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn out_dir(k: &Kernel) -> PathBuf {
    util::target_dir().join("kernels").join(k.name)
}

/// A vng command line for `k`.
fn vng_command(k: &Kernel, kvm: bool) -> Command {
    let mut cmd = Command::new(vng());
    // vng runs virtme-run from its own venv.
    let path = std::env::var_os("PATH").unwrap_or_default();
    let venv_bin = Path::new(CACHE).join("venv/bin");
    cmd.env(
        "PATH",
        std::env::join_paths(std::iter::once(venv_bin).chain(std::env::split_paths(&path)))
            .unwrap_or(path),
    );
    cmd.arg("-r").arg(k.vmlinuz());
    if !kvm {
        // One host thread runs both vCPUs in turn (the guest is still SMP). With a thread per
        // vCPU (qemu's default), a VM froze here and in CI about one boot in five, both vCPUs
        // spinning and nothing on the console (no soft lockup report: interrupts off on both,
        // or a TCG livelock: code patched on one vCPU while the other runs it is how the
        // kernel's jump labels flip when a tracepoint gains or loses its last program). One
        // thread also ran the tier faster on this 2-core machine: 249 s against 349 to 370 s.
        cmd.args(["--disable-kvm", "--qemu-opts=-accel tcg,thread=single"]);
    }
    // Without --verbose, with its output redirected, vng exited 255 with nothing said.
    cmd.args(["--verbose", "--force-9p", "--cpus", "2", "--memory", "2G"]);
    // /etc is an overlay already (virtme-ng's); /home too, for the test users' homes: what the
    // VM writes there stays in the VM.
    cmd.args(["--overlay-rwdir", "/home"]);
    cmd.current_dir(util::workspace_root());
    cmd
}

/// How long one test may run in the VM (the slowest takes about 50 s without KVM here).
const TEST_LIMIT: Duration = Duration::from_secs(240);
/// How long a VM may run in all: every test of [`SUBSET`] near its slowest, and the boot.
const VM_LIMIT: Duration = Duration::from_secs(1200);
/// How long a VM may go without its tests showing progress before it is taken for stalled: a
/// try past its limit leaves a `.hung` file at TEST_LIMIT + 5 s, so only a VM that runs
/// nothing (a kernel stuck on every CPU) stays silent longer.
const STALL_LIMIT: Duration = Duration::from_secs(TEST_LIMIT.as_secs() + 60);

/// Whether qemu boots with KVM here (on some machines /dev/kvm exists and qemu aborts setting
/// up the CPU: `failed to set MSR 0x10a`).
fn kvm_works(k: &Kernel) -> bool {
    if !Path::new("/dev/kvm").exists() {
        return false;
    }
    let mut cmd = vng_command(k, true);
    cmd.args(["--exec", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    run_with_limit(&mut cmd, Duration::from_secs(120)).is_ok_and(|ok| ok)
}

/// Runs `cmd`; false when it failed, an error past `limit` (it is killed).
fn run_with_limit(cmd: &mut Command, limit: Duration) -> Result<bool> {
    let deadline = Instant::now() + limit;
    let past = format!("{} ran past {} s", util::describe(cmd), limit.as_secs());
    let status = supervise(cmd, Duration::from_millis(200), || {
        (Instant::now() > deadline).then(|| past.clone())
    })?;
    Ok(status.success())
}

/// Runs `cmd` as a process group of its own until it ends, asking `stop` every `poll` whether
/// it must be killed, and why: then the whole group is killed and the reason is the error.
fn supervise(
    cmd: &mut Command,
    poll: Duration,
    mut stop: impl FnMut() -> Option<String>,
) -> Result<std::process::ExitStatus> {
    let mut child = spawn_group(cmd)?;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if let Some(why) = stop() {
            kill_group(&mut child);
            bail!(why);
        }
        std::thread::sleep(poll);
    }
}

/// Starts `cmd` (vng) as the leader of a process group of its own, so that [`kill_group`] ends
/// the qemu it starts too.
fn spawn_group(cmd: &mut Command) -> Result<std::process::Child> {
    use std::os::unix::process::CommandExt as _;
    cmd.process_group(0)
        .spawn()
        .with_context(|| util::describe(cmd))
}

/// Kills the process group [`spawn_group`] made and reaps its leader. Killing vng alone left its
/// qemu running: a stalled VM kept both CPUs of this machine busy for an hour after the tier.
fn kill_group(child: &mut std::process::Child) {
    // SAFETY: kill(2) on the process group this tier created for the child.
    unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
    let _ = child.wait();
}

/// The script the VM runs: doctor, then each test of the subset, their output and results under
/// `out` (a directory the VM may write, `--rwdir`).
fn script(
    montrace: &Path,
    binaries: &std::collections::HashMap<String, PathBuf>,
    out: &Path,
    tests: &[(&str, &str)],
) -> Result<String> {
    let q = |p: &Path| format!("'{}'", p.display());
    let mut s = String::from("#!/bin/sh\n");
    s += "# Written by cargo xtask test --kernels; run inside the VM.\n";
    s += "mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null\n";
    // virtme-ng binds a file of its own over /etc/shadow, and useradd's rename of shadow+ onto
    // a mount point fails (EBUSY): without it, the test users go into the /etc overlay.
    s += "umount /etc/shadow 2>/dev/null\n";
    s += &format!("cd {}\n", q(util::workspace_root()));
    s += &format!("export MONTRACE_BIN={}\n", q(montrace));
    // Without KVM everything runs several times slower: the harness's bound on a hung run grows.
    s += "export MONTRACE_TEST_TIMEOUT_SCALE=5\n";
    s += &format!("OUT={}\n", q(out));
    s += "uname -r > \"$OUT/release\"\n";
    s += "\"$MONTRACE_BIN\" doctor > \"$OUT/doctor\" 2>&1\n";
    // One hung test must not take the VM's whole limit and leave the rest not run: each try has
    // TEST_LIMIT. Past it, the test's log gets what was left running and where each process
    // sleeps in the kernel, the montrace processes it left (in process groups of their own,
    // which `timeout` does not signal) are killed, the test is named in `timed-out`, and it runs
    // once more: a VM without KVM has stalled for minutes at a time (soft lockups), and the
    // second try tells such a stall from a montrace that hangs (which hangs again).
    s += &run_one(TEST_LIMIT);
    for (file, test) in tests {
        let exe = binaries
            .get(*file)
            .with_context(|| format!("no test binary for tests/tests/{file}.rs"))?;
        s += &format!("one {file} {test} {}\n", q(exe));
    }
    s += "echo done > \"$OUT/finished\"\n";
    Ok(s)
}

/// The script's `one FILE TEST EXE`: runs a test binary's one test with `limit` a try, at most
/// two tries, and appends `FILE::TEST RC` to `$OUT/results` (see `script`).
fn run_one(limit: Duration) -> String {
    let limit = limit.as_secs();
    format!(
        "one() {{\n\
         \x20 log=\"$OUT/$1.$2.log\"; : > \"$log\"\n\
         \x20 for try in 1 2; do\n\
         \x20   ( sleep {limit}; sleep 5; {{ echo \"== try $try still running {limit} s after its start\"\n\
         \x20     ps -eo pid,ppid,stat,wchan:32,etime,args\n\
         \x20     for p in $(pgrep -f \"$3|montrace\"); do echo \"== /proc/$p/stack\"; cat /proc/$p/stack; done\n\
         \x20     echo l > /proc/sysrq-trigger; echo w > /proc/sysrq-trigger; sleep 2; dmesg | tail -n 400\n\
         \x20   }} > \"$log.hung\" 2>&1 ) &\n\
         \x20   watch=$!\n\
         \x20   timeout -k 10 {limit} \"$3\" --exact \"$2\" --include-ignored --test-threads=1 >> \"$log\" 2>&1; rc=$?\n\
         \x20   kill $watch 2>/dev/null\n\
         \x20   [ $rc = 124 ] || [ $rc = 137 ] || break\n\
         \x20   {{ echo \"== try $try killed after {limit} s; what was running:\"\n\
         \x20     ps -eo pid,ppid,stat,wchan:32,etime,args\n\
         \x20     for p in $(pgrep -f montrace); do echo \"== /proc/$p/stack\"; cat /proc/$p/stack; done\n\
         \x20   }} >> \"$log\" 2>&1\n\
         \x20   pkill -KILL -f \"$MONTRACE_BIN\"; sleep 1\n\
         \x20   echo \"$1::$2\" >> \"$OUT/timed-out\"\n\
         \x20 done\n\
         \x20 echo \"$1::$2 $rc\" >> \"$OUT/results\"\n\
         }}\n"
    )
}

/// Boots `k` and runs the script for `tests`. The first boot starts from an empty directory;
/// a later one (the tests a stalled VM did not run) keeps what the first left: its results, and
/// its console and the stalled test's log with `.1` appended.
fn boot(
    k: &Kernel,
    montrace: &Path,
    binaries: &std::collections::HashMap<String, PathBuf>,
    kvm: bool,
    tests: &[(&str, &str)],
    first: bool,
) -> Result<()> {
    if !k.vmlinuz().exists() {
        bail!(
            "{} is not installed ({} missing): run `cargo xtask setup`",
            k.name,
            k.vmlinuz().display()
        );
    }
    let out = out_dir(k);
    if first {
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out)?;
    } else {
        let _ = std::fs::remove_file(out.join("finished"));
        let _ = std::fs::rename(out.join("log"), out.join("log.1"));
        for (file, test) in tests {
            for suffix in ["", ".hung"] {
                let log = test_log(&out, &format!("{file}::{test}"), suffix);
                let _ = std::fs::rename(
                    &log,
                    test_log(&out, &format!("{file}::{test}"), &format!("{suffix}.1")),
                );
            }
        }
    }
    let script_path = out.join("run.sh");
    std::fs::write(&script_path, script(montrace, binaries, &out, tests)?)?;
    std::fs::set_permissions(
        &script_path,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )?;
    let log = std::fs::File::create(out.join("log"))?;
    let mut cmd = vng_command(k, kvm);
    cmd.arg("--rwdir")
        .arg(&out)
        .arg("--exec")
        .arg(&script_path)
        .stdout(log.try_clone()?)
        .stderr(log);
    run_vm(&mut cmd, &out, STALL_LIMIT, VM_LIMIT)?;
    if !out.join("finished").exists() {
        bail!(
            "the VM of {} stopped before its script finished: see {}",
            k.name,
            out.join("log").display()
        );
    }
    Ok(())
}

/// Runs the VM until it ends. It is killed when the script has shown no progress (no file
/// under `out` made or grown, the console aside) for `stall_limit` ([`STALL_LIMIT`]), or past
/// `limit` ([`VM_LIMIT`]).
fn run_vm(cmd: &mut Command, out: &Path, stall_limit: Duration, limit: Duration) -> Result<()> {
    let started = Instant::now();
    let mut seen = progress(out);
    let mut moved = Instant::now();
    supervise(cmd, Duration::from_secs(1), || {
        let now = progress(out);
        if now != seen {
            (seen, moved) = (now, Instant::now());
        }
        if moved.elapsed() > stall_limit {
            Some(format!(
                "the VM stalled: nothing new from its tests for {} s (killed)",
                stall_limit.as_secs()
            ))
        } else if started.elapsed() > limit {
            Some(format!("the VM ran past {} s (killed)", limit.as_secs()))
        } else {
            None
        }
    })?;
    Ok(())
}

/// How far the script has got: the files under `out` and their sizes, the console's aside (a
/// stalled kernel keeps printing there).
fn progress(out: &Path) -> (usize, u64) {
    let Ok(entries) = std::fs::read_dir(out) else {
        return (0, 0);
    };
    entries
        .flatten()
        .filter(|e| e.file_name() != "log")
        .fold((0, 0), |(n, bytes), e| {
            (n + 1, bytes + e.metadata().map_or(0, |m| m.len()))
        })
}

/// What `k`'s last boot left under target/kernels: its release, doctor's table and the results
/// of `tests` (of [`SUBSET`]; a test no longer in it is left out).
fn last_outcome(k: &Kernel, tests: &[(&str, &str)]) -> Result<Outcome> {
    let out = out_dir(k);
    if !out.join("doctor").exists() {
        bail!(
            "no boot of {} under {}: run `cargo xtask test --kernel {}`",
            k.name,
            out.display(),
            k.name
        );
    }
    let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap_or_default();
    let results = parse_results(&read("results"));
    // Each test of the subset, in its order; one the VM did not reach is not run (never a pass).
    let tests = tests
        .iter()
        .map(|(f, t)| {
            let name = format!("{f}::{t}");
            let status = match results.iter().find(|(test, _)| *test == name) {
                Some((_, true)) => Status::Pass,
                Some((_, false)) => Status::Fail,
                None => Status::NotRun,
            };
            (name, status)
        })
        .collect();
    Ok(Outcome {
        kernel: k.name.to_owned(),
        release: read("release").trim().to_owned(),
        features: parse_features(&read("doctor")),
        tests,
    })
}

/// `cargo xtask test --kernels --no-boot`: docs/kernels.md again from the last boots' outputs
/// (after a change to the subset or to the page's text), without booting anything.
pub fn doc_from_last() -> Result<()> {
    let outcomes = KERNELS
        .iter()
        .map(|k| last_outcome(k, SUBSET))
        .collect::<Result<Vec<_>>>()?;
    write_doc(&outcomes)
}

fn write_doc(outcomes: &[Outcome]) -> Result<()> {
    let doc = util::workspace_root().join("docs/kernels.md");
    let text = render_doc(outcomes);
    if std::fs::read_to_string(&doc).ok().as_deref() != Some(text.as_str()) {
        std::fs::write(&doc, &text).with_context(|| format!("writing {}", doc.display()))?;
        eprintln!("kernel tier: docs/kernels.md rewritten from what the VMs reported");
    }
    Ok(())
}

/// What `k` must give ([`Kernel::gives`]) and its VM's doctor did not: each with the reason it
/// gave, or that it printed no such row.
pub fn missing_features(k: &Kernel, features: &[(String, bool, String)]) -> Vec<String> {
    k.gives
        .iter()
        .filter_map(|name| match features.iter().find(|(f, _, _)| f == name) {
            Some((_, true, _)) => None,
            Some((_, false, why)) => Some(format!("feature {name}: {why}")),
            None => Some(format!(
                "feature {name}: montrace doctor printed no row for it"
            )),
        })
        .collect()
}

/// The feature rows of `montrace doctor`'s output (after its "What a run gets" line):
/// `name yes|no detail`.
pub fn parse_features(doctor: &str) -> Vec<(String, bool, String)> {
    doctor
        .lines()
        .skip_while(|l| !l.starts_with("What a run gets"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let mut parts = l.splitn(2, char::is_whitespace);
            let name = parts.next()?.to_owned();
            let rest = parts.next()?.trim_start();
            let (yes, detail) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            Some((name, yes == "yes", detail.trim().to_owned()))
        })
        .collect()
}

/// `file::test rc` lines.
pub fn parse_results(results: &str) -> Vec<(String, bool)> {
    results
        .lines()
        .filter_map(|l| {
            let (test, rc) = l.rsplit_once(' ')?;
            Some((test.to_owned(), rc.trim() == "0"))
        })
        .collect()
}

/// What varies from boot to boot in a feature's detail (a cgroup named after doctor's pid).
fn stable(detail: &str) -> String {
    let mut out = String::new();
    let mut rest = detail;
    while let Some(at) = rest.find("doctor-") {
        out += &rest[..at + "doctor-".len()];
        rest = rest[at + "doctor-".len()..].trim_start_matches(|c: char| c.is_ascii_digit());
        out += "PID";
    }
    out + rest
}

pub const DOC_HEADER: &str = "# Kernels montrace is tested on\n\n\
<!-- Written by `cargo xtask test --kernels` from what each VM reported: do not edit by hand. -->\n";

/// docs/kernels.md from the tier's outcomes (pure).
pub fn render_doc(outcomes: &[Outcome]) -> String {
    let mut s = String::from(DOC_HEADER);
    s += "\nThe kernel tier boots each kernel below in a VM (virtme-ng, qemu) on the test machine's root \
          filesystem and runs `montrace doctor` and an exactness subset of the end-to-end tests \
          inside (`xtask/src/kernels.rs`), against the static release binary users install \
          (`cargo xtask dist`). The machine's own kernel is covered by the end-to-end \
          tier. Add a kernel with one entry in `KERNELS`: its package, and the features it must \
          give (the tier fails where one of them is missing).\n\n\
          Each kernel gets what it can give, feature by feature: montrace reads the tracepoints' \
          prototypes and the structs' layouts from the kernel's BTF, and leaves out one by one \
          the programs a kernel lacks, saying why (`montrace doctor` prints the same table, run.json \
          records it as `features`). The floor montrace is built for is a kernel with BTF and the BPF \
          ring buffer (Linux 5.8); it is tested from 6.1 only, the oldest kernel below: the tier \
          downloads its kernels with the test machine's apt (Debian 12), which offers no older \
          one. Below 6.1 montrace is untested: `montrace doctor` says what a kernel gives.\n\n\
          The subset covers the tree (a shell loop in both tracepoint modes, a fork storm, an \
          exec chain, a double-forked daemon), exit CPU and peaks against the kernel's rusage, \
          waits, attaching to a running tree, and an ordinary user running the granted binary \
          (the VM's /etc and /home are overlays, so the test's user lives and dies inside). No \
          test in it times anything: without KVM the VM runs several times slower.\n";
    for o in outcomes {
        let passed = o.tests.iter().filter(|(_, s)| *s == Status::Pass).count();
        s += &format!("\n## {} (`{}`)\n\n", o.kernel, o.release);
        s += "| feature | available | detail |\n|---|---|---|\n";
        for (name, available, detail) in &o.features {
            s += &format!(
                "| {name} | {} | {} |\n",
                if *available { "yes" } else { "no" },
                stable(detail).replace('|', "\\|")
            );
        }
        s += &format!(
            "\nExactness subset: {passed} of {} tests passed.\n\n",
            o.tests.len()
        );
        for (test, status) in &o.tests {
            let status = match status {
                Status::Pass => "pass",
                Status::Fail => "FAIL",
                Status::NotRun => "not run (the VM stopped first)",
            };
            s += &format!("- {status} `{test}`\n");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOCTOR: &str = "kernel         ok  6.1.0-51-amd64\n\
        eBPF programs  ok  loaded and attached (tp_btf) in 900 ms\n\n\
        What a run gets on this kernel (6.1.0-51-amd64):\n\
        tree           yes eBPF (BTF tracepoints): every fork, exec and exit\n\
        socket_bytes   no  not available on this kernel: unknown\n\
        run_cgroup     yes cgroup V2 at /sys/fs/cgroup/montrace/doctor-4242\n\n\
        montrace run here: exact\n";

    #[test]
    fn doctors_feature_table_is_read_back() {
        let f = parse_features(DOCTOR);
        assert_eq!(f.len(), 3, "{f:?}");
        assert_eq!(f[0].0, "tree");
        assert!(f[0].1);
        assert_eq!(
            f[1],
            (
                "socket_bytes".into(),
                false,
                "not available on this kernel: unknown".into()
            )
        );
        assert_eq!(
            stable(&f[2].2),
            "cgroup V2 at /sys/fs/cgroup/montrace/doctor-PID"
        );
    }

    #[test]
    fn a_feature_the_kernel_must_give_and_did_not_fails_the_tier() {
        let k = Kernel {
            name: "k",
            package: "linux-image-k",
            gives: &["tree", "socket_bytes", "task_iterator"],
        };
        assert_eq!(
            missing_features(&k, &parse_features(DOCTOR)),
            [
                "feature socket_bytes: not available on this kernel: unknown",
                "feature task_iterator: montrace doctor printed no row for it",
            ]
        );
    }

    #[test]
    fn the_tests_picked_by_name_are_those_of_the_subset_that_match() {
        assert_eq!(chosen(None).len(), SUBSET.len());
        let attach = chosen(Some("attach::, no_such_test"));
        assert_eq!(attach.len(), 1, "{attach:?}");
        assert_eq!(attach[0].0, "attach");
        assert!(chosen(Some(" , ")).is_empty());
    }

    /// The script's runner of one test: a test that hangs on its first try is killed after the
    /// limit, named in `timed-out`, its log says what was running, and its second try's code is
    /// its result; a failing test is not run again.
    #[test]
    fn a_hung_test_is_killed_logged_and_tried_once_more() {
        let out = &std::env::temp_dir().join(format!("xtask-run-one-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(out);
        std::fs::create_dir(out).unwrap();
        let exe = |name: &str, body: &str| {
            let path = out.join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
            path.display().to_string()
        };
        // Hangs the first time it runs, passes the second.
        let flaky = exe(
            "flaky",
            &format!(
                "[ -e {0}/ran ] && exit 0; : > {0}/ran; sleep 30",
                out.display()
            ),
        );
        let failing = exe("failing", "echo once >> \"$OUT/failing.count\"; exit 101");
        let script = format!(
            "OUT='{}'\nMONTRACE_BIN=no-such-montrace-xtask-test\n{}one f hangs_once '{flaky}'\n\
             one f fails '{failing}'\n",
            out.display(),
            run_one(Duration::from_secs(1))
        );
        // From a file, as in the VM: `pkill -f` must not find the script's text in its own argv.
        std::fs::write(out.join("run.sh"), &script).unwrap();
        let status = Command::new("sh")
            .arg(out.join("run.sh"))
            .env("OUT", out)
            .status()
            .unwrap();
        assert!(status.success());
        let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap_or_default();
        assert_eq!(
            parse_results(&read("results")),
            vec![("f::hangs_once".into(), true), ("f::fails".into(), false)]
        );
        assert_eq!(read("timed-out"), "f::hangs_once\n");
        assert!(
            read("f.hangs_once.log").contains("== try 1 killed after 1 s; what was running:"),
            "{}",
            read("f.hangs_once.log")
        );
        assert_eq!(read("failing.count"), "once\n");
        std::fs::remove_dir_all(out).unwrap();
    }

    /// A VM whose script keeps writing is left to run; one that goes silent (its console aside)
    /// is killed once the stall limit passes, and says so.
    #[test]
    fn a_vm_is_killed_when_its_script_shows_no_progress() {
        let out = &std::env::temp_dir().join(format!("xtask-run-vm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(out);
        std::fs::create_dir(out).unwrap();
        let started = Instant::now();
        // Six results 0.4 s apart (2.4 s, each well within the 2 s stall limit even when a busy
        // machine delays a `sleep 0.4` by a second), then a console that keeps printing and
        // nothing else.
        // And a child of its own (qemu, under vng), which must not outlive it.
        let script = "sleep 1000 & echo $! > child; \
                      for i in 1 2 3 4 5 6; do echo t$i >> results; sleep 0.4; done; \
                      while :; do echo watchdog >> log; sleep 0.1; done";
        let err = run_vm(
            Command::new("sh").args(["-c", script]).current_dir(out),
            out,
            Duration::from_secs(2),
            Duration::from_secs(60),
        )
        .unwrap_err();
        let took = started.elapsed();
        assert!(err.to_string().contains("stalled"), "{err:#}");
        // Not before the last result (2.4 s: sleeps are never shorter) plus the stall limit.
        assert!(took > Duration::from_millis(4400), "killed after {took:?}");
        assert_eq!(
            std::fs::read_to_string(out.join("results"))
                .unwrap()
                .lines()
                .count(),
            6
        );
        let child = std::fs::read_to_string(out.join("child")).unwrap();
        // Gone, or a zombie until init reaps it. The SIGKILL to its group was sent, but a busy
        // machine may not have run the child's exit yet when run_vm returns: it has 10 s.
        let deadline = Instant::now() + Duration::from_secs(10);
        let stat = loop {
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.trim()));
            if stat.as_ref().map_or(true, |s| s.contains(") Z")) || Instant::now() > deadline {
                break stat;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(
            stat.as_ref().map_or(true, |s| s.contains(") Z")),
            "the script's child is alive: {stat:?}"
        );
        // Finishing in time is no error.
        run_vm(
            Command::new("sh")
                .args(["-c", "echo t > results"])
                .current_dir(out),
            out,
            Duration::from_secs(1),
            Duration::from_secs(60),
        )
        .unwrap();
        std::fs::remove_dir_all(out).unwrap();
    }

    #[test]
    fn results_are_read_back() {
        let r = parse_results("a::b 0\nc::d 101\n");
        assert_eq!(r, vec![("a::b".into(), true), ("c::d".into(), false)]);
    }

    /// The committed docs/kernels.md is the tier's: written by `render_doc`, one section for each
    /// kernel of the list with every feature montrace reports, and each test of the subset.
    #[test]
    fn docs_kernels_md_is_in_step_with_the_tier() {
        let doc = std::fs::read_to_string(util::workspace_root().join("docs/kernels.md"))
            .expect("docs/kernels.md");
        assert!(
            doc.starts_with(DOC_HEADER),
            "docs/kernels.md is written by the tier"
        );
        for k in KERNELS {
            let heading = format!("\n## {} (`{}`)\n", k.name, k.release());
            let at = doc.find(&heading).unwrap_or_else(|| {
                panic!(
                    "docs/kernels.md has no section {heading:?}: run `cargo xtask test --kernels`"
                )
            });
            let section = &doc[at + heading.len()..];
            let section = &section[..section.find("\n## ").unwrap_or(section.len())];
            for feature in [
                "tree",
                "exit_figures",
                "waits",
                "socket_bytes",
                "task_iterator",
                "psi",
                "run_cgroup",
            ] {
                assert!(
                    section.contains(&format!("\n| {feature} | ")),
                    "{} lacks the {feature} row: run `cargo xtask test --kernels`",
                    k.name
                );
            }
            for (file, test) in SUBSET {
                assert!(
                    section.contains(&format!("`{file}::{test}`")),
                    "{} lacks {file}::{test}: run `cargo xtask test --kernels`",
                    k.name
                );
            }
        }
        let sections = doc.matches("\n## ").count();
        assert_eq!(
            sections,
            KERNELS.len(),
            "one section per kernel of the list"
        );
    }
}
