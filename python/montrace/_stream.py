"""Follows a run's ``--stream`` file as it grows and hands each line, decoded, to a callback."""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional

Line = Dict[str, Any]
Callback = Callable[[Line], None]


class StreamFollower:
    """Reads whole lines from ``path`` (created by montrace) every ``poll_s`` and calls
    ``callback`` with each; the last line montrace writes has ``"final": true``.

    An exception raised by the callback stops the calls; it is kept in ``error`` for the caller
    to raise once the run is over (the run itself is never stopped by a callback)."""

    def __init__(self, path: str, callback: Optional[Callback], poll_s: float = 0.05) -> None:
        self.path = path
        self.callback = callback
        self.poll_s = poll_s
        self.lines = 0
        self.first = threading.Event()
        self.final: Optional[Line] = None
        self.breach: Optional[Line] = None
        self.error: Optional[BaseException] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="montrace-stream", daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        handle = None
        pending = b""
        try:
            while True:
                if handle is None:
                    try:
                        handle = open(self.path, "rb")
                    except FileNotFoundError:
                        if self._stop.is_set():
                            return
                        time.sleep(self.poll_s)
                        continue
                chunk = handle.read()
                if chunk:
                    pending += chunk
                    *whole, pending = pending.split(b"\n")
                    for raw in whole:
                        if raw.strip():
                            self._deliver(json.loads(raw))
                elif self._stop.is_set() or self.final is not None:
                    return
                else:
                    time.sleep(self.poll_s)
        finally:
            if handle is not None:
                handle.close()
            self.first.set()

    def _deliver(self, line: Line) -> None:
        self.lines += 1
        self.first.set()
        if line.get("type") == "limit":
            self.breach = line
        if line.get("final"):
            self.final = line
        if self.callback is not None and self.error is None:
            try:
                self.callback(line)
            except BaseException as err:  # kept, raised by the caller after the run
                self.error = err

    def stop(self) -> None:
        """Reads what is left (montrace has ended) and stops."""
        self._stop.set()
        self._thread.join()


def read_stream(path: "str | os.PathLike[str]") -> List[Line]:
    """Every line of a stream file, decoded."""
    with open(path, "rb") as handle:
        return [json.loads(raw) for raw in handle if raw.strip()]
