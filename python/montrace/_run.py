"""The :class:`Run` the package hands out: a run directory (``_load.Run``) that says how exactly
it was tracked, and keeps out of its figures what polling could not see."""
from __future__ import annotations

import os
import re
from datetime import datetime, timezone
from typing import Any, Dict, Optional

import pyarrow as pa
import pyarrow.compute as pc

from . import _load

#: Figures that need every process's start and end within the run: where the time went over the
#: tree (run.json ``time``). A polled run misses the processes shorter than its interval and sees
#: the others' ends one interval late; an attached tree's root (``montrace.monitor()``'s own
#: process, ``monitored``'s child waiting for montrace) started before the run, and its life
#: before the run would count on the path: such runs have none.
EXACT_ONLY = ("critical_path_s", "avg_parallelism")


def _epoch_ns(text: str) -> Optional[int]:
    """Nanoseconds since the epoch of an RFC 3339 UTC time (``...T20:06:11.511746Z``)."""
    found = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(?:Z|\+00:00)$", text or "")
    if not found:
        return None
    seconds = datetime.strptime(found[1], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    return int(seconds) * 10**9 + int((found[2] or "0").ljust(9, "0"))


def _first_start_ns(processes: pa.Table) -> Optional[int]:
    if processes.num_rows == 0 or "start_time" not in processes.column_names:
        return None
    column = processes.column("start_time")
    if pa.types.is_timestamp(column.type):
        column = pc.cast(pc.cast(column, pa.timestamp("ns")), pa.int64())
    first = pc.min(column).as_py()
    return None if first is None else int(first)


class Run(_load.Run):
    __doc__ = _load.Run.__doc__

    @property
    def exact(self) -> bool:
        """True when the tree was followed exactly (eBPF), False when montrace polled /proc
        (``tracking_mode: "polling"``: processes shorter than the interval may be missing)."""
        return self.info.get("tracking_mode") not in ("polling", None)

    @property
    def root_predates_run(self) -> bool:
        """True when the tree's root was running before montrace started following it (an
        attach): the run saw only the end of its life."""
        began = _epoch_ns(str(self.info.get("start_time", "")))
        first = _first_start_ns(self.table("processes"))
        return began is not None and first is not None and first < began

    @property
    def resources(self) -> Dict[str, Any]:
        figures = super().resources
        figures["exact"] = self.exact
        if not self.exact or self.root_predates_run:
            for key in EXACT_ONLY:
                figures[key] = None
        return figures

    def __repr__(self) -> str:
        text = super().__repr__()
        if not self.exact:
            text = text[:-1] + ", polled /proc: processes shorter than the interval may be missing>"
        return text


def load(path: "str | os.PathLike[str]", frames: str = "pandas") -> Run:
    """Opens a run directory (finished, running or killed)."""
    return Run(path, frames=frames)
