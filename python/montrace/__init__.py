"""montrace for Python: run a command, or monitor this program or one function, under montrace,
and read any run directory as DataFrames.

>>> import montrace
>>> run = montrace.run(["make", "-j2"])              # a command
>>> with montrace.monitor() as m:                    # this program and what it starts
...     with m.phase("load"):
...         ...
>>> m.resources["cpu_s"]
>>> montrace.load("montrace-runs/...").processes     # any run directory
>>> print(montrace.doctor())                         # which binary, exact or polling

See docs/python.md."""
from ._api import (
    CommandFailed,
    LimitExceeded,
    Monitor,
    monitor,
    monitored,
    run,
)
from ._binary import MontraceError, binary
from ._doctor import Diagnosis, doctor
from ._load import TABLES, Run, load
from ._stream import read_stream

__all__ = [
    "TABLES",
    "CommandFailed",
    "Diagnosis",
    "LimitExceeded",
    "Monitor",
    "MontraceError",
    "Run",
    "binary",
    "doctor",
    "load",
    "monitor",
    "monitored",
    "read_stream",
    "run",
]
