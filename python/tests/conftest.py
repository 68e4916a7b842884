"""Fixtures of the package's tests: they run against the installed wheel (its montrace binary),
as root in CI (`cargo xtask test`), with the eBPF tracking montrace has there."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

import montrace


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """A run directory path that does not exist yet."""
    return tmp_path / "run"


class User:
    def __init__(self, name: str) -> None:
        self.name = name
        self.uid = int(subprocess.check_output(["id", "-u", name]))
        self.gid = int(subprocess.check_output(["id", "-g", name]))
        self.home = Path(f"/home/{name}")

    def run(self, argv: "list[str]", env: "dict[str, str] | None" = None,
            timeout: float = 120, own_pid_namespace: bool = False) -> subprocess.CompletedProcess:
        """argv as this user (real and effective ids, no supplementary groups), in their home,
        with their HOME and the PATH given; with `own_pid_namespace`, in a pid namespace (and
        /proc) of its own, as in a container without the host's pids."""
        environment = {"HOME": str(self.home), "PATH": "/usr/local/bin:/usr/bin:/bin", "USER": self.name}
        environment.update(env or {})
        namespace = ["unshare", "--pid", "--fork", "--mount-proc", "--"] if own_pid_namespace else []
        return subprocess.run(
            [*namespace, "setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups",
             "--", *argv],
            cwd=self.home, env=environment, capture_output=True, text=True, timeout=timeout,
        )


@pytest.fixture
def user() -> Iterator[User]:
    """An ordinary user made for the test (useradd), removed with its home afterwards."""
    if os.geteuid() != 0:
        pytest.fail("this test makes an ordinary user: run the suite as root (cargo xtask test)")
    name = f"mtpy{os.getpid()}"
    subprocess.run(["userdel", "-r", name], capture_output=True)
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", "--user-group", name], check=True)
    try:
        yield User(name)
    finally:
        subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
        subprocess.run(["userdel", "-r", name], capture_output=True)
        shutil.rmtree(f"/home/{name}", ignore_errors=True)


class LimitedCgroup:
    """A cgroup limited to half a core and 256 MiB (cgroup v2 where it has cpu and memory,
    else one directory in each v1 hierarchy); ``wrap(argv)`` starts argv inside it."""

    MEMORY = 256 << 20

    def __init__(self) -> None:
        name = f"montrace-pycapacity-{os.getpid()}"
        v2 = Path("/sys/fs/cgroup")
        controllers = (v2 / "cgroup.controllers").read_text() if (v2 / "cgroup.controllers").exists() else ""
        if "cpu" in controllers.split() and "memory" in controllers.split():
            d = v2 / name
            d.mkdir()
            (d / "cpu.max").write_text("50000 100000")
            (d / "memory.max").write_text(str(self.MEMORY))
            self.dirs = [d]
        else:
            cpu_mount = next(Path(p) for p in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct")
                             if Path(p, "cpu.cfs_quota_us").exists())
            cpu = cpu_mount / name
            cpu.mkdir()
            (cpu / "cpu.cfs_period_us").write_text("100000")
            (cpu / "cpu.cfs_quota_us").write_text("50000")
            memory = Path("/sys/fs/cgroup/memory") / name
            memory.mkdir()
            (memory / "memory.limit_in_bytes").write_text(str(self.MEMORY))
            self.dirs = [cpu, memory]

    def wrap(self, argv: "list[str]") -> "list[str]":
        moves = "".join(f"echo $$ > '{d}/cgroup.procs'; " for d in self.dirs)
        return ["sh", "-c", moves + 'exec "$@"', "sh", *argv]

    def remove(self) -> None:
        for d in self.dirs:
            try:
                d.rmdir()
            except OSError:
                pass


@pytest.fixture
def limited_cgroup() -> Iterator[LimitedCgroup]:
    if os.geteuid() != 0:
        pytest.fail("this test makes a cgroup: run the suite as root (cargo xtask test)")
    cgroup = LimitedCgroup()
    try:
        yield cgroup
    finally:
        cgroup.remove()


def owners(path: Path) -> "set[int]":
    """Every uid that owns something in ``path``."""
    found = {path.stat().st_uid}
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            found.add(os.lstat(os.path.join(root, name)).st_uid)
    return found


@pytest.fixture
def agent() -> Iterator[Path]:
    """`montrace agent` (the wheel's binary, as root) on a socket of its own; stopped after."""
    directory = Path(tempfile.mkdtemp(prefix="montrace-agent-"))
    os.chmod(directory, 0o755)
    socket = directory / "agent.sock"
    process = subprocess.Popen([montrace.binary(), "agent", "--socket", str(socket)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not socket.exists():
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the agent made no socket"
            time.sleep(0.02)
        yield socket
    finally:
        process.terminate()
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        shutil.rmtree(directory, ignore_errors=True)
