"""Fixtures of the package's tests: they run against the installed wheel (its montrace binary),
as root in CI (`cargo xtask test`), with the eBPF tracking montrace has there."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


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

    def run(self, argv: "list[str]", env: "dict[str, str] | None" = None) -> subprocess.CompletedProcess:
        """argv as this user (real and effective ids, no supplementary groups), in their home,
        with their HOME and the PATH given."""
        environment = {"HOME": str(self.home), "PATH": "/usr/local/bin:/usr/bin:/bin", "USER": self.name}
        environment.update(env or {})
        return subprocess.run(
            ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--", *argv],
            cwd=self.home, env=environment, capture_output=True, text=True, timeout=120,
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
