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

/// A plain copy (no capabilities) of montrace the user can run, in the user's home.
fn plain_copy(user: &TestUser) -> PathBuf {
    let bin = user.home.join("montrace");
    std::fs::copy(montrace_bin(), &bin).unwrap();
    std::os::unix::fs::chown(&bin, Some(user.uid), Some(user.gid)).unwrap();
    bin
}

/// `BIN run --out OUT -- sh -c SCRIPT` as `user`, through the agent at `socket`.
fn run_as(user: &TestUser, bin: &Path, socket: &Path, out: &Path, script: &str) -> Finished {
    let mut cmd = user.command(bin);
    cmd.current_dir(&user.home)
        .env_clear()
        .env("HOME", &user.home)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("MONTRACE_AGENT_SOCKET", socket)
        .arg("run")
        .arg("--out")
        .arg(out)
        .args(["--", "sh", "-c", script]);
    run_with_timeout(&mut cmd, run_timeout())
}

/// Sends `request` (a raw line) to the agent as `user` and returns the agent's answer line.
fn ask_as(user: &TestUser, socket: &Path, request: &str) -> serde_json::Value {
    let script = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode())
s.settimeout(10)
line = b""
while not line.endswith(b"\n"):
    chunk = s.recv(4096)
    if not chunk:
        break
    line += chunk
print(line.decode().strip())
"#;
    let mut cmd = user.command("python3");
    cmd.args(["-c", script]).arg(socket).arg(request);
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
    let bin = plain_copy(&user);
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
    let mut doctor = user.command(&bin);
    doctor
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("MONTRACE_AGENT_SOCKET", &agent.socket)
        .arg("doctor");
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
    let bin = plain_copy(&alice);
    let out = alice.home.join("run");
    let run = run_as(&alice, &bin, &agent.socket, &out, "/bin/true; /bin/true");
    assert_eq!(run.code(), 0, "{run:?}");
    assert_eq!(read_processes(&out).len(), 3, "{run:?}");
}

#[test]
fn a_run_whose_agent_stops_finishes_with_what_it_has_and_says_so() {
    let mut agent = Agent::start();
    let user = TestUser::create("ags");
    let bin = plain_copy(&user);
    let out = user.home.join("run");
    let socket = agent.socket.clone();
    let running = std::thread::spawn({
        let bin = bin.clone();
        let out = out.clone();
        let user_uid = user.uid;
        let user_gid = user.gid;
        let home = user.home.clone();
        move || {
            use std::os::unix::process::CommandExt as _;
            let mut cmd = Command::new(&bin);
            cmd.uid(user_uid)
                .gid(user_gid)
                .current_dir(&home)
                .env_clear()
                .env("HOME", &home)
                .env("PATH", "/usr/local/bin:/usr/bin:/bin")
                .env("MONTRACE_AGENT_SOCKET", &socket)
                .arg("run")
                .arg("--out")
                .arg(&out)
                .args(["--", "sh", "-c", "/bin/true; : > ready; sleep 3; /bin/true"]);
            run_with_timeout(&mut cmd, run_timeout())
        }
    });
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

/// A client that asks for a busy tree and never reads what comes: it is cut off once its queue
/// is full (its connection closed), and another user's run beside it stays exact.
const NON_READER: &str = r#"
import socket, subprocess, sys, time
child = subprocess.Popen(["sh", "-c", "sleep 0.3; i=0; while [ $i -lt 1500 ]; do /bin/true; i=$((i+1)); done"])
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(('{"version":1,"follow":%d}\n' % child.pid).encode())
reply = b""
while not reply.endswith(b"\n"):
    reply += s.recv(1)
print(reply.decode().strip(), flush=True)
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

#[test]
fn a_client_that_does_not_read_is_cut_off_and_the_others_go_on() {
    // Alice's whole run is 550 KB of records: her outbox can never hold more than half a MiB.
    let agent = Agent::start_with(&["--client-buffer", "512KiB"]);
    let alice = TestUser::create("agr");
    let bob = TestUser::create("agq");
    let mut non_reader = bob.command("python3");
    non_reader
        .args(["-c", NON_READER])
        .arg(&agent.socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let non_reader = non_reader.spawn().unwrap();
    let bin = plain_copy(&alice);
    let out = alice.home.join("run");
    let script = "i=0; while [ $i -lt 500 ]; do /bin/true; i=$((i+1)); done";
    let run = run_as(&alice, &bin, &agent.socket, &out, script);
    let cut = non_reader.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&cut.stdout);
    assert!(cut.status.success(), "{cut:?}");
    assert!(said.starts_with("{\"ok\":true"), "{said}");
    // Cut off: each /bin/true's fork, exec and exit records are 56 + 824 + 216 bytes (and 4 of
    // framing each), 1.65 MB for the 1,500; the connection ended with at most the outbox's
    // 512 KiB and what the socket's buffer held (about 200 KiB).
    let total: usize = said
        .lines()
        .find_map(|l| l.strip_prefix("closed "))
        .unwrap_or_else(|| panic!("never closed: {said}"))
        .parse()
        .unwrap();
    eprintln!("the non-reader got {total} bytes before the end");
    assert!(total < 1_000_000, "{total} bytes: not cut off");
    assert_eq!(run.code(), 0, "{run:?}");
    let rows = read_processes(&out);
    assert_eq!(rows.len(), 501, "{run:?}");
    assert_eq!(
        rows.iter().filter(|p| p.has_filename("/bin/true")).count(),
        500
    );
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
    let bin = plain_copy(&user);
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
