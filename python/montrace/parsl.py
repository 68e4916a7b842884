"""Parsl: each task of a ``bash_app`` recorded as a montrace run, exactly, on the worker.

>>> from parsl import bash_app
>>> import montrace.parsl
>>> @bash_app
... @montrace.parsl.recorded(out="/shared/montrace-runs", labels={"workflow": "align"})
... def align(sample, stdout=None):
...     return f"bwa mem ref.fa {sample}.fq > {sample}.sam"

``recorded`` goes under ``@bash_app``: Parsl calls the function on the worker to get the task's
command line, and ``recorded`` hands Parsl that line wrapped in ``montrace run``. So the task's
whole tree is recorded where it runs, as its own run directory, labelled with the app, the
task's key and what the task asked for (``parsl_resource_specification``); Parsl still gets the
command's exit status (montrace exits with it) and its stdout/stderr. Where the worker's node
runs montrace's agent, an ordinary user's task is exact with no privilege (docs/cluster.md).

This module does not import Parsl: it only rewrites the command line."""
from __future__ import annotations

import functools
import hashlib
import os
import re
import shlex
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Union

from ._api import Limits, _record_args, _run_dir_in
from ._binary import binary

# Parsl's own keyword arguments of a bash_app: not part of what makes a task itself.
_PARSL_KWARGS = ("stdout", "stderr", "walltime", "parsl_resource_specification")

# parsl_resource_specification's keys, as labels (Parsl's units: memory in MB, time in s).
_REQUESTED = {"cores": "parsl.requested_cores", "memory": "parsl.requested_memory_mb",
              "running_time": "parsl.requested_running_time_s"}

# What the worker pool says about itself (HighThroughputExecutor sets them in each worker).
_WORKER_ENV = {"PARSL_WORKER_RANK": "parsl.worker_rank", "PARSL_WORKER_BLOCK_ID": "parsl.block"}


def task_key(fn: Callable[..., Any], args: Any, kwargs: Mapping[str, Any]) -> str:
    """The task's key: the app's name and a hash of its arguments (as Dask names a task), the
    same for the same call on any worker; Parsl's own keyword arguments are left out."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", getattr(fn, "__name__", "app")).strip("_") or "app"
    mine = sorted((k, v) for k, v in kwargs.items() if k not in _PARSL_KWARGS)
    digest = hashlib.sha256(repr((tuple(args), mine)).encode("utf-8", "replace")).hexdigest()
    return f"{name}-{digest[:12]}"


def task_labels(fn: Callable[..., Any], key: str, kwargs: Mapping[str, Any],
                environ: Mapping[str, str], extra: Mapping[str, Any]) -> Dict[str, str]:
    """The labels of a task's run: the app, the key, the worker, what the task asked for, then
    the caller's own (which win)."""
    labels = {"parsl.app": getattr(fn, "__name__", "app"), "parsl.key": key}
    for var, label in _WORKER_ENV.items():
        if environ.get(var):
            labels[label] = environ[var]
    spec = kwargs.get("parsl_resource_specification") or {}
    for name, label in _REQUESTED.items():
        if spec.get(name) is not None:
            labels[label] = str(spec[name])
    labels.update({str(k): str(v) for k, v in extra.items()})
    return labels


def wrap_command(line: str, montrace: str, run_dir: Path, labels: Mapping[str, str],
                 record: "list[str]") -> str:
    """``line`` as the command of a ``montrace run`` that writes ``run_dir``: a bash line for
    Parsl's ``Popen(shell=True, executable="/bin/bash")``. ``exec`` makes montrace the task's
    process (Parsl's walltime signal reaches it, and it passes the signal to the tree); the
    line runs in ``/bin/bash -c`` as Parsl would run it."""
    argv = [montrace, "run", "-o", str(run_dir), *record]
    for key, value in labels.items():
        argv += ["--label", f"{key}={value}"]
    argv += ["--", "/bin/bash", "-c", line]
    return "exec " + " ".join(shlex.quote(a) for a in argv)


def recorded(func: Optional[Callable[..., str]] = None, *,
             out: "Union[str, os.PathLike[str]]" = "montrace-runs",
             labels: Optional[Mapping[str, Any]] = None, limits: Optional[Limits] = None,
             interval: Union[str, float, None] = None,
             key: Optional[Callable[..., str]] = None) -> Any:
    """Decorator for the function of a Parsl ``bash_app`` (put it under ``@bash_app``): each
    task's command runs under ``montrace run``, into a new directory ``OUT/<UTC time>-<key>-…``
    made on the worker (``out`` must be where the workers can write: a shared filesystem for
    remote workers, then ``montrace publish`` gathers the runs into a dataset).

    Each run is labelled ``parsl.app``, ``parsl.key`` (``key(*args, **kwargs)``, or
    :func:`task_key`), ``parsl.worker_rank`` and ``parsl.block`` (HighThroughputExecutor), the
    task's ``parsl_resource_specification`` (``parsl.requested_cores``,
    ``parsl.requested_memory_mb``, ``parsl.requested_running_time_s``) and ``labels``.
    ``limits`` (as in :func:`montrace.run`) stop a task's tree when it crosses one: montrace
    exits with 124 and Parsl sees the task fail with that status."""
    record = _record_args(interval, limits, False, ())  # checked here, where it is decorated
    extra = dict(labels or {})

    def decorate(fn: Callable[..., str]) -> Callable[..., str]:
        @functools.wraps(fn)
        def command(*args: Any, **kwargs: Any) -> str:
            line = fn(*args, **kwargs)
            if not isinstance(line, str):
                return line  # Parsl says what it expected
            name = key(*args, **kwargs) if key is not None else task_key(fn, args, kwargs)
            run_dir = _run_dir_in(Path(out), _Named(name))
            tags = task_labels(fn, name, kwargs, os.environ, extra)
            # The binary is chosen on the worker, where the command runs.
            return wrap_command(line, binary(), run_dir, tags, record)

        return command

    return decorate(func) if func is not None else decorate


class _Named:
    """What ``_run_dir_in`` takes a directory name from."""

    def __init__(self, name: str) -> None:
        self.__name__ = name
