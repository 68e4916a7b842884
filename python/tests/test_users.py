"""The package as an ordinary user: with the wheel's own binary it polls /proc and says so once;
with a copy granted CAP_BPF + CAP_PERFMON (`montrace setcap`) it tracks exactly, through
`montrace.run` and `montrace.monitor` alike. The run directories belong to the user."""
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

SCRIPT = r"""
import json, subprocess, sys, montrace
n = int(sys.argv[2])
run = montrace.run(["sh", "-c", "for i in " + " ".join(["x"] * n) + "; do /bin/true; done"],
                   out=sys.argv[1] + "/run", interval=0.05)
with montrace.monitor(interval=0.05, out=sys.argv[1] + "/monitor") as m:
    for _ in range(n // 20):
        subprocess.run(["/bin/true"], check=True)
print(json.dumps({
    "run_mode": run.info["tracking_mode"],
    "run_true": int((run.processes.filename == "/bin/true").sum()),
    "monitor_mode": m.run.info["tracking_mode"],
    "monitor_true": int((m.run.processes.filename == "/bin/true").sum()),
}))
"""


def owners(path: Path) -> "set[int]":
    found = {path.stat().st_uid}
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            found.add(os.lstat(os.path.join(root, name)).st_uid)
    return found


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


def test_an_ordinary_user_gets_polling_said_once(user) -> None:
    result = user.run([sys.executable, "-c", SCRIPT, str(user.home), "20"])
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["run_mode"] == figures["monitor_mode"] == "polling"
    assert result.stderr.count("no eBPF") == 2, result.stderr  # once per montrace started
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
