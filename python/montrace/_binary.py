"""Where the `montrace` binary is, and how the package calls it."""
from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
import sysconfig
import threading
from collections import deque
from typing import IO, Deque, List, Optional, Set


class MontraceError(RuntimeError):
    """montrace itself failed (bad arguments, no binary, a run directory it could not write).

    ``stderr`` holds the last lines montrace printed."""

    def __init__(self, message: str, stderr: str = "") -> None:
        super().__init__(message + (f"\n{stderr}" if stderr else ""))
        self.stderr = stderr


#: Capabilities (linux/capability.h) that let montrace load its eBPF programs: CAP_SYS_ADMIN, or
#: CAP_BPF with CAP_PERFMON (what `sudo montrace setcap` grants; monitor/src/kernel/privilege.rs).
CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 21, 38, 39
_VFS_CAP_REVISIONS = (0x0200_0000, 0x0300_0000)


def parse_file_caps(value: bytes) -> Optional[int]:
    """The permitted capabilities of a ``security.capability`` value (revision 2 or 3, whose
    first 20 bytes agree), as a bit mask; None when it is not one of those."""
    if len(value) < 20:
        return None
    words = struct.unpack_from("<5I", value)
    if words[0] & 0xFF00_0000 not in _VFS_CAP_REVISIONS:
        return None
    return words[1] | (words[3] << 32)


def can_trace(caps: int) -> bool:
    """True when a capability mask lets montrace load and attach its eBPF programs."""
    has = lambda cap: bool(caps & (1 << cap))  # noqa: E731
    return has(CAP_SYS_ADMIN) or (has(CAP_BPF) and has(CAP_PERFMON))


def file_caps(path: str) -> Optional[int]:
    """The capabilities a binary file is granted (its ``security.capability`` attribute)."""
    try:
        return parse_file_caps(os.getxattr(path, "security.capability"))
    except OSError:  # no such attribute, or a file system without extended attributes
        return None


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _wheel_binary() -> Optional[str]:
    """The binary the wheel installed next to this interpreter."""
    for directory in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        candidate = os.path.join(directory, "montrace")
        if _executable(candidate):
            return candidate
    return None


def _on_path() -> List[str]:
    """Every ``montrace`` on PATH, in PATH's order (each file once)."""
    found: List[str] = []
    for directory in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(directory or ".", "montrace")
        if _executable(candidate) and not any(os.path.samefile(candidate, f) for f in found):
            found.append(candidate)
    return found


def choose_binary() -> "tuple[str, str]":
    """The montrace binary this package runs, and why that one.

    In order: ``$MONTRACE_BIN``; else, for an ordinary user, the first ``montrace`` on PATH that
    is granted the capabilities for exact tracking (``sudo montrace setcap``), since the wheel's
    own copy has none and would poll /proc; else (root, who gets exact tracking from any copy,
    or no granted copy) the wheel's own binary, which matches this package's version; else the
    first ``montrace`` on PATH."""
    env = os.environ.get("MONTRACE_BIN")
    if env:
        return env, "MONTRACE_BIN"
    wheel = _wheel_binary()
    path = _on_path()
    if os.geteuid() != 0:
        for candidate in ([wheel] if wheel else []) + path:
            caps = file_caps(candidate)
            if caps is not None and can_trace(caps):
                return candidate, "granted CAP_BPF + CAP_PERFMON (montrace setcap)"
    if wheel:
        return wheel, "the wheel's own binary" + (" (root)" if os.geteuid() == 0 else "")
    if path:
        return path[0], "the first montrace on PATH"
    raise MontraceError(
        "no montrace binary: install the montrace wheel into this environment "
        "(pip install montrace-*.whl), or set MONTRACE_BIN to the binary's path"
    )


def binary() -> str:
    """The montrace binary the package runs (see :func:`choose_binary`)."""
    return choose_binary()[0]


class StderrRelay:
    """Copies a child's stderr to ours line by line as it comes (so a notebook shows montrace's
    warnings in the cell), keeping the last lines for error messages.

    A notice montrace gives every run of this machine (no run cgroup, no eBPF, ...) is shown
    once per Python process, not once per call: a line that begins ``montrace:`` and is not an
    error goes to stderr the first time its text comes, numbers aside (a pid, a run's time); it
    is still kept for messages."""

    _said: Set[str] = set()
    _said_lock = threading.Lock()

    def __init__(self, pipe: IO[bytes], keep: int = 40) -> None:
        self._pipe = pipe
        self._last: Deque[str] = deque(maxlen=keep)
        self._thread = threading.Thread(target=self._copy, name="montrace-stderr", daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        for raw in iter(self._pipe.readline, b""):
            line = raw.decode("utf-8", "replace")
            self._last.append(line.rstrip("\n"))
            if not self._first_time(line):
                continue
            try:
                sys.stderr.write(line)
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
        self._pipe.close()

    @classmethod
    def _first_time(cls, line: str) -> bool:
        if not line.startswith("montrace:") or line.startswith("montrace: error"):
            return True
        key = re.sub(r"\d+", "0", line)  # the same notice about another pid or run
        with cls._said_lock:
            if key in cls._said:
                return False
            cls._said.add(key)
            return True

    def finish(self) -> str:
        self._thread.join()
        return "\n".join(self._last)


def spawn(args: List[str], env: Optional[dict] = None, cwd: Optional[str] = None,
          stdin: Optional[int] = None) -> "tuple[subprocess.Popen[bytes], StderrRelay]":
    """Starts montrace with its stderr relayed."""
    try:
        proc = subprocess.Popen(args, stderr=subprocess.PIPE, env=env, cwd=cwd, stdin=stdin)
    except OSError as err:
        raise MontraceError(f"cannot start {args[0]}: {err}") from err
    assert proc.stderr is not None
    return proc, StderrRelay(proc.stderr)
