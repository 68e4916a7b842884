"""Where the `montrace` binary is, and how the package calls it."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import threading
from collections import deque
from typing import IO, Deque, List, Optional


class MontraceError(RuntimeError):
    """montrace itself failed (bad arguments, no binary, a run directory it could not write).

    ``stderr`` holds the last lines montrace printed."""

    def __init__(self, message: str, stderr: str = "") -> None:
        super().__init__(message + (f"\n{stderr}" if stderr else ""))
        self.stderr = stderr


def binary() -> str:
    """The montrace binary: ``$MONTRACE_BIN``, else the one the wheel installed next to this
    interpreter, else the first on ``PATH``."""
    env = os.environ.get("MONTRACE_BIN")
    if env:
        return env
    for directory in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        candidate = os.path.join(directory, "montrace")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("montrace")
    if found:
        return found
    raise MontraceError(
        "no montrace binary: install the montrace wheel into this environment "
        "(pip install montrace-*.whl), or set MONTRACE_BIN to the binary's path"
    )


class StderrRelay:
    """Copies a child's stderr to ours line by line as it comes (so a notebook shows montrace's
    warnings in the cell), keeping the last lines for error messages."""

    def __init__(self, pipe: IO[bytes], keep: int = 40) -> None:
        self._pipe = pipe
        self._last: Deque[str] = deque(maxlen=keep)
        self._thread = threading.Thread(target=self._copy, name="montrace-stderr", daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        for raw in iter(self._pipe.readline, b""):
            line = raw.decode("utf-8", "replace")
            self._last.append(line.rstrip("\n"))
            try:
                sys.stderr.write(line)
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
        self._pipe.close()

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
