"""The package as an ordinary user: with the wheel's own binary it polls /proc, says so once per
process, and its figures say so; with a copy granted CAP_BPF + CAP_PERFMON (`montrace setcap`),
named by MONTRACE_BIN or found on PATH, it tracks exactly, through `montrace.run`,
`montrace.monitor` and `montrace.monitored` alike, and `montrace.doctor()` says which binary.
The run directories belong to the user."""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

import montrace
from conftest import owners

SCRIPT = r"""
import json, subprocess, sys, montrace
n = int(sys.argv[2])
run = montrace.run(["sh", "-c", "for i in " + " ".join(["x"] * n) + "; do /bin/true; done"],
                   out=sys.argv[1] + "/run", interval=0.05)
with montrace.monitor(interval=0.05, out=sys.argv[1] + "/monitor") as m:
    for _ in range(n // 20):
        subprocess.run(["/bin/true"], check=True)
result, called = montrace.monitored(out=sys.argv[1] + "/monitored")(lambda: 42)()
found = montrace.doctor()
print(json.dumps({
    "run_mode": run.info["tracking_mode"],
    "run_processes": len(run.processes),
    "run_true": int((run.processes.filename == "/bin/true").sum()),
    "run_exact": run.resources["exact"],
    "run_critical_path_s": run.resources["critical_path_s"],
    "run_avg_parallelism": run.resources["avg_parallelism"],
    "run_pids": sorted(int(p) for p in run.processes.pid),
    "monitor_pids": sorted(int(p) for p in m.run.processes.pid),
    "own_pid": __import__("os").getpid(),
    "monitor_mode": m.run.info["tracking_mode"],
    "monitor_true": int((m.run.processes.filename == "/bin/true").sum()),
    "monitor_montrace": int((m.run.processes.comm == "montrace").sum()),
    "monitored": [result, called["tracking_mode"]],
    "binary": montrace.binary(),
    "doctor": [found.binary, found.exact, found.mode, found.chosen_because],
}))
"""


@pytest.fixture
def capable_copy() -> Iterator[Path]:
    """A root-owned copy of the wheel's montrace (0755) in a root-owned directory, granted."""
    directory = Path(tempfile.mkdtemp(prefix="montrace-capable-"))
    os.chmod(directory, 0o755)
    copy = directory / "montrace"
    shutil.copy(montrace.binary(), copy)
    os.chmod(copy, 0o755)
    import subprocess

    granted = subprocess.run([str(copy), "setcap", str(copy)], capture_output=True, text=True)
    assert granted.returncode == 0, granted.stderr
    try:
        yield copy
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def wheel_binary() -> str:
    return os.path.join(os.path.dirname(sys.executable), "montrace")


def test_an_ordinary_user_gets_polling_said_once(user) -> None:
    result = user.run([sys.executable, "-c", SCRIPT, str(user.home), "20"])
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["run_mode"] == figures["monitor_mode"] == "polling"
    assert figures["monitored"] == [42, "polling"]
    # Three montraces started (a run, two attaches), the notice said once by each kind: the two
    # attaches' differ only by their pid.
    assert result.stderr.count("no eBPF") == 2, result.stderr
    assert result.stderr.count("montrace attach") == 1, result.stderr
    # What polling could not see is not shown.
    assert figures["run_exact"] is False
    assert figures["run_critical_path_s"] is None and figures["run_avg_parallelism"] is None
    assert figures["binary"] == wheel_binary()
    assert figures["doctor"] == [wheel_binary(), False, "polling", "the wheel's own binary"]
    assert owners(user.home / "run") == owners(user.home / "monitor") == {user.uid}


def test_an_ordinary_user_with_the_granted_binary_tracks_exactly(user, capable_copy: Path) -> None:
    result = user.run([sys.executable, "-c", SCRIPT, str(user.home), "1000"],
                      env={"MONTRACE_BIN": str(capable_copy)})
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["run_mode"] != "polling" and figures["monitor_mode"] != "polling", figures
    assert figures["run_true"] == 1000
    assert figures["monitor_true"] == 50
    assert "no eBPF" not in result.stderr
    assert owners(user.home / "run") == owners(user.home / "monitor") == {user.uid}


def test_an_ordinary_user_with_a_granted_binary_on_path_tracks_exactly(user, capable_copy: Path) -> None:
    """The documented install: the wheel in the user's environment, `sudo montrace setcap` on a
    montrace on PATH. The package runs the granted one, not the wheel's own."""
    path = f"{capable_copy.parent}:/usr/local/bin:/usr/bin:/bin"
    result = user.run([sys.executable, "-c", SCRIPT, str(user.home), "20"], env={"PATH": path})
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["binary"] == str(capable_copy)
    assert figures["doctor"][:2] == [str(capable_copy), True], figures["doctor"]
    assert figures["doctor"][2] in ("tp_btf", "tracepoint")
    assert "granted" in figures["doctor"][3]
    assert figures["run_mode"] in ("tp_btf", "tracepoint") and figures["monitor_mode"] != "polling"
    assert (figures["run_processes"], figures["run_true"]) == (21, 20)  # 21 of 21: sh and 20
    assert figures["run_exact"] is True and figures["run_critical_path_s"] > 0
    assert figures["monitored"][0] == 42 and figures["monitored"][1] != "polling"
    assert "no eBPF" not in result.stderr
    assert owners(user.home / "run") == owners(user.home / "monitor") == {user.uid}


def test_an_ordinary_users_wheel_binary_records_exactly_through_the_agent(user, agent: Path) -> None:
    """The resident agent: the wheel's own binary, with no capability, finds the agent's socket
    (named by MONTRACE_AGENT_SOCKET here; /run/montrace/agent.sock by default) and
    `montrace.run` is exact: 21 processes of 21, files the user's."""
    script = (
        "import json, sys, montrace\n"
        "run = montrace.run(['sh', '-c', 'for i in $(seq 20); do /bin/true; done'], out=sys.argv[1])\n"
        "d = montrace.doctor()\n"
        "print(json.dumps([run.info['tracking_mode'], len(run.processes), "
        "int((run.processes.filename == '/bin/true').sum()), montrace.binary(), [d.exact, d.mode], d.verdict]))\n"
    )
    result = user.run([sys.executable, "-c", script, str(user.home / "run")],
                      env={"MONTRACE_AGENT_SOCKET": str(agent)})
    assert result.returncode == 0, result.stderr
    mode, processes, true, binary, doctor, verdict = json.loads(result.stdout.strip().splitlines()[-1])
    assert binary == wheel_binary()
    # montrace.doctor() says so too.
    assert doctor == [True, mode], verdict
    assert mode in ("tp_btf", "tracepoint"), result.stderr
    # sh, seq and 20 /bin/true: every one, as only kernel events give.
    assert (processes, true) == (22, 20), result.stderr
    assert "no eBPF" not in result.stderr
    assert owners(user.home / "run") == {user.uid}


def _yama_ptrace_scope() -> int:
    try:
        return int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text())
    except (OSError, ValueError):
        return 0


def test_monitor_and_monitored_go_through_the_agent_as_run_does(user, agent: Path) -> None:
    """`montrace.monitor` and `montrace.monitored` start `montrace attach`, which asks the agent
    as `montrace run` does: with the wheel's own binary and no capability, all three are exact.
    (Under Yama's ptrace_scope 1 the agent follows only a client's own child, as a debugger
    would: `monitor()`, whose montrace is this program's child, then polls, and says why.)"""
    result = user.run([sys.executable, "-c", SCRIPT, str(user.home), "20"],
                      env={"MONTRACE_AGENT_SOCKET": str(agent)})
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["binary"] == wheel_binary()
    assert figures["run_mode"] in ("tp_btf", "tracepoint"), result.stderr
    assert (figures["run_processes"], figures["run_true"]) == (21, 20)
    if _yama_ptrace_scope() == 0:
        assert figures["monitor_mode"] == figures["run_mode"], result.stderr
        assert figures["monitor_true"] == 1
        # The program's own montrace attach is its child, alive at the attach: never its tree.
        assert figures["monitor_montrace"] == 0, result.stderr
        assert figures["monitored"] == [42, figures["run_mode"]], result.stderr
        assert "no eBPF" not in result.stderr
    else:
        assert figures["monitor_mode"] == "polling" and "ptrace_scope" in result.stderr
    assert owners(user.home / "run") == owners(user.home / "monitor") == {user.uid}


def test_in_a_pid_namespace_of_its_own_run_monitor_and_monitored_are_exact_in_its_pids(
        user, agent: Path) -> None:
    """A notebook in a container without the host's pids: the same three through the agent are
    exact, and name processes by the container's pids (the program's own, as `os.getpid()`
    says, among `monitor()`'s), not the host's."""
    result = user.run([sys.executable, "-c", SCRIPT, str(user.home), "20"],
                      env={"MONTRACE_AGENT_SOCKET": str(agent)}, own_pid_namespace=True)
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["run_mode"] in ("tp_btf", "tracepoint"), result.stderr
    assert (figures["run_processes"], figures["run_true"]) == (21, 20)
    # Python is pid 1 there (unshare's child, then setpriv's exec): every pid is small.
    assert figures["own_pid"] == 1
    assert max(figures["run_pids"]) < 1000, figures
    if _yama_ptrace_scope() == 0:
        assert figures["monitor_mode"] == figures["run_mode"], result.stderr
        assert figures["monitor_true"] == 1
        assert figures["own_pid"] in figures["monitor_pids"], figures
        assert max(figures["monitor_pids"]) < 1000, figures
        assert figures["monitored"] == [42, figures["run_mode"]], result.stderr
    assert "pid namespace" not in result.stderr, result.stderr
