//! The resident agent (issue 33): root starts `montrace agent`; an ordinary user's copy of the
//! binary, with no capability at all, then records exactly through it. A user can follow only
//! their own processes, a malformed request gets an error and leaves the agent serving, and a
//! run whose agent stops finishes with what it has and says so.
use std::{
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use tests::{
    agent::Agent, montrace_bin, read_json, read_processes, run_timeout, run_with_timeout,
    users::TestUser, Finished,
};

/// `BIN run --out OUT -- sh -c SCRIPT` as `user`, through the agent at `socket`.
fn run_as(user: &TestUser, bin: &Path, socket: &Path, out: &Path, script: &str) -> Finished {
    let mut cmd = user.agent_client(bin, socket);
    cmd.arg("run")
        .arg("--out")
        .arg(out)
        .args(["--", "sh", "-c", script]);
    run_with_timeout(&mut cmd, run_timeout())
}

/// Python: `read_line(s)`, the bytes a unix socket sends up to its first newline (or its end).
const READ_LINE: &str = r#"
def read_line(s):
    line = b""
    while not line.endswith(b"\n"):
        chunk = s.recv(4096)
        if not chunk:
            break
        line += chunk
    return line
"#;

/// Sends `request` (a raw line) to the agent as `user` and returns the agent's answer line.
fn ask_as(user: &TestUser, socket: &Path, request: &str) -> serde_json::Value {
    let script = format!(
        r#"{READ_LINE}
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode())
s.settimeout(10)
print(read_line(s).decode().strip())
"#
    );
    let mut cmd = user.command("python3");
    cmd.args(["-c", &script]).arg(socket).arg(request);
    let asked = run_with_timeout(&mut cmd, run_timeout());
    assert_eq!(asked.code(), 0, "{asked:?}");
    serde_json::from_str(asked.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {asked:?}"))
}

fn refused_for(answer: &serde_json::Value) -> String {
    assert_eq!(answer["ok"], false, "{answer}");
    answer["error"].as_str().unwrap_or_default().to_string()
}

#[test]
fn an_ordinary_users_plain_binary_records_exactly_through_the_agent() {
    let agent = Agent::start();
    let user = TestUser::create("agt");
    let bin = user.plain_montrace();
    let out = user.home.join("run");
    let script = "i=0; while [ $i -lt 1000 ]; do /bin/true; i=$((i+1)); done";
    let run = run_as(&user, &bin, &agent.socket, &out, script);
    assert_eq!(run.code(), 0, "{run:?}");
    assert!(!run.stderr.contains("no eBPF"), "{run:?}");
    let info = read_json(&out.join("run.json")).unwrap();
    assert_ne!(info["tracking_mode"], "polling", "{info}");
    let rows = read_processes(&out);
    // The shell and its 1,000 /bin/true, each once, none missed.
    assert_eq!(rows.len(), 1001, "{run:?}");
    assert_eq!(
        rows.iter().filter(|p| p.has_filename("/bin/true")).count(),
        1000
    );
    assert!(
        rows.iter().all(|p| p.cpu_ns() > 0),
        "exact CPU time at each exit"
    );
    assert_eq!(info["lost_events"]["ringbuf_full"], 0, "{info}");
    // The run directory is the user's, every file in it.
    for entry in std::fs::read_dir(&out).unwrap() {
        let entry = entry.unwrap();
        assert_eq!(entry.metadata().unwrap().uid(), user.uid, "{entry:?}");
    }
    // `montrace doctor`, as the user, with the same binary, says the same.
    let mut doctor = user.agent_client(&bin, &agent.socket);
    doctor.arg("doctor");
    let said = run_with_timeout(&mut doctor, run_timeout());
    assert_eq!(said.code(), 0, "{said:?}");
    assert!(
        said.stdout
            .contains("montrace run here: exact tracking through the montrace agent at"),
        "{said:?}"
    );
    // Stopped, the agent leaves no program in the kernel.
    let mut agent = agent;
    let programs = program_ids(agent.pid());
    assert!(
        programs.len() >= 4,
        "the agent holds its programs: {programs:?}"
    );
    let stopped = agent.stop();
    assert_eq!(stopped.status.code(), Some(0), "{stopped:?}");
    // The kernel frees a program after a grace period (deferred work): give it a few seconds.
    let loaded = |id: u32| {
        Command::new("bpftool")
            .args(["prog", "show", "id", &id.to_string()])
            .output()
            .unwrap()
            .status
            .success()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    for id in programs {
        while loaded(id) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            !loaded(id),
            "program {id} is still loaded 20 s after the agent stopped"
        );
    }
}

/// The ids of the eBPF programs process `pid` holds a descriptor of (its fdinfo's `prog_id`).
fn program_ids(pid: u32) -> Vec<u32> {
    let mut ids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .filter_map(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("prog_id:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

#[test]
fn a_user_follows_only_their_own_processes() {
    let agent = Agent::start();
    let alice = TestUser::create("aga");
    let bob = TestUser::create("agb");
    let mut bobs = bob.command("sleep").arg("30").spawn().unwrap();
    let bobs_pid = bobs.id();
    let ask = |user: &TestUser, pid: u32| {
        ask_as(
            user,
            &agent.socket,
            &format!("{{\"version\":1,\"follow\":{pid}}}\n"),
        )
    };
    // Another user's process, and root's (pid 1, and the agent itself).
    let why = refused_for(&ask(&alice, bobs_pid));
    assert!(why.contains("not yours"), "{why}");
    assert!(refused_for(&ask(&alice, 1)).contains("not yours"));
    let agent_pid = agent.pid();
    assert!(refused_for(&ask(&alice, agent_pid)).contains("not yours"));
    // A pid that does not exist.
    assert!(refused_for(&ask(&alice, 4_000_000)).contains("no such process"));
    // Malformed requests: each refused with a reason; nothing the request says about who asks
    // is taken (the uid comes from the socket).
    for (request, expected) in [
        ("garbage\n", "not a montrace agent request"),
        ("{\"version\":9,\"follow\":1}\n", "protocol version 9"),
        (
            &format!(
                "{{\"version\":1,\"follow\":{bobs_pid},\"uid\":{}}}\n",
                bob.uid
            )[..],
            "not a montrace agent request",
        ),
        (&format!("{}\n", " ".repeat(5000))[..], "at most 4096 bytes"),
    ] {
        let why = refused_for(&ask_as(&alice, &agent.socket, request));
        assert!(why.contains(expected), "{request:?}: {why}");
    }
    // Bob may follow his own process (the test's `sleep` is not his montrace's child: there is
    // no Yama here, so an own process is enough; with Yama only a child is).
    let yama = std::path::Path::new("/proc/sys/kernel/yama/ptrace_scope").exists();
    if !yama {
        assert_eq!(ask(&bob, bobs_pid)["ok"], true);
    }
    // Root may follow anything.
    let mut root_asks = Command::new("python3");
    root_asks.args(["-c", "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(sys.argv[2].encode()); print(s.recv(4096).decode().strip())"])
        .arg(&agent.socket)
        .arg(format!("{{\"version\":1,\"follow\":{bobs_pid}}}\n"));
    let root = run_with_timeout(&mut root_asks, run_timeout());
    assert!(root.stdout.contains("\"ok\":true"), "{root:?}");
    bobs.kill().unwrap();
    bobs.wait().unwrap();
    // After all that, the agent still serves a run.
    let bin = alice.plain_montrace();
    let out = alice.home.join("run");
    let run = run_as(&alice, &bin, &agent.socket, &out, "/bin/true; /bin/true");
    assert_eq!(run.code(), 0, "{run:?}");
    assert_eq!(read_processes(&out).len(), 3, "{run:?}");
}

/// `run --repeat`: the agent follows every repetition, the warm-up included, not only the first
/// (the client used to hand its connection to the first, and polled the others, missing their
/// short processes).
#[test]
fn every_repetition_of_a_users_run_is_followed_by_the_agent() {
    let agent = Agent::start();
    let user = TestUser::create("agr");
    let bin = user.plain_montrace();
    let out = user.home.join("reps");
    let mut cmd = user.agent_client(&bin, &agent.socket);
    cmd.args(["run", "--repeat", "2", "--warmup", "1", "--out"])
        .arg(&out)
        .args([
            "--",
            "sh",
            "-c",
            "for i in 1 2 3 4 5 6 7 8 9 10; do /bin/true; done",
        ]);
    let run = run_with_timeout(&mut cmd, run_timeout());
    assert_eq!(run.code(), 0, "{run:?}");
    for rep in ["warmup-01", "rep-001", "rep-002"] {
        let dir = out.join(rep);
        let info = read_json(&dir.join("run.json")).unwrap();
        assert_ne!(info["tracking_mode"], "polling", "{rep}: {info}");
        // sh and its ten /bin/true, each of them.
        assert_eq!(read_processes(&dir).len(), 11, "{rep}: {run:?}");
    }
}

#[test]
fn a_run_whose_agent_stops_finishes_with_what_it_has_and_says_so() {
    let mut agent = Agent::start();
    let user = TestUser::create("ags");
    let bin = user.plain_montrace();
    let out = user.home.join("run");
    let mut cmd = user.agent_client(&bin, &agent.socket);
    cmd.arg("run").arg("--out").arg(&out).args([
        "--",
        "sh",
        "-c",
        "/bin/true; : > ready; sleep 3; /bin/true",
    ]);
    let running = std::thread::spawn(move || run_with_timeout(&mut cmd, run_timeout()));
    // Stop the agent while the command sleeps (after its first /bin/true).
    let ready = user.home.join("ready");
    let deadline = Instant::now() + run_timeout();
    while !ready.exists() {
        assert!(
            Instant::now() < deadline,
            "the command never got to its sleep"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let stopped = agent.stop();
    assert_eq!(stopped.status.code(), Some(0), "{stopped:?}");
    let run = running.join().unwrap();
    assert_eq!(run.code(), 0, "the command is never abandoned: {run:?}");
    assert!(
        run.stderr
            .contains("the montrace agent stopped sending this run's events"),
        "{run:?}"
    );
    // What came before the stop is there: the shell and the first /bin/true, exactly.
    let rows = read_processes(&out);
    assert!(
        rows.iter().filter(|p| p.has_filename("/bin/true")).count() >= 1,
        "{run:?}"
    );
}

/// SIGCONT to the agent when dropped: a test that stops the agent never leaves it stopped
/// (its own drop's SIGTERM would then wait for ever).
struct Resumes(u32);

impl Drop for Resumes {
    fn drop(&mut self) {
        // SAFETY: plain kill(2) of the test's own agent.
        unsafe { libc::kill(self.0 as libc::pid_t, libc::SIGCONT) };
    }
}

/// The summary's `lost events` figure.
fn summary_lost(stderr: &str) -> u64 {
    stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("lost events"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no lost events line: {stderr}"))
}

/// `montrace run` as root through the agent at `socket`, with `AGENT` the agent's pid in the
/// command's environment.
fn root_run(agent: &Agent, out: &Path, script: &str) -> Finished {
    let mut cmd = Command::new(montrace_bin());
    cmd.env("MONTRACE_AGENT_SOCKET", &agent.socket)
        .env("AGENT", agent.pid().to_string())
        .args(["run", "--no-report", "--out"])
        .arg(out)
        .args(["--", "sh", "-c", script]);
    run_with_timeout(&mut cmd, run_timeout())
}

/// The agent's ring overflows during a run: the command stops the agent (SIGSTOP: nothing reads
/// its 64 KiB ring) and forks 1,000 processes (1.1 MB of records) before it continues it. The
/// run hears of the losses at its end and records them where a standalone run records its own
/// ring's (run.json's `lost_events`, the summary's warning); a quiet run through the same agent
/// afterwards hears of none of them.
#[test]
fn a_run_through_the_agent_hears_of_the_events_its_ring_lost() {
    let agent = Agent::start_with(&["--ring-buffer-size", "64KiB"]);
    let _resumes = Resumes(agent.pid());
    let tmp = tempfile::tempdir().unwrap();
    let stormy = tmp.path().join("storm");
    let script = "trap 'kill -CONT $AGENT' EXIT; kill -STOP $AGENT; \
                  i=0; while [ $i -lt 1000 ]; do /bin/true; i=$((i+1)); done";
    let run = root_run(&agent, &stormy, script);
    // SAFETY: plain kill(2) of the test's own agent (the command continued it already).
    unsafe { libc::kill(agent.pid() as libc::pid_t, libc::SIGCONT) };
    assert_eq!(run.code(), 0, "{run:?}");
    let info = read_json(&stormy.join("run.json")).unwrap();
    assert_ne!(info["tracking_mode"], "polling", "{info}");
    let lost = info["lost_events"]["ringbuf_full"].as_u64().unwrap();
    assert!(
        lost > 0,
        "the stopped agent's ring lost nothing? {info}\n{run:?}"
    );
    let total = lost + info["lost_events"]["track_map_full"].as_u64().unwrap();
    assert_eq!(summary_lost(&run.stderr), total, "{run:?}");
    assert!(run.stderr.contains("figures are incomplete"), "{run:?}");
    assert!(
        !run.stderr.contains("did not say how many events"),
        "the agent answered the run's end: {run:?}"
    );
    // A run after the storm: none of its losses are this run's.
    let quiet = tmp.path().join("quiet");
    let run = root_run(&agent, &quiet, "/bin/true; /bin/true");
    assert_eq!(run.code(), 0, "{run:?}");
    let info = read_json(&quiet.join("run.json")).unwrap();
    assert_eq!(info["lost_events"]["ringbuf_full"], 0, "{info}");
    assert_eq!(info["lost_events"]["track_map_full"], 0, "{info}");
    assert_eq!(summary_lost(&run.stderr), 0, "{run:?}");
    assert!(!run.stderr.contains("figures are incomplete"), "{run:?}");
    assert_eq!(read_processes(&quiet).len(), 3, "{run:?}");
}

/// `--quiet` silences the notes on what a run goes without: an ordinary user's run without a
/// run cgroup (no delegated cgroup v2 subtree, as on this machine) prints nothing at all with
/// `-q` and `--no-report`, and says why without `-q`; run.json says why either way.
#[test]
fn a_quiet_users_run_without_a_run_cgroup_prints_nothing() {
    let agent = Agent::start();
    let user = TestUser::create("agq");
    let bin = user.plain_montrace();
    for quiet in [true, false] {
        let out = user.home.join(format!("run-{quiet}"));
        let mut cmd = user.agent_client(&bin, &agent.socket);
        cmd.args(["run", "--no-report", "--gpu", "off"]);
        if quiet {
            cmd.arg("-q");
        }
        cmd.arg("--out").arg(&out).args(["--", "/bin/true"]);
        let run = run_with_timeout(&mut cmd, run_timeout());
        assert_eq!(run.code(), 0, "{run:?}");
        let info = read_json(&out.join("run.json")).unwrap();
        assert_ne!(info["tracking_mode"], "polling", "{info}");
        let why = info["cgroup"]["error"].as_str();
        match (quiet, why) {
            (true, _) => assert_eq!(run.stderr, "", "{info}"),
            (false, Some(why)) => assert!(
                run.stderr.contains("no cgroup for the run") && run.stderr.contains(why),
                "{run:?}"
            ),
            (false, None) => assert!(!run.stderr.contains("no cgroup"), "{run:?}"),
        }
    }
}

/// Short runs one after the other: the agent sends each its end frame with the command's exit
/// and closes its stream, sometimes before it read the nudge the client sent as it reaped the
/// command, which makes the kernel reset the connection (ECONNRESET after the queued frames).
/// Each run still ends as answered: nothing said under `-q`, its ring's losses known. Before the
/// client took that reset for the end, 1 run in 4 to 40 (release to debug build, this machine)
/// warned that the agent stopped sending and did not know its losses.
#[test]
fn short_runs_back_to_back_end_as_answered_whatever_the_agent_left_unread() {
    let agent = Agent::start();
    let user = TestUser::create("agb");
    let bin = user.plain_montrace();
    for i in 0..60 {
        let out = user.home.join(format!("run-{i}"));
        let mut cmd = user.agent_client(&bin, &agent.socket);
        cmd.args(["run", "-q", "--no-report", "--gpu", "off", "--out"])
            .arg(&out)
            .args(["--", "/bin/true"]);
        let run = run_with_timeout(&mut cmd, run_timeout());
        assert_eq!(run.code(), 0, "run {i}: {run:?}");
        assert_eq!(run.stderr, "", "run {i}");
        let info = read_json(&out.join("run.json")).unwrap();
        assert_ne!(info["tracking_mode"], "polling", "run {i}: {info}");
        assert_eq!(info["lost_events"]["ringbuf_full"], 0, "run {i}: {info}");
        assert_eq!(read_processes(&out).len(), 1, "run {i}");
        std::fs::remove_dir_all(&out).unwrap();
    }
}

/// Protocol 4: the agent sends a run its end frame (what its ring lost) with the tree's last
/// exit record, so the run's end asks it nothing (no `shutdown(2)` of its stream, the round trip
/// that cost 0.1 to 0.2 ms of every short run), and still knows its losses. A child that
/// outlives the command keeps the tree going: the end waits for its exit too.
#[test]
fn a_runs_end_frame_comes_with_its_trees_last_exit() {
    let agent = Agent::start();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let trace = tmp.path().join("strace.txt");
    let mut cmd = Command::new("strace");
    cmd.args(["-f", "-qq", "-e", "trace=shutdown", "-o"])
        .arg(&trace)
        .arg(montrace_bin())
        .env("MONTRACE_AGENT_SOCKET", &agent.socket)
        .args(["run", "--no-report", "--out"])
        .arg(&out)
        .args(["--", "sh", "-c", "sleep 0.3 & exit 0"]);
    let run = run_with_timeout(&mut cmd, run_timeout());
    assert_eq!(run.code(), 0, "{run:?}");
    let traced = std::fs::read_to_string(&trace).unwrap();
    assert!(
        !traced.contains("shutdown("),
        "the end asked the agent: {traced}"
    );
    let info = read_json(&out.join("run.json")).unwrap();
    assert_ne!(info["tracking_mode"], "polling", "{info}");
    assert_eq!(info["lost_events"]["ringbuf_full"], 0, "{info}");
    assert!(
        !run.stderr.contains("did not say how many events"),
        "{run:?}"
    );
    let processes = read_processes(&out);
    assert_eq!(processes.len(), 2, "{run:?}");
    assert!(
        processes
            .iter()
            .all(|p| p.exit_code == Some(0) && !p.alive_at_end),
        "the sleep's exit came too: {processes:?}"
    );
}

/// Starts `owner`'s tree (a `sleep 60` started at once; once `go` exists in their home, 20
/// `/bin/true`, then the sleep killed), attaches to it through the agent as `attacher` (None:
/// root with the test's binary; else a user with their plain copy), and lets the tree go once
/// the attach follows it (its mark socket is bound then, after the agent answered and the tree
/// was found): what the attach ended with, and its run directory.
fn attach_through(
    agent: &Agent,
    owner: &TestUser,
    attacher: Option<(&TestUser, &Path)>,
) -> (Finished, PathBuf) {
    let (go, ready) = (owner.home.join("go"), owner.home.join("ready"));
    let _ = std::fs::remove_file(&go);
    let _ = std::fs::remove_file(&ready);
    let script = format!(
        "sleep 60 & : > {}; while [ ! -e {} ]; do sleep 0.05; done; \
         i=0; while [ $i -lt 20 ]; do /bin/true; i=$((i+1)); done; kill $!; wait",
        ready.display(),
        go.display()
    );
    let mut tree = owner.command("sh");
    tree.args(["-c", &script]).stdin(Stdio::null());
    let mut tree = tree.spawn().unwrap();
    // The sleep is forked before the attach: only the agent's look at the tree can follow it.
    let deadline = Instant::now() + run_timeout();
    while !ready.exists() {
        assert!(Instant::now() < deadline, "the tree never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let tag = if attacher.is_some() { "user" } else { "root" };
    let out = owner.home.join(format!("attach-{tag}"));
    let marks = owner.home.join(format!("marks-{tag}.sock"));
    let mut cmd = match attacher {
        Some((user, bin)) => user.command(bin),
        None => Command::new(montrace_bin()),
    };
    cmd.env("MONTRACE_AGENT_SOCKET", &agent.socket)
        .args(["attach", "--no-report", "--mark-socket"])
        .arg(&marks)
        .arg("--out")
        .arg(&out)
        .arg(tree.id().to_string());
    let attaching = std::thread::spawn(move || run_with_timeout(&mut cmd, run_timeout()));
    let deadline = Instant::now() + run_timeout();
    while !marks.exists() && !attaching.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(&go, "").unwrap();
    let attached = attaching.join().unwrap();
    let _ = tree.kill();
    tree.wait().unwrap();
    (attached, out)
}

/// What an attach through the agent must have recorded: the 20 `/bin/true` forked after it,
/// each once with exact exit figures, and the `sleep` alive at the attach, whose exit (SIGTERM)
/// came from the agent: it followed the descendant it found, not only the process named.
fn assert_attached_exactly(attached: &Finished, out: &Path) {
    assert_eq!(attached.code(), 0, "{attached:?}");
    let info = read_json(&out.join("run.json")).unwrap();
    assert_ne!(info["tracking_mode"], "polling", "{info}");
    assert_eq!(info["lost_events"]["ringbuf_full"], 0, "{info}");
    let rows = read_processes(out);
    let trues: Vec<_> = rows
        .iter()
        .filter(|p| p.has_filename("/bin/true"))
        .collect();
    assert_eq!(trues.len(), 20, "{attached:?}");
    assert!(trues.iter().all(|p| p.cpu_ns() > 0), "{trues:#?}");
    let sleeps: Vec<_> = rows
        .iter()
        .filter(|p| p.argv.as_deref() == Some(&["sleep".to_string(), "60".to_string()][..]))
        .collect();
    assert_eq!(sleeps.len(), 1, "{rows:#?}");
    assert_eq!(
        sleeps[0].exit_signal,
        Some(libc::SIGTERM),
        "{:#?}",
        sleeps[0]
    );
}

/// `montrace attach` through the agent, with no privilege on the attaching side: root's attach
/// to a user's tree, and the user's own, with their plain copy of the binary (where Yama lets a
/// user trace a process that is not their child; where it does not, the attach is refused, as a
/// debugger's would be).
#[test]
fn attach_through_the_agent_follows_the_tree_it_finds_and_what_it_forks() {
    let agent = Agent::start();
    let user = TestUser::create("agw");
    let (attached, out) = attach_through(&agent, &user, None);
    assert_attached_exactly(&attached, &out);
    let bin = user.plain_montrace();
    let (attached, out) = attach_through(&agent, &user, Some((&user, &bin)));
    let yama = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .map_or(0, |s| s.trim().parse::<u32>().unwrap());
    if yama == 0 {
        assert!(!attached.stderr.contains("no eBPF"), "{attached:?}");
        assert_attached_exactly(&attached, &out);
    } else {
        assert_ne!(attached.code(), 0, "{attached:?}");
        assert!(
            attached.stderr.contains("would not let a debugger attach"),
            "{attached:?}"
        );
    }
}

/// After [`client_script`]'s start, for a busy tree: a client that never reads what comes (until
/// its tree is done). It is cut off once its queue is full (its connection closed), and another
/// user's run beside it stays exact.
const NON_READER: &str = r#"
child.wait()
# Only now read: what the agent had sent before it cut this client off, then the end.
s.settimeout(30)
total = 0
while True:
    chunk = s.recv(1 << 16)
    if not chunk:
        break
    total += len(chunk)
print("closed", total)
"#;

/// A client's script (given the agent's socket): it starts `child` (argv, a Python list),
/// asks the agent to follow it in protocol `version`, prints the answer line, then runs `rest`
/// (with `s`, the connection, and `child`).
fn client_script(version: u32, child: &str, rest: &str) -> String {
    format!(
        r#"
import socket, subprocess, sys
child = subprocess.Popen({child})
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(('{{"version":{version},"follow":%d}}\n' % child.pid).encode())
reply = b""
while not reply.endswith(b"\n"):
    reply += s.recv(1)
print(reply.decode().strip(), flush=True)
{rest}"#
    )
}

/// Bob's hostile `client` script (see [`client_script`]) beside Alice's exact run of 500
/// `/bin/true` through `agent`: Bob's client is accepted (its first line), Alice's run is exact.
/// Returns what Bob's client printed.
fn hostile_beside_an_exact_run(agent: &Agent, client: &str, users: (&str, &str)) -> String {
    let alice = TestUser::create(users.0);
    let bob = TestUser::create(users.1);
    let mut hostile = bob.command("python3");
    hostile
        .args(["-c", client])
        .arg(&agent.socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let hostile = hostile.spawn().unwrap();
    let bin = alice.plain_montrace();
    let out = alice.home.join("run");
    let script = "i=0; while [ $i -lt 500 ]; do /bin/true; i=$((i+1)); done";
    let run = run_as(&alice, &bin, &agent.socket, &out, script);
    let ended = hostile.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&ended.stdout).to_string();
    assert!(ended.status.success(), "{ended:?}");
    assert!(said.starts_with("{\"ok\":true"), "{said}");
    assert_eq!(run.code(), 0, "{run:?}");
    let info = read_json(&out.join("run.json")).unwrap();
    assert_ne!(info["tracking_mode"], "polling", "{info}");
    let rows = read_processes(&out);
    assert_eq!(rows.len(), 501, "{run:?}");
    assert_eq!(
        rows.iter().filter(|p| p.has_filename("/bin/true")).count(),
        500
    );
    said
}

/// The number after `prefix` on a line of `said`.
fn said_number(said: &str, prefix: &str) -> u64 {
    said.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` line: {said}"))
        .parse()
        .unwrap()
}

#[test]
fn a_client_that_does_not_read_is_cut_off_and_the_others_go_on() {
    // Alice's whole run is 550 KB of records: her outbox can never hold more than half a MiB.
    let agent = Agent::start_with(&["--client-buffer", "512KiB"]);
    let busy =
        r#"["sh", "-c", "sleep 0.3; i=0; while [ $i -lt 1500 ]; do /bin/true; i=$((i+1)); done"]"#;
    let client = client_script(1, busy, NON_READER);
    let said = hostile_beside_an_exact_run(&agent, &client, ("agr", "agq"));
    // Cut off: each /bin/true's fork, exec and exit records are 56 + 824 + 216 bytes (and 4 of
    // framing each), 1.65 MB for the 1,500; the connection ended with at most the outbox's
    // 512 KiB and what the socket's buffer held (about 200 KiB).
    let total = said_number(&said, "closed ");
    eprintln!("the non-reader got {total} bytes before the end");
    assert!(total < 1_000_000, "{total} bytes: not cut off");
}

/// After [`client_script`]'s start (its own process followed), nudges without end (protocol 3: a
/// client sends one when its command is reaped): the agent cuts it off after
/// `MAX_NUDGE_BYTES` (its connection closed), rather than reading for as long as it sends.
const NUDGE_FLOOD: &str = r#"
sent, limit, cut = 0, 256 << 20, False
s.settimeout(30)
try:
    while sent < limit:
        sent += s.send(b"!" * 4096)
except (BrokenPipeError, ConnectionResetError):
    cut = True
child.kill()
print("cut" if cut else "never cut", sent, flush=True)
"#;

#[test]
fn a_client_that_floods_nudges_is_cut_off_and_the_others_go_on() {
    let agent = Agent::start();
    let client = client_script(3, r#"["sleep", "30"]"#, NUDGE_FLOOD);
    let said = hostile_beside_an_exact_run(&agent, &client, ("agn", "agm"));
    // Cut off: what it could send is the nudges the agent read (64 bytes) and what the socket's
    // buffers took before the agent closed it (a few hundred KiB), not the 256 MiB it tried.
    let sent = said_number(&said, "cut ");
    eprintln!("the flood sent {sent} bytes before it was cut off");
    assert!(sent < 16 << 20, "{sent} bytes");
}

/// Another user's connections that come and go (some with half a request, which the agent waits
/// for, some with a refused one), then 50 runs at once through the agent: every run exact (one
/// user holding connections open blocks only their own), and the agent holds no descriptor of a
/// connection that is gone.
#[test]
fn connections_that_drop_and_fifty_runs_at_once_leave_every_run_exact() {
    let agent = Agent::start();
    let user = TestUser::create("agc");
    let hostile = TestUser::create("agh");
    let agent_pid = agent.pid();
    let fds = || {
        std::fs::read_dir(format!("/proc/{agent_pid}/fd"))
            .unwrap()
            .count()
    };
    let before = fds();
    let churn = r#"
import socket, sys
for i in range(2000):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    try:
        if i % 3 == 0:
            s.sendall(b'{"version":1,"follow":1}\n')
        elif i % 3 == 1:
            s.sendall(b'{"vers')
    except OSError:
        pass  # refused at once: this user has enough connections waiting to ask
    s.close()
"#;
    let mut cmd = hostile.command("python3");
    cmd.args(["-c", churn]).arg(&agent.socket);
    let churned = run_with_timeout(&mut cmd, run_timeout());
    assert_eq!(churned.code(), 0, "{churned:?}");
    let bin = user.plain_montrace();
    let runs: Vec<(PathBuf, Child)> = (0..50)
        .map(|i| {
            let out = user.home.join(format!("run{i}"));
            let mut cmd = user.command(&bin);
            cmd.current_dir(&user.home)
                .env("MONTRACE_AGENT_SOCKET", &agent.socket)
                .args(["run", "-q", "--no-report", "--out"])
                .arg(&out)
                .args([
                    "--",
                    "sh",
                    "-c",
                    "for j in 1 2 3 4 5 6 7 8 9 10; do /bin/true; done",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            (out, cmd.spawn().unwrap())
        })
        .collect();
    for (out, child) in runs {
        let done = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&done.stderr);
        assert!(done.status.success(), "{stderr}");
        assert!(!stderr.contains("no eBPF"), "{stderr}");
        let rows = read_processes(&out);
        let shown: Vec<String> = rows
            .iter()
            .map(|p| {
                format!(
                    "{} <- {:?} {:?} {:?} {:?}",
                    p.pid, p.parent_pid, p.filename, p.argv, p.comm
                )
            })
            .collect();
        assert_eq!(
            rows.len(),
            11,
            "{}: {stderr}\n{}",
            out.display(),
            shown.join("\n")
        );
    }
    // The half requests time out within 5 s; then every connection is closed.
    let deadline = Instant::now() + Duration::from_secs(30);
    while fds() > before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(fds(), before, "descriptors left open in the agent");
}

/// The flight recorder's directory for an agent of this test process (the agent makes it).
fn history_dir() -> PathBuf {
    PathBuf::from(format!("/tmp/montrace-history-{}", std::process::id()))
}

/// `montrace history --format json ARGS` through the agent at `socket`, as `user` with their
/// plain copy `bin` (None: root with the test's binary): its rows, and how it ended.
fn history_as(
    user: Option<(&TestUser, &Path)>,
    socket: &Path,
    args: &[&str],
) -> (Vec<serde_json::Value>, Finished) {
    let mut cmd = match user {
        Some((user, bin)) => {
            let mut cmd = user.command(bin);
            cmd.current_dir(&user.home);
            cmd
        }
        None => Command::new(montrace_bin()),
    };
    cmd.env("MONTRACE_AGENT_SOCKET", socket)
        .args(["history", "--format", "json"])
        .args(args);
    let done = run_with_timeout(&mut cmd, run_timeout());
    let rows = done
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}\n{done:?}")))
        .collect();
    (rows, done)
}

fn pids_of(rows: &[serde_json::Value]) -> Vec<u64> {
    let mut pids: Vec<u64> = rows.iter().map(|r| r["pid"].as_u64().unwrap()).collect();
    pids.sort_unstable();
    pids
}

/// Asks until `want` holds of the rows (the recorder writes a file every period), at most
/// the run timeout; the last rows.
fn history_until(
    user: Option<(&TestUser, &Path)>,
    socket: &Path,
    args: &[&str],
    want: impl Fn(&[serde_json::Value]) -> bool,
) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + run_timeout();
    loop {
        let (rows, done) = history_as(user, socket, args);
        assert_eq!(done.code(), 0, "{done:?}");
        if want(&rows) || Instant::now() > deadline {
            return rows;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Alice's processes of a run through the agent are in her history with the very exit figures
/// of her run's processes.parquet (one exit record makes both); Bob's, which he ran without
/// montrace at all, are recorded too (the whole machine is), and each sees only their own,
/// whatever the request says; root sees both, through the agent and in the files directly.
#[test]
fn the_flight_recorder_keeps_each_users_processes_for_them_alone() {
    let dir = history_dir();
    let _ = std::fs::remove_dir_all(&dir);
    let history = dir.to_str().unwrap();
    let agent = Agent::start_with(&["--history", history, "--history-period", "200ms"]);
    let alice = TestUser::create("aha");
    let bob = TestUser::create("ahb");
    let alices_bin = alice.plain_montrace();
    let bobs_bin = bob.plain_montrace();
    let alice_asks = Some((&alice, alices_bin.as_path()));
    let bob_asks = Some((&bob, bobs_bin.as_path()));
    let out = alice.home.join("run");
    let run = run_as(
        &alice,
        &alices_bin,
        &agent.socket,
        &out,
        "/bin/true; /bin/true",
    );
    assert_eq!(run.code(), 0, "{run:?}");
    // Alice's run has her tree alone (the programs follow the whole machine now).
    let rows = read_processes(&out);
    assert_eq!(rows.len(), 3, "{run:?}");
    let trues: Vec<_> = rows
        .into_iter()
        .filter(|p| p.has_filename("/bin/true"))
        .collect();
    assert_eq!(trues.len(), 2, "{run:?}");
    let mut bobs = bob.command("sh");
    bobs.args(["-c", "/bin/true; exit 7"]);
    assert_eq!(run_with_timeout(&mut bobs, run_timeout()).code(), 7);

    // Alice: her two /bin/true, with the run's exact exit figures.
    let since = ["--since", "10m", "--where", "exe=/bin/true"];
    let want: Vec<u64> = {
        let mut p: Vec<u64> = trues.iter().map(|p| u64::from(p.pid)).collect();
        p.sort_unstable();
        p
    };
    let rows = history_until(alice_asks, &agent.socket, &since, |rows| {
        pids_of(rows) == want
    });
    assert_eq!(pids_of(&rows), want, "{rows:?}");
    for p in &trues {
        let row = rows
            .iter()
            .find(|r| r["pid"] == p.pid)
            .unwrap_or_else(|| panic!("no row of {}: {rows:?}", p.pid));
        assert_eq!(row["uid"], alice.uid, "{row}");
        assert_eq!(row["cpu_user_ns"].as_u64(), p.cpu_user_ns, "{row} {p:?}");
        assert_eq!(
            row["cpu_system_ns"].as_u64(),
            p.cpu_system_ns,
            "{row} {p:?}"
        );
        assert!(p.cpu_ns() > 0, "{p:?}");
        assert_eq!(
            row["peak_rss_bytes"].as_u64(),
            p.peak_rss_bytes,
            "{row} {p:?}"
        );
        assert_eq!(row["exit_code"], 0, "{row}");
        // The run's clock and the agent's convert the same boot time to wall time apart by
        // at most what the two clocks drifted between their readings.
        let start = row["start_ns"].as_i64().unwrap();
        assert!((start - p.start_time).abs() < 1_000_000, "{row} {p:?}");
    }
    // Everything Alice sees is hers.
    let (all_of_alices, _) = history_as(alice_asks, &agent.socket, &["--since", "10m"]);
    assert!(all_of_alices.iter().all(|r| r["uid"] == alice.uid));

    // Bob: his own shell that exited 7, which no montrace ran; none of Alice's.
    let sevens = history_until(
        bob_asks,
        &agent.socket,
        &["--since", "10m", "--where", "exit=7"],
        |rows| !rows.is_empty(),
    );
    assert!(
        sevens
            .iter()
            .any(|r| r["comm"] == "sh" && r["uid"] == bob.uid),
        "{sevens:?}"
    );
    let (bobs_view, _) = history_as(bob_asks, &agent.socket, &["--since", "10m"]);
    assert!(
        bobs_view.iter().all(|r| r["uid"] == bob.uid),
        "{bobs_view:?}"
    );
    assert!(!bobs_view
        .iter()
        .any(|r| want.contains(&r["pid"].as_u64().unwrap())));
    let uid_filter = format!("uid={}", alice.uid);
    let (asked_for_alices, done) = history_as(
        bob_asks,
        &agent.socket,
        &["--since", "10m", "--where", &uid_filter],
    );
    assert_eq!(done.code(), 0, "{done:?}");
    assert!(asked_for_alices.is_empty(), "{asked_for_alices:?}");
    // Crafted requests: a uid in the question is refused, not read; a huge or malformed one
    // gets its reason.
    for (request, expected) in [
        (
            format!(
                "{{\"version\":1,\"history\":{{\"since_ns\":0,\"uid\":{}}}}}\n",
                alice.uid
            ),
            "not a montrace agent request",
        ),
        (
            format!(
                "{{\"version\":1,\"history\":{{\"since_ns\":0,\"where\":\"{}\"}}}}\n",
                "pid=1 ".repeat(300)
            ),
            "at most 1024 bytes",
        ),
        (
            format!(
                "{{\"version\":1,\"history\":{{\"since_ns\":0,\"where\":\"{}\"}}}}\n",
                "x".repeat(5000)
            ),
            "at most 4096 bytes",
        ),
        (
            "{\"version\":1,\"history\":{\"since_ns\":0,\"where\":\"color=red\"}}\n".into(),
            "not a field",
        ),
        (
            "{\"version\":1,\"history\":{\"since_ns\":\"yesterday\"}}\n".into(),
            "not a montrace agent request",
        ),
    ] {
        let why = refused_for(&ask_as(&bob, &agent.socket, &request));
        assert!(why.contains(expected), "{request:?}: {why}");
    }
    let (_, bad) = history_as(bob_asks, &agent.socket, &["--where", "color=red"]);
    assert_eq!(bad.code(), 2, "{bad:?}");
    assert!(bad.stderr.contains("not a field"), "{bad:?}");

    // Root: both.
    let (roots, _) = history_as(
        None,
        &agent.socket,
        &["--since", "10m", "--where", "exe=/bin/true"],
    );
    assert!(
        want.iter().all(|p| pids_of(&roots).contains(p)),
        "{roots:?}"
    );
    let (roots, _) = history_as(
        None,
        &agent.socket,
        &["--since", "10m", "--where", "exit=7"],
    );
    assert!(roots.iter().any(|r| r["uid"] == bob.uid), "{roots:?}");

    // The files are root's alone (root reads them with DuckDB: the killed agent's test).
    let meta = std::fs::metadata(&dir).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o700));
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A history file older than --history-max-age goes at the next write, and past
/// --history-max-bytes the oldest go until the rest fit; the newer stay.
#[test]
fn the_flight_recorders_retention_drops_the_oldest_files() {
    let dir = history_dir();
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let hour = 3_600_000_000_000i64;
    let name = |t: i64| format!("exits-{t:019}-{t:019}.parquet");
    let (too_old, big, recent) = (
        name(now - 40 * 24 * hour),
        name(now - 2 * hour),
        name(now - hour),
    );
    std::fs::write(dir.join(&too_old), b"old").unwrap();
    std::fs::write(dir.join(&big), vec![0u8; 8 << 20]).unwrap();
    std::fs::write(dir.join(&recent), b"recent").unwrap();
    let history = dir.to_str().unwrap();
    let agent = Agent::start_with(&[
        "--history",
        history,
        "--history-period",
        "200ms",
        "--history-max-bytes",
        "8MiB",
        "--history-max-age",
        "30d",
    ]);
    let deadline = Instant::now() + run_timeout();
    let names = || -> Vec<String> {
        let mut n: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        n.sort();
        n
    };
    // Any process's exit makes a write; this test's own /bin/true at least.
    while names().contains(&too_old) || names().contains(&big) {
        assert!(
            Instant::now() < deadline,
            "no write removed anything: {:?}",
            names()
        );
        let _ = Command::new("/bin/true").status();
        std::thread::sleep(Duration::from_millis(100));
    }
    let left = names();
    assert!(!left.contains(&too_old), "{left:?}");
    assert!(!left.contains(&big), "{left:?}");
    assert!(left.contains(&recent), "{left:?}");
    assert!(
        left.iter().any(|n| *n > recent),
        "the agent's own file: {left:?}"
    );
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An agent killed (SIGKILL) while processes exit and files are written leaves only whole
/// files: DuckDB reads every `*.parquet` there, and a new agent on the same directory answers.
#[test]
fn an_agent_killed_mid_write_leaves_readable_history() {
    let dir = history_dir();
    let _ = std::fs::remove_dir_all(&dir);
    let history = dir.to_str().unwrap();
    let mut agent = Agent::start_with(&["--history", history, "--history-period", "100ms"]);
    let mut churn = Command::new("sh")
        .args([
            "-c",
            "i=0; while [ $i -lt 4000 ]; do /bin/true; i=$((i+1)); done",
        ])
        .spawn()
        .unwrap();
    let count = || {
        std::fs::read_dir(&dir)
            .map(|d| {
                d.filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".parquet"))
                })
                .count()
            })
            .unwrap_or(0)
    };
    let deadline = Instant::now() + run_timeout();
    while count() < 3 {
        assert!(Instant::now() < deadline, "no files written");
        std::thread::sleep(Duration::from_millis(50));
    }
    agent.kill();
    churn.kill().unwrap();
    churn.wait().unwrap();
    // Root reads the files with DuckDB, with the query docs/history.md shows (its uid, program
    // and directory this test's): every /bin/true a whole row, its exact CPU time there.
    let sql = format!(
        "SELECT pid, comm, cpu_user_ns + cpu_system_ns AS cpu_ns, peak_rss_bytes \
         FROM '{history}/*.parquet' WHERE uid = 0 AND filename = '/bin/true' \
         AND end_time > now() - INTERVAL 3 HOUR ORDER BY cpu_ns DESC"
    );
    let found = tests::duckdb_query(&sql);
    let n = found.rows.len() as u64;
    assert!(n > 0, "{found:#?}");
    for i in 0..found.rows.len() {
        assert!(found.u64(i, "cpu_ns").unwrap() > 0, "{found:#?}");
        assert_eq!(found.str(i, "comm"), Some("true"), "{found:#?}");
    }
    // A new agent takes the directory as it is, and answers from the files the first left.
    drop(agent);
    let agent = Agent::start_with(&["--history", history, "--history-period", "100ms"]);
    let (rows, done) = history_as(
        None,
        &agent.socket,
        &["--since", "10m", "--limit", "100000"],
    );
    assert_eq!(done.code(), 0, "{done:?}");
    assert!(!done.stderr.contains("could not be read"), "{done:?}");
    let trues = rows.iter().filter(|r| r["filename"] == "/bin/true").count() as u64;
    assert!(
        trues >= n.min(100_000),
        "{trues} rows of /bin/true, {n} in the files"
    );
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `montrace bench` records each repetition with `montrace run`, which finds the agent as any
/// run does: an ordinary user's plain binary benches exactly, every repetition of both sides.
#[test]
fn an_ordinary_users_bench_records_every_repetition_through_the_agent() {
    let agent = Agent::start();
    let user = TestUser::create("agb");
    let bin = user.plain_montrace();
    let out = user.home.join("bench");
    let work = "for i in $(seq 10); do /bin/true; done";
    let mut cmd = user.agent_client(&bin, &agent.socket);
    cmd.args([
        "bench",
        "--warmup",
        "0",
        "--repeat",
        "2",
        "--allow-no-op",
        "-o",
    ])
    .arg(&out)
    .args(["-a", work, "-b", work]);
    let bench = run_with_timeout(&mut cmd, run_timeout() * 2);
    // A verdict (on the same 15 ms of work both sides: which one is not this test's), not a
    // failure of a command or of montrace.
    assert!(matches!(bench.code(), 0 | 1 | 3), "{bench:?}");
    // Each run's own stderr is in the bench's log.
    let log = std::fs::read_to_string(out.join("bench.log")).unwrap();
    assert!(!log.contains("no eBPF"), "{log}");
    for side in ["baseline", "candidate"] {
        for rep in 1..=2 {
            let run = out.join(format!("{side}/rep-{rep:03}"));
            let info =
                read_json(&run.join("run.json")).unwrap_or_else(|e| panic!("{e}: {bench:?}"));
            assert_ne!(info["tracking_mode"], "polling", "{info}");
            let rows = read_processes(&run);
            // sh, seq and 10 /bin/true, each once.
            assert_eq!(rows.len(), 12, "{side} {rep}: {rows:#?}");
            assert_eq!(std::fs::metadata(&run).unwrap().uid(), user.uid);
        }
    }
}

/// SO_PEERCRED names the process that connected, which may hand the connection to a child and
/// exit before the request is read: its pid then names nothing, or a process that started
/// later. The agent never takes such a client for one in the host's pid namespace (where the
/// pid it asks for would be a host pid): it is refused, for a process of its own too.
#[test]
fn a_client_whose_connecting_process_is_gone_is_refused() {
    let agent = Agent::start();
    let user = TestUser::create("agx");
    let handoff = format!(
        r#"{READ_LINE}
import os, socket, subprocess, sys, time
target = subprocess.Popen(["sleep", "30"])
s = socket.socket(socket.AF_UNIX)
r, w = os.pipe()
if os.fork() == 0:
    # The child: waits until the process that connected is gone, then asks.
    os.close(w)
    os.read(r, 1)
    time.sleep(0.2)
    s.sendall(('{{"version":3,"follow":%d}}\n' % target.pid).encode())
    reply = read_line(s)
    with open(sys.argv[2] + ".tmp", "w") as out:
        out.write(reply.decode().strip())
    os.rename(sys.argv[2] + ".tmp", sys.argv[2])
    target.kill()
    os._exit(0)
# The parent connects, then exits at once (its child is re-parented and carries on).
s.connect(sys.argv[1])
os.close(r)
os.close(w)
"#
    );
    let answer = user.home.join("answer");
    let mut cmd = user.command("python3");
    cmd.args(["-c", &handoff]).arg(&agent.socket).arg(&answer);
    let run = run_with_timeout(&mut cmd, run_timeout());
    assert_eq!(run.code(), 0, "{run:?}");
    // The child's answer comes after its parent exited.
    let deadline = std::time::Instant::now() + run_timeout();
    while !answer.exists() {
        assert!(std::time::Instant::now() < deadline, "no answer: {run:?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let said = std::fs::read_to_string(&answer).unwrap();
    assert!(
        said.contains("\"ok\":false") && said.contains("is gone"),
        "{said}"
    );
}

/// Where the agent refuses a run, the run is polled and says why; with `--require-ebpf` it
/// fails before the command runs anything, and leaves no run directory. (The refusal is read
/// once the run's tables are made, which the agent's check overlaps; neither outcome may
/// change.) The refusing agent is a stand-in on its own socket that answers every request as
/// the agent answers one it refuses.
#[test]
fn a_refused_run_is_polled_and_with_require_ebpf_not_run() {
    let user = TestUser::create("arf");
    let bin = user.plain_montrace();
    let socket = user.home.join("refusing.sock");
    let server = format!(
        r#"{READ_LINE}
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(16)
while True:
    c, _ = s.accept()
    if read_line(c):
        c.sendall(b'{{"ok":false,"error":"the stand-in refuses every run"}}\n')
    c.close()
"#
    );
    let mut refusing = user
        .command("python3")
        .args(["-c", &server])
        .arg(&socket)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "the stand-in did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = user.home.join("polled");
    let polled = run_as(&user, &bin, &socket, &out, "exit 3");
    let marker = user.home.join("ran");
    let required = user.home.join("required");
    let mut cmd = user.agent_client(&bin, &socket);
    cmd.args(["run", "--require-ebpf", "--out"])
        .arg(&required)
        .args(["--", "touch"])
        .arg(&marker);
    let refused = run_with_timeout(&mut cmd, run_timeout());
    let _ = refusing.kill();
    let _ = refusing.wait();

    assert_eq!(polled.code(), 3, "{polled:?}");
    assert!(
        polled
            .stderr
            .contains("refused: the stand-in refuses every run")
            && polled.stderr.contains("polling"),
        "{polled:?}"
    );
    let info = read_json(&out.join("run.json")).unwrap();
    assert_eq!(info["tracking_mode"], "polling", "{info}");
    assert_eq!(read_processes(&out).len(), 1, "{polled:?}");

    assert_eq!(refused.code(), 125, "{refused:?}");
    assert!(refused.stderr.contains("--require-ebpf"), "{refused:?}");
    assert!(!marker.exists(), "the command ran: {refused:?}");
    assert!(!required.exists(), "a run directory is left: {refused:?}");
}
