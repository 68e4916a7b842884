"""Running a command, monitoring this program, and monitoring one function call."""
from __future__ import annotations

import contextlib
import functools
import os
import pickle
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, TypeVar, Union

from ._binary import MontraceError, binary, spawn
from ._load import Run, load
from ._stream import Callback, StreamFollower

#: montrace's own exit statuses (monitor/src/cli.rs): a limit stopped the run; montrace failed.
EXIT_LIMIT_BREACHED = 124
EXIT_MONTRACE_FAILED = 125
EXIT_USAGE = 2

Limits = Mapping[str, Union[str, int, float]]
T = TypeVar("T")


class LimitExceeded(RuntimeError):
    """A ``limits=`` value was crossed and montrace stopped the tree.

    ``limit`` is the key (``rss``, ``cpu``, ``wall``, ``procs``, ``gpu-mem``), ``threshold`` the
    limit and ``value`` what was seen, in the metric's unit (bytes, seconds, processes); ``run``
    is the recorded run."""

    def __init__(self, limit: str, threshold: float, value: float, run: Optional[Run] = None) -> None:
        super().__init__(f"limit {limit} exceeded: {value:g} seen, limit {threshold:g}")
        self.limit = limit
        self.threshold = threshold
        self.value = value
        self.run = run


class CommandFailed(RuntimeError):
    """``run(..., check=True)``: the command exited with a non-zero status."""

    def __init__(self, status: int, run: Run) -> None:
        super().__init__(f"the command exited with status {status} (run: {run.path})")
        self.status = status
        self.run = run


def _duration(value: Union[str, float, int]) -> str:
    return value if isinstance(value, str) else f"{float(value) * 1000:.0f}ms"


def _record_args(interval: Union[str, float, None], limits: Optional[Limits], report: bool,
                 extra: Sequence[str]) -> List[str]:
    args = ["--quiet"]
    if interval is not None:
        args += ["--interval", _duration(interval)]
    for key, value in (limits or {}).items():
        args += ["--limit", f"{key}={value}"]
    if not report:
        args.append("--no-report")
    return args + list(extra)


def _new_out(out: "Union[str, os.PathLike[str], None]", prefix: str) -> "tuple[Path, Path]":
    """The run directory montrace creates (``out`` or a new temporary one), and a private
    directory for the stream and socket."""
    private = Path(tempfile.mkdtemp(prefix=f"montrace-{prefix}-"))
    return (Path(out) if out is not None else private / "run"), private


def _breach_of(run: Run, follower: Optional[StreamFollower]) -> Optional[LimitExceeded]:
    breach = run.limit_breach or (follower.breach if follower else None)
    if not breach:
        return None
    return LimitExceeded(str(breach["limit"]), float(breach["threshold"]), float(breach["value"]), run)


def run(argv: Sequence[str], *, interval: Union[str, float, None] = None,
        limits: Optional[Limits] = None, out: "Union[str, os.PathLike[str], None]" = None,
        check: bool = False, callback: Optional[Callback] = None,
        stream: "Union[str, os.PathLike[str], None]" = None, report: bool = True,
        env: Optional[Mapping[str, str]] = None, cwd: "Union[str, os.PathLike[str], None]" = None,
        extra_args: Sequence[str] = ()) -> Run:
    """Runs ``argv`` under montrace and returns the recorded :class:`Run`.

    ``interval``: sampling interval (seconds, or a string such as ``"100ms"``). ``limits``: e.g.
    ``{"rss": "2GiB", "wall": "5m"}`` stop the whole tree when crossed. ``out``: the run
    directory (a new one; default: a new temporary directory). ``callback`` receives each line of
    the live stream (a dict) as the run goes, the last one with ``"final": True``; ``stream``
    also keeps the stream at that path. ``check=True`` raises :class:`CommandFailed` on a
    non-zero exit and :class:`LimitExceeded` on a breach."""
    out_dir, private = _new_out(out, "run")
    stream_path = Path(stream) if stream is not None else private / "stream.jsonl"
    args = [binary(), "run", *_record_args(interval, limits, report, extra_args),
            "--out", str(out_dir), "--stream", str(stream_path), "--", *argv]
    follower = StreamFollower(str(stream_path), callback)
    proc, relay = spawn(args, env=dict(env) if env is not None else None,
                        cwd=str(cwd) if cwd is not None else None)
    try:
        status = proc.wait()
    except BaseException:
        # Ctrl-C in Python: montrace forwards it to the command and records the end.
        proc.send_signal(signal.SIGINT)
        proc.wait()
        raise
    finally:
        follower.stop()
        stderr = relay.finish()
    if out is not None:
        # The run is elsewhere: the private directory held only the default stream.
        shutil.rmtree(private, ignore_errors=True)
    if not _is_run_dir(out_dir):
        raise MontraceError(f"montrace exited with status {status} and recorded no run", stderr)
    result = load(out_dir)
    if follower.error is not None:
        raise follower.error
    if check:
        breach = _breach_of(result, follower)
        if breach is not None:
            raise breach
        if status == EXIT_MONTRACE_FAILED:
            raise MontraceError(f"montrace failed (status {status}); the run so far is in {out_dir}", stderr)
        if status != 0:
            raise CommandFailed(status, result)
    return result


def _is_run_dir(path: Path) -> bool:
    return (path / "processes.parquet").is_file() or (path / "processes.parts").is_dir()


class Monitor:
    """``with montrace.monitor() as m:`` follows this Python process and everything it starts
    until the block ends (``montrace attach`` to itself). ``m.mark(label)`` and
    ``with m.phase(label):`` record phase marks. After the block, ``m.run`` is the recorded
    :class:`Run` and ``m.resources`` its figures as a flat dict."""

    def __init__(self, *, interval: Union[str, float, None] = None,
                 out: "Union[str, os.PathLike[str], None]" = None,
                 callback: Optional[Callback] = None, report: bool = True,
                 start_timeout_s: float = 60.0, extra_args: Sequence[str] = ()) -> None:
        self._interval = interval
        self._out = out
        self._callback = callback
        self._report = report
        self._start_timeout_s = start_timeout_s
        self._extra = list(extra_args)
        self._proc: Optional["subprocess.Popen[bytes]"] = None
        self._socket: Optional[socket.socket] = None
        self.run: Optional[Run] = None
        self.resources: Dict[str, Any] = {}

    def __enter__(self) -> "Monitor":
        out_dir, private = _new_out(self._out, "monitor")
        self.out_dir = out_dir
        self._private = private
        self._socket_path = str(private / "marks.sock")
        stream_path = private / "stream.jsonl"
        args = [binary(), "attach", str(os.getpid()),
                *_record_args(self._interval, None, self._report, self._extra),
                "--out", str(out_dir), "--stream", str(stream_path),
                "--mark-socket", self._socket_path]
        self._follower = StreamFollower(str(stream_path), self._callback)
        self._proc, self._relay = spawn(args, stdin=subprocess.DEVNULL)
        # Ready once montrace has found the tree and attached: its first stream line.
        deadline = time.monotonic() + self._start_timeout_s
        while not self._follower.first.wait(0.05):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self._abandon()
                raise MontraceError(
                    f"montrace attach did not start (status {self._proc.returncode})",
                    self._relay.finish(),
                )
        if self._proc.poll() is not None and not self._follower.lines:
            self._abandon()
            raise MontraceError("montrace attach ended at once", self._relay.finish())
        # montrace binds the mark socket right after it has found the tree: a mark sent before
        # would be lost. (Should it fail to bind, it says why; marks then raise.)
        bound_by = time.monotonic() + 5.0
        while not os.path.exists(self._socket_path) and time.monotonic() < bound_by:
            if self._proc.poll() is not None:
                break
            time.sleep(0.01)
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._began = (time.monotonic(), resource.getrusage(resource.RUSAGE_SELF))
        return self

    def _abandon(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._follower.stop()

    def _send(self, kind: str, label: str) -> None:
        if self._socket is None:
            raise MontraceError("marks are recorded only inside the `with montrace.monitor()` block")
        if "\n" in label or not label.strip():
            raise ValueError(f"a mark's label is one non-empty line: {label!r}")
        try:
            self._socket.sendto(f"{kind} {label}".encode(), self._socket_path)
        except OSError as err:
            raise MontraceError(f"the mark {label!r} could not be sent to montrace: {err}") from err

    def mark(self, label: str) -> None:
        """A point mark: "this happened now"."""
        self._send("point", label)

    @contextlib.contextmanager
    def phase(self, label: str) -> Iterator[None]:
        """Brackets a phase: a ``begin`` mark now and an ``end`` mark when the block ends."""
        self._send("begin", label)
        try:
            yield
        finally:
            self._send("end", label)

    def __exit__(self, *exc: Any) -> None:
        assert self._proc is not None
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        ended = (time.monotonic(), resource.getrusage(resource.RUSAGE_SELF))
        # Ctrl-C for montrace attach: it stops following and writes everything.
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)
        status = self._proc.wait()
        self._follower.stop()
        stderr = self._relay.finish()
        if not _is_run_dir(self.out_dir):
            raise MontraceError(f"montrace attach exited with status {status} and recorded no run", stderr)
        self.run = load(self.out_dir)
        self.resources = _with_own_usage(self.run, self._began, ended)
        if self._out is not None:
            # The run is elsewhere: the private directory held the stream and the socket.
            shutil.rmtree(self._private, ignore_errors=True)
        if self._follower.error is not None and exc[0] is None:
            raise self._follower.error


def _with_own_usage(run: Run, began: Any, ended: Any) -> Dict[str, Any]:
    """The run's figures with this process's own share during the block: montrace's exit figures
    cover the processes that ended, and this process is still running, so its CPU time comes
    from the kernel's own accounting (getrusage, every thread) over the block, its peak RSS
    from the samples, and the wall time is the block's."""
    figures = dict(run.resources)
    user = ended[1].ru_utime - began[1].ru_utime
    system = ended[1].ru_stime - began[1].ru_stime
    figures["wall_s"] = ended[0] - began[0]
    figures["cpu_user_s"] = (figures.get("cpu_user_s") or 0.0) + user
    figures["cpu_system_s"] = (figures.get("cpu_system_s") or 0.0) + system
    figures["cpu_s"] = figures["cpu_user_s"] + figures["cpu_system_s"]
    samples = run.table("samples")
    if samples.num_rows:
        own = [r for p, r in zip(samples.column("pid").to_pylist(), samples.column("rss_bytes").to_pylist())
               if p == os.getpid() and r is not None]
        if own:
            figures["peak_process_rss_bytes"] = max(figures.get("peak_process_rss_bytes") or 0, max(own))
    from ._load import _capacity_shares

    figures.update(_capacity_shares(run.info.get("capacity"), figures))
    return figures


def monitor(*, interval: Union[str, float, None] = None,
            out: "Union[str, os.PathLike[str], None]" = None,
            callback: Optional[Callback] = None, report: bool = True,
            extra_args: Sequence[str] = ()) -> Monitor:
    """See :class:`Monitor`."""
    return Monitor(interval=interval, out=out, callback=callback, report=report, extra_args=extra_args)


def _main_file() -> Optional[str]:
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return os.path.abspath(path) if path else None


def monitored(func: Optional[Callable[..., T]] = None, *, limits: Optional[Limits] = None,
              callback: Optional[Callback] = None, return_resources: bool = True,
              interval: Union[str, float, None] = None,
              out: "Union[str, os.PathLike[str], None]" = None) -> Any:
    """Decorator: each call runs in a new Python process under montrace.

    Returns ``(result, resources)`` (or the result alone with ``return_resources=False``). An
    exception inside the function is raised here with its traceback; a crossed limit stops the
    child and raises :class:`LimitExceeded`. The function, its arguments and its result must be
    picklable (a function defined at module level; with ``cloudpickle`` installed, any)."""

    def decorate(fn: Callable[..., T]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            private = Path(tempfile.mkdtemp(prefix="montrace-call-"))
            try:
                return _call(fn, args, kwargs, private)
            finally:
                shutil.rmtree(private, ignore_errors=True)

        def _call(fn: Callable[..., T], args: Any, kwargs: Any, private: Path) -> Any:
            request, reply = private / "call.pickle", private / "result.pickle"
            try:
                import cloudpickle as pickler  # type: ignore[import-not-found]
            except ImportError:
                pickler = pickle
            with open(request, "wb") as handle:
                from_main = getattr(fn, "__module__", None) == "__main__"
                context = {"sys_path": list(sys.path), "main": _main_file() if from_main else None}
                pickle.dump(context, handle)
                try:
                    pickler.dump((fn, args, kwargs), handle)
                except (pickle.PicklingError, AttributeError, TypeError) as err:
                    raise TypeError(
                        f"montrace.monitored runs {fn.__qualname__} in a new process and must "
                        f"pickle it and its arguments: {err} (define it at module level, or "
                        "install cloudpickle)"
                    ) from err
            run_out = Path(out) / time.strftime("%Y%m%d-%H%M%S") if out is not None else None
            recorded = run(
                [sys.executable, "-m", "montrace._child", str(request), str(reply)],
                interval=interval, limits=limits, callback=callback, report=False,
                out=run_out,
            )
            breach = _breach_of(recorded, None)
            if breach is not None:
                raise breach
            if not reply.exists():
                raise MontraceError(
                    f"{fn.__qualname__} ended without a result (exit status "
                    f"{recorded.exit_status}; run: {recorded.path})"
                )
            with open(reply, "rb") as handle:
                ok, value = pickle.load(handle)
            if not ok:
                error, text = value
                from ._child import RemoteTraceback

                raise error from RemoteTraceback(text)
            return (value, recorded.resources) if return_resources else value

        return call

    return decorate(func) if func is not None else decorate
