//! Socket bytes per process from montrace's `sock_send_length`/`sock_recv_length` programs: a
//! client in the tree sends exactly 10 MiB over loopback TCP to a server in the tree, and a
//! process sends 1 MiB to its child over a unix socket pair; each side's row says exactly that,
//! by address family. Without the BTF tracepoints the counts are unknown (null), not 0.
use std::process::Command;

use tests::{require_root, run_montrace};

const WORKLOAD: &str = r#"
import os, socket
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
port = srv.getsockname()[1]
if os.fork() == 0:
    c = socket.create_connection(("127.0.0.1", port))
    c.sendall(b"x" * (10 << 20)); c.close(); os._exit(0)
conn, _ = srv.accept(); got = 0
while True:
    data = conn.recv(1 << 16)
    if not data:
        break
    got += len(data)
os.wait()
a, b = socket.socketpair()
if os.fork() == 0:
    a.close(); n = 0
    while n < (1 << 20):
        n += len(b.recv(1 << 16))
    os._exit(0)
b.close(); a.sendall(b"y" * (1 << 20)); os.wait()
print(got)
"#;

/// The real interpreter (not a version manager's shim, whose shell scripts would join the tree).
fn python() -> String {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[test]
fn tcp_and_unix_socket_bytes_are_exact_per_process() {
    require_root();
    let python = python();
    let run = run_montrace(&["--tracepoints", "btf"], &[&python, "-c", WORKLOAD]);
    run.assert_code(0);
    assert_eq!(run.stdout.trim(), (10 << 20).to_string());
    let rows = run.processes();
    assert_eq!(rows.len(), 3, "{rows:?}");
    let root = run.root(&rows);
    let (client, child): (Vec<_>, Vec<_>) = rows
        .iter()
        .filter(|p| p.pid != root.pid)
        .partition(|p| p.net_inet_sent_bytes == Some(10 << 20));
    assert_eq!((client.len(), child.len()), (1, 1), "{rows:?}");
    let mib = 1u64 << 20;
    let figures = |p: &tests::Proc| {
        (
            p.net_inet_sent_bytes,
            p.net_inet_received_bytes,
            p.net_unix_sent_bytes,
            p.net_unix_received_bytes,
        )
    };
    assert_eq!(
        figures(client[0]),
        (Some(10 * mib), Some(0), Some(0), Some(0))
    );
    assert_eq!(figures(root), (Some(0), Some(10 * mib), Some(mib), Some(0)));
    assert_eq!(figures(child[0]), (Some(0), Some(0), Some(0), Some(mib)));
}

#[test]
fn classic_tracepoints_leave_socket_bytes_unknown() {
    require_root();
    let python = python();
    let run = run_montrace(&["--tracepoints", "classic"], &[&python, "-c", WORKLOAD]);
    run.assert_code(0);
    for p in run.processes() {
        assert_eq!(p.net_inet_sent_bytes, None, "{p:?}");
        assert_eq!(p.net_unix_received_bytes, None, "{p:?}");
    }
}
