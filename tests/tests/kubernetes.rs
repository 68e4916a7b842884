//! dist/kubernetes/montrace-agent.yaml, as far as this machine (no Kubernetes) can run it: the
//! manifest is read as a cluster reads it (YAML), says what the agent needs (the node's pid
//! namespace, the systemd unit's capabilities and no more, the socket's directory shared with
//! the node), and the agent then runs with exactly the manifest's arguments and capabilities,
//! serving an ordinary user's run made through a read-only mount of its socket's directory, as
//! the example pod mounts it, in a pid namespace of its own, as the pod's is.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use tests::{
    montrace_bin, read_json, read_processes, run_timeout, run_with_timeout, users::TestUser,
};

/// run.json of the run in `out`, which the kernel's events recorded (through the agent).
fn exact_run_json(out: &Path, run: &tests::Finished) -> serde_json::Value {
    let info = read_json(&out.join("run.json")).unwrap();
    assert!(
        matches!(
            info["tracking_mode"].as_str(),
            Some("tp_btf" | "tracepoint")
        ),
        "{info}\n{run:?}"
    );
    info
}

fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// The manifest's documents, parsed by PyYAML (`cargo xtask setup` installs it) into JSON.
fn manifest() -> Vec<serde_json::Value> {
    let script =
        "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))";
    let mut cmd = Command::new("python3");
    cmd.args(["-c", script])
        .arg(repo_file("dist/kubernetes/montrace-agent.yaml"));
    let parsed = run_with_timeout(&mut cmd, run_timeout());
    assert_eq!(parsed.code(), 0, "{parsed:?}");
    serde_json::from_str::<Vec<serde_json::Value>>(&parsed.stdout).unwrap()
}

fn strings(value: &serde_json::Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {value}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// The systemd unit's `CapabilityBoundingSet`, as Kubernetes names capabilities (no `CAP_`).
fn unit_capabilities() -> Vec<String> {
    let unit = std::fs::read_to_string(repo_file("dist/montrace-agent.service")).unwrap();
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("the unit bounds the agent's capabilities");
    let mut caps: Vec<String> = line
        .split_whitespace()
        .map(|c| c.strip_prefix("CAP_").unwrap().to_string())
        .collect();
    caps.sort();
    caps
}

/// The mount of `container` whose volume (in `spec`) is the node's `host_path`: its path in the
/// container and whether it is read-only.
fn mount_of(
    spec: &serde_json::Value,
    container: &serde_json::Value,
    host_path: &str,
) -> (String, bool) {
    let volume = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["hostPath"]["path"] == host_path)
        .unwrap_or_else(|| panic!("no volume of {host_path}: {spec}"));
    let mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == volume["name"])
        .unwrap_or_else(|| panic!("{host_path} is not mounted: {container}"));
    (
        mount["mountPath"].as_str().unwrap().to_string(),
        mount["readOnly"] == true,
    )
}

/// The number of a capability as Kubernetes names it (linux/capability.h), for those the
/// manifest may add.
fn cap_number(name: &str) -> u32 {
    match name {
        "DAC_READ_SEARCH" => 2,
        "SYS_ADMIN" => 21,
        "SYS_RESOURCE" => 24,
        "PERFMON" => 38,
        "BPF" => 39,
        other => panic!("the manifest adds {other}: name its number here"),
    }
}

/// A process's capability bounding set (`CapBnd:` of /proc/PID/status).
fn cap_bounding(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .unwrap()
        .trim();
    u64::from_str_radix(hex, 16).unwrap()
}

#[test]
fn the_daemonsets_agent_serves_a_pods_run_with_the_manifests_capabilities_only() {
    tests::require_root();
    let docs = manifest();
    let kind = |k: &str| {
        docs.iter()
            .find(|d| d["kind"] == k)
            .unwrap_or_else(|| panic!("no {k} in the manifest"))
    };
    let daemonset = kind("DaemonSet");
    let spec = &daemonset["spec"]["template"]["spec"];
    // The kernel's events and the agent's /proc checks name processes as the node does.
    assert_eq!(spec["hostPID"], true, "{spec}");
    let agent = &spec["containers"][0];
    let args = strings(&agent["args"]);
    assert_eq!(args, ["agent", "--socket", "/run/montrace/agent.sock"]);
    // Exactly the systemd unit's capabilities, everything else dropped, no privileged mode.
    let security = &agent["securityContext"];
    let mut added = strings(&security["capabilities"]["add"]);
    added.sort();
    assert_eq!(added, unit_capabilities(), "{security}");
    assert_eq!(strings(&security["capabilities"]["drop"]), ["ALL"]);
    assert_eq!(security["privileged"], false);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    // The socket's directory is the node's, where the pods mount it from.
    assert_eq!(
        mount_of(spec, agent, "/run/montrace"),
        ("/run/montrace".into(), false)
    );
    // The example pod keeps its own pid namespace: the agent names its processes to it by
    // their pids there (the run below is made in one, as the pod's is).
    let pod = kind("Pod");
    assert!(pod["spec"]["hostPID"].is_null(), "{pod}");
    let job = &pod["spec"]["containers"][0];
    assert_eq!(
        mount_of(&pod["spec"], job, "/run/montrace"),
        ("/run/montrace".into(), true)
    );
    assert_eq!(
        job["securityContext"]["capabilities"]["drop"],
        serde_json::json!(["ALL"])
    );

    // The agent as the manifest runs it: its arguments (the socket in a directory of the test's
    // own, not the machine's /run/montrace) and only the manifest's capabilities.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let socket = dir.path().join("agent.sock");
    let bounding: String = std::iter::once("-all".to_string())
        .chain(added.iter().map(|c| format!("+{}", c.to_lowercase())))
        .collect::<Vec<_>>()
        .join(",");
    let mut agent_cmd = Command::new("setpriv");
    agent_cmd
        .arg(format!("--bounding-set={bounding}"))
        .arg("--inh-caps=-all")
        .arg("--")
        .arg(montrace_bin())
        .args(&args[..2])
        .arg(&socket)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut agent_process = agent_cmd.spawn().unwrap();
    let deadline = std::time::Instant::now() + run_timeout();
    while !socket.exists() {
        if let Some(status) = agent_process.try_wait().unwrap() {
            panic!(
                "the agent ended ({status}) before it made its socket: {:?}",
                agent_process.wait_with_output()
            );
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the agent made no socket"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    // The agent's bounding set is the manifest's, less what this machine's root lacks (a
    // container's root may lack CAP_SYS_RESOURCE, and setpriv then leaves it out silently).
    let wanted = added
        .iter()
        .fold(0u64, |mask, cap| mask | 1 << cap_number(cap));
    let own = cap_bounding(std::process::id());
    assert_eq!(
        cap_bounding(agent_process.id()),
        wanted & own,
        "the manifest's {added:?} on a machine whose bounding set is {own:#x}"
    );

    // An ordinary user's plain copy, through a read-only bind mount of the socket's directory
    // (the pod's `readOnly: true`), in a mount and a pid namespace of its own, as the pod's.
    let user = TestUser::create("k8s");
    let bin = user.plain_montrace();
    let seen = user.home.join("agent-ro");
    std::fs::create_dir(&seen).unwrap();
    let out = user.home.join("run");
    let script = format!(
        "mount --bind {dir} {seen} && mount -o remount,bind,ro {seen} && \
         exec setpriv --reuid={uid} --regid={gid} --clear-groups -- env -i HOME={home} \
         PATH=/usr/bin:/bin MONTRACE_AGENT_SOCKET={seen}/agent.sock \
         {bin} run --out {out} -- sh -c 'for i in $(seq 20); do /bin/true; done'",
        dir = dir.path().display(),
        seen = seen.display(),
        uid = user.uid,
        gid = user.gid,
        home = user.home.display(),
        bin = bin.display(),
        out = out.display(),
    );
    let mut client = Command::new("unshare");
    client
        .args([
            "--mount",
            "--propagation",
            "private",
            "--pid",
            "--fork",
            "--mount-proc",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .current_dir(&user.home);
    let run = run_with_timeout(&mut client, run_timeout());
    // SAFETY: plain kill(2) of the agent, our child.
    unsafe { libc::kill(agent_process.id() as libc::pid_t, libc::SIGTERM) };
    let stopped = agent_process.wait_with_output().unwrap();
    assert_eq!(run.code(), 0, "{run:?}\nagent: {stopped:?}");
    assert!(stopped.status.success(), "{stopped:?}");
    let info = exact_run_json(&out, &run);
    let rows = read_processes(&out);
    // sh, seq and 20 /bin/true: each once, as only the kernel's events give.
    assert_eq!(rows.len(), 22, "{run:?}");
    assert_eq!(
        rows.iter().filter(|p| p.has_filename("/bin/true")).count(),
        20
    );
    assert_eq!(info["lost_events"]["ringbuf_full"], 0, "{info}");
}

/// `cmd` run by `user` in a pid namespace of its own (a pod without `hostPID`: here `unshare
/// --pid --fork --mount-proc`, whose /proc is its own), with the agent's socket named.
fn in_own_pid_namespace(agent: &tests::agent::Agent, user: &TestUser, cmd: &[&str]) -> Command {
    let mut command = Command::new("unshare");
    command
        .args(["--pid", "--fork", "--mount-proc", "--"])
        .arg("setpriv")
        .arg(format!("--reuid={}", user.uid))
        .arg(format!("--regid={}", user.gid))
        .args(["--clear-groups", "--", "env", "-i"])
        .arg(format!("HOME={}", user.home.display()))
        .arg("PATH=/usr/bin:/bin")
        .arg(format!("MONTRACE_AGENT_SOCKET={}", agent.socket.display()))
        .args(cmd)
        .current_dir(&user.home);
    command
}

/// A pod without `hostPID`: the kernel's events name processes by the host's pids, and the
/// agent names them to the run by its own namespace's, so the run is exact and its pids are
/// those its command saw (`$$`), each child's parent its parent there.
#[test]
fn a_run_in_a_pid_namespace_of_its_own_is_exact_in_its_own_pids() {
    let agent = tests::agent::Agent::start();
    let user = TestUser::create("pns");
    let bin = user.plain_montrace();
    let out = user.home.join("run");
    // The inner `sh -c` prints its parent's pid, a process the run's tree has as a grandchild.
    let script = r#"echo $$; for i in $(seq 20); do /bin/true; done; sh -c 'sh -c "echo \$PPID"; true'; true"#;
    let mut cmd = in_own_pid_namespace(
        &agent,
        &user,
        &[
            bin.to_str().unwrap(),
            "run",
            "--out",
            out.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            script,
        ],
    );
    let run = run_with_timeout(&mut cmd, run_timeout());
    assert_eq!(run.code(), 0, "{run:?}");
    assert!(!run.stderr.contains("polling"), "{run:?}");
    let info = exact_run_json(&out, &run);
    // Its own pid namespace: the command's shell is a low pid there (montrace is 1).
    let said: Vec<u32> = run
        .stdout
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let [sh, outer] = said[..] else {
        panic!("{run:?}")
    };
    assert!(sh < 100, "{run:?}");
    let rows = read_processes(&out);
    // sh, seq, 20 /bin/true and the two sh -c, as only the kernel's events give each.
    assert_eq!(rows.len(), 24, "{rows:?}");
    assert_eq!(
        rows.iter().filter(|p| p.has_filename("/bin/true")).count(),
        20
    );
    let root = rows.iter().find(|p| p.parent_pid.is_none()).unwrap();
    assert_eq!(root.pid, sh, "{rows:?}");
    for child in rows.iter().filter(|p| p.pid != sh) {
        assert!(child.pid < 1000, "a host pid in the run: {child:?}");
        let parent = child.parent_pid.unwrap();
        assert!(rows.iter().any(|p| p.pid == parent), "{child:?}");
    }
    let inner = rows
        .iter()
        .find(|p| {
            p.argv
                .as_deref()
                .and_then(<[String]>::last)
                .is_some_and(|l| l == "echo $PPID")
        })
        .unwrap();
    assert_eq!(inner.parent_pid, Some(outer), "{rows:?}");
    let outer = rows.iter().find(|p| p.pid == outer).unwrap();
    assert_eq!(outer.parent_pid, Some(sh), "{rows:?}");
    assert_eq!(info["lost_events"]["ringbuf_full"], 0, "{info}");
}

/// In its own pid namespace a client names processes by its own pids: those of its namespace
/// that descend from its topmost ancestor there, its child and its sibling (a process of its user
/// it did not start, which Yama's ptrace_scope 0 lets it follow) here; a host pid names
/// nothing for it, so it is refused, whatever process holds that number on the host.
#[test]
fn in_a_pid_namespace_a_client_names_only_its_namespaces_processes() {
    let agent = tests::agent::Agent::start();
    let user = TestUser::create("pnr");
    let client = r#"
import socket, subprocess, sys
def ask(pid):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    s.sendall(('{"version":3,"follow":%d}\n' % pid).encode())
    reply = b""
    while not reply.endswith(b"\n"):
        reply += s.recv(1)
    s.close()
    return reply.decode().strip()
child = subprocess.Popen(["sleep", "30"])
print("child", ask(child.pid))
print("sibling", ask(int(sys.argv[2])))
print("host", ask(int(sys.argv[3])))
child.kill()
"#;
    let host_sleep = user.command("sleep").arg("30").spawn().unwrap();
    let script = format!(
        "sleep 30 & python3 -c '{client}' {socket} $! {host}; kill $!",
        client = client.replace('\'', "'\\''"),
        socket = agent.socket.display(),
        host = host_sleep.id(),
    );
    let mut cmd = in_own_pid_namespace(&agent, &user, &["sh", "-c", &script]);
    let run = run_with_timeout(&mut cmd, run_timeout());
    let mut host_sleep = host_sleep;
    drop(host_sleep.kill());
    drop(host_sleep.wait());
    assert_eq!(run.code(), 0, "{run:?}");
    let line = |what: &str| {
        run.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{what} ")))
            .unwrap_or_else(|| panic!("no {what}: {run:?}"))
            .to_string()
    };
    assert!(line("child").starts_with("{\"ok\":true"), "{run:?}");
    let yama = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .map_or(0, |s| s.trim().parse().unwrap_or(1));
    if yama == 0 {
        assert!(line("sibling").starts_with("{\"ok\":true"), "{run:?}");
    } else {
        assert!(line("sibling").contains("ptrace_scope"), "{run:?}");
    }
    let said = line("host");
    assert!(
        said.contains("may follow only the processes of that namespace"),
        "{said}"
    );
}

/// The agent itself outside the node's pid namespace (a DaemonSet without `hostPID`) would name
/// processes by pids the kernel's events do not use: it refuses to start, and says what to do.
#[test]
fn an_agent_outside_the_hosts_pid_namespace_refuses_to_start() {
    tests::require_root();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("agent.sock");
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--fork", "--mount-proc", "--"])
        .arg(montrace_bin())
        .arg("agent")
        .arg("--socket")
        .arg(&socket);
    let run = run_with_timeout(&mut cmd, run_timeout());
    assert_ne!(run.code(), 0, "{run:?}");
    assert!(
        run.stderr.contains("hostPID: true") && run.stderr.contains("host's pid namespace"),
        "{run:?}"
    );
    assert!(!socket.exists());
}
