"""Running a command, monitoring this program, and monitoring one function call."""
from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import os
import pickle
import re
import resource
import secrets
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
from ._stream import Callback, Line, StreamFollower
from ._units import format_limit_value, interval_arg, limit_args

#: montrace's own exit statuses (monitor/src/exit_code.rs, whose test
#: holds these to it): a limit stopped the run; montrace failed; a usage error.
EXIT_LIMIT_BREACHED = 124
EXIT_MONTRACE_FAILED = 125
EXIT_USAGE = 2

Limits = Mapping[str, Union[str, int, float]]
T = TypeVar("T")


class LimitExceeded(RuntimeError):
    """A ``limits=`` value was crossed and montrace stopped the tree.

    ``limit`` is the key (``rss``, ``cpu``, ``wall``, ``procs``, ``gpu-mem``), ``threshold`` the
    limit and ``value`` what was seen, in the metric's unit (bytes, seconds, processes); ``run``
    is the recorded run (kept on disk, also for a temporary run of ``monitored``)."""

    def __init__(self, limit: str, threshold: float, value: float, run: Optional[Run] = None) -> None:
        super().__init__(
            f"limit {limit} exceeded: {format_limit_value(limit, value)} seen, limit "
            f"{format_limit_value(limit, threshold)}" + (f" (run: {run.path})" if run is not None else "")
        )
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


def _record_args(interval: Union[str, float, None], limits: Optional[Limits], report: bool,
                 extra: Sequence[str]) -> List[str]:
    args = ["--quiet"]
    if interval is not None:
        args += ["--interval", interval_arg(interval)]
    args += limit_args(limits or {})
    if not report:
        args.append("--no-report")
    return args + list(extra)


def _refuse_existing(out: Path) -> None:
    """montrace writes a new run directory: an existing one (or a file) at ``out`` is refused
    before anything runs, so that an old run is never taken for the new command's."""
    if out.is_symlink() or (out.exists() and not (out.is_dir() and not any(out.iterdir()))):
        what = "a run directory" if (out / "run.json").exists() else "something"
        raise MontraceError(
            f"out={str(out)!r} holds {what} already: montrace writes a new run directory, so the "
            "command was not run; give a new path (or none, for a temporary directory)"
        )


def _new_out(out: "Union[str, os.PathLike[str], None]", prefix: str) -> "tuple[Path, Path]":
    """The run directory montrace creates (``out`` or a new temporary one), and a private
    directory for the stream and socket."""
    if out is not None:
        _refuse_existing(Path(out))
    private = Path(tempfile.mkdtemp(prefix=f"montrace-{prefix}-"))
    return (Path(out) if out is not None else private / "run"), private


def _breach_of(run: Run, follower: Optional[StreamFollower]) -> Optional[LimitExceeded]:
    breach = run.limit_breach or (follower.breach if follower else None)
    if not breach:
        return None
    return LimitExceeded(str(breach["limit"]), float(breach["threshold"]), float(breach["value"]), run)


# Callbacks ----------------------------------------------------------------------------------

_CALL_IDS = itertools.count(1)
MakeCallback = Callable[[str], Optional[Callback]]


def _callback_maker(callback: Optional[Callable[..., Any]]) -> MakeCallback:
    """Checks ``callback=`` where it is given, and returns what makes each run's callback (from
    the run's name). montrace calls a callback with one argument, each line of the live stream
    as a dict; a cctools-style ``callback(id, name, step, resources)`` gets each sweep's figures
    in cctools' names and units (``_cctools_resources``), ``id`` numbering the calls of this
    process and ``step`` the sweeps of the call."""
    if callback is None:
        return lambda name: None
    if not callable(callback):
        raise TypeError(f"callback= must be callable, not {type(callback).__name__}")
    try:
        signature = inspect.signature(callback)
    except (TypeError, ValueError):  # a builtin without a signature: one argument
        return lambda name: callback
    for arity in (1, 4):
        try:
            signature.bind(*range(arity))
        except TypeError:
            continue
        if arity == 1:
            return lambda name: callback
        return lambda name: _cctools_callback(callback, next(_CALL_IDS), name)
    raise TypeError(
        f"callback={getattr(callback, '__qualname__', callback)!r} takes {signature}: montrace "
        "calls it with one argument (each line of the live stream, a dict), or, as cctools' "
        "monitored() does, with four: (id, name, step, resources)"
    )


def _cctools_resources(line: Line) -> Dict[str, Any]:
    """A sweep line in cctools resource_monitor's names and units (MB are MiB)."""
    mib = lambda v: None if v is None else v / 2**20  # noqa: E731
    return {
        "wall_time": line.get("elapsed_s"),
        "cores": None if line.get("cpu_percent") is None else line["cpu_percent"] / 100,
        "memory": mib(line.get("rss_bytes")),
        "bytes_read": line.get("read_bytes"),
        "bytes_written": line.get("write_bytes"),
        "max_concurrent_processes": line.get("live"),
        "total_processes": line.get("started"),
        "montrace": line,
    }


def _cctools_callback(callback: Callable[..., Any], call_id: int, name: str) -> Callback:
    steps = itertools.count(1)

    def adapted(line: Line) -> None:
        if line.get("type") == "sweep":
            callback(call_id, name, next(steps), _cctools_resources(line))

    return adapted


def run(argv: Sequence[str], *, interval: Union[str, float, None] = None,
        limits: Optional[Limits] = None, out: "Union[str, os.PathLike[str], None]" = None,
        check: bool = False, callback: Optional[Callable[..., Any]] = None,
        stream: "Union[str, os.PathLike[str], None]" = None, report: bool = True,
        env: Optional[Mapping[str, str]] = None, cwd: "Union[str, os.PathLike[str], None]" = None,
        extra_args: Sequence[str] = ()) -> Run:
    """Runs ``argv`` under montrace and returns the recorded :class:`Run`.

    ``interval``: sampling interval (seconds, or a string such as ``"100ms"``). ``limits``: e.g.
    ``{"rss": "2GiB", "wall": "5m"}`` stop the whole tree when crossed (numbers are bytes,
    seconds, processes). ``out``: the run directory (a new one: an existing run there raises
    :class:`MontraceError` and the command is not run; default: a new temporary directory).
    ``callback`` receives each line of the live stream (a dict) as the run goes, the last one
    with ``"final": True``; ``stream`` also keeps the stream at that path. ``check=True`` raises
    :class:`CommandFailed` on a non-zero exit and :class:`LimitExceeded` on a breach."""
    record = _record_args(interval, limits, report, extra_args)
    make_callback = _callback_maker(callback)
    out_dir, private = _new_out(out, "run")
    stream_path = Path(stream) if stream is not None else private / "stream.jsonl"
    args = [binary(), "run", *record, "--out", str(out_dir), "--stream", str(stream_path), "--", *argv]
    follower = StreamFollower(str(stream_path), make_callback(os.path.basename(str(argv[0])) if argv else ""))
    try:
        proc, relay = spawn(args, env=dict(env) if env is not None else None,
                            cwd=str(cwd) if cwd is not None else None)
    except BaseException:
        follower.stop()
        shutil.rmtree(private, ignore_errors=True)
        raise
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


class _Attached:
    """``montrace attach PID`` started, and ready: it has found the tree and attached (its first
    stream line)."""

    def __init__(self, pid: int, record: List[str], out_dir: Path, stream_path: Path,
                 callback: Optional[Callback], start_timeout_s: float,
                 mark_socket: Optional[str] = None) -> None:
        args = [binary(), "attach", str(pid), *record, "--out", str(out_dir), "--stream", str(stream_path)]
        if mark_socket is not None:
            args += ["--mark-socket", mark_socket]
        self.follower = StreamFollower(str(stream_path), callback)
        try:
            self.proc, self.relay = spawn(args, stdin=subprocess.DEVNULL)
        except BaseException:
            self.follower.stop()
            raise
        deadline = time.monotonic() + start_timeout_s
        while not self.follower.first.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.abandon()
                raise MontraceError(
                    f"montrace attach did not start (status {self.proc.returncode})", self.relay.finish()
                )
        if self.proc.poll() is not None and not self.follower.lines:
            self.abandon()
            raise MontraceError("montrace attach ended at once", self.relay.finish())

    def abandon(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.follower.stop()

    def finish(self, stop: bool) -> "tuple[int, str]":
        """Waits for montrace to end (after Ctrl-C with ``stop``; else when the tree is gone),
        and returns its exit status and last lines of stderr."""
        if stop and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        status = self.proc.wait()
        self.follower.stop()
        return status, self.relay.finish()


class Monitor:
    """``with montrace.monitor() as m:`` follows this Python process and everything it starts
    until the block ends (``montrace attach`` to itself). ``m.mark(label)`` and
    ``with m.phase(label):`` record phase marks. After the block, ``m.run`` is the recorded
    :class:`Run` and ``m.resources`` its figures as a flat dict."""

    def __init__(self, *, interval: Union[str, float, None] = None,
                 out: "Union[str, os.PathLike[str], None]" = None,
                 callback: Optional[Callable[..., Any]] = None, report: bool = True,
                 start_timeout_s: float = 60.0, extra_args: Sequence[str] = ()) -> None:
        self._record = _record_args(interval, None, report, extra_args)
        self._out = out
        self._make_callback = _callback_maker(callback)
        self._start_timeout_s = start_timeout_s
        self._attached: Optional[_Attached] = None
        self._socket: Optional[socket.socket] = None
        self.run: Optional[Run] = None
        self.resources: Dict[str, Any] = {}

    def __enter__(self) -> "Monitor":
        out_dir, private = _new_out(self._out, "monitor")
        self.out_dir = out_dir
        self._private = private
        self._socket_path = str(private / "marks.sock")
        self._attached = _Attached(
            os.getpid(), self._record, out_dir, private / "stream.jsonl",
            self._make_callback(os.path.basename(sys.argv[0] if sys.argv and sys.argv[0] else "python")),
            self._start_timeout_s, mark_socket=self._socket_path,
        )
        proc = self._attached.proc
        # montrace binds the mark socket right after it has found the tree: a mark sent before
        # would be lost. (Should it fail to bind, it says why; marks then raise.)
        bound_by = time.monotonic() + 5.0
        while not os.path.exists(self._socket_path) and time.monotonic() < bound_by:
            if proc.poll() is not None:
                break
            time.sleep(0.01)
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._began = (time.monotonic(), resource.getrusage(resource.RUSAGE_SELF))
        return self

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
        assert self._attached is not None
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        ended = (time.monotonic(), resource.getrusage(resource.RUSAGE_SELF))
        # Ctrl-C for montrace attach: it stops following and writes everything.
        status, stderr = self._attached.finish(stop=True)
        if not _is_run_dir(self.out_dir):
            raise MontraceError(f"montrace attach exited with status {status} and recorded no run", stderr)
        self.run = load(self.out_dir)
        self.resources = _with_own_usage(self.run, self._began, ended)
        if self._out is not None:
            # The run is elsewhere: the private directory held the stream and the socket.
            shutil.rmtree(self._private, ignore_errors=True)
        error = self._attached.follower.error
        if error is not None and exc[0] is None:
            raise error


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
            callback: Optional[Callable[..., Any]] = None, report: bool = True,
            extra_args: Sequence[str] = ()) -> Monitor:
    """See :class:`Monitor`."""
    return Monitor(interval=interval, out=out, callback=callback, report=report, extra_args=extra_args)


# monitored ----------------------------------------------------------------------------------


def _refuse_uncallable(fn: Any) -> None:
    """What cannot run in the forked child and come back, refused when it is decorated."""
    name = getattr(fn, "__qualname__", repr(fn))
    if not callable(fn):
        raise TypeError(f"montrace.monitored takes a callable, not {type(fn).__name__}")
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(
            f"montrace.monitored cannot take {name}: it is async, and its coroutine would run in "
            "the child process after the call has returned; call asyncio.run(...) inside a plain "
            "function and monitor that"
        )
    if inspect.isgeneratorfunction(fn):
        raise TypeError(
            f"montrace.monitored cannot take {name}: it is a generator function, whose values "
            "would be made in the child process after the call has returned; return a list instead"
        )
    if not hasattr(os, "fork"):
        raise TypeError(
            f"montrace.monitored cannot take {name} here: it runs each call in a forked child "
            "process, and this platform has no fork() (montrace runs on Linux)"
        )


def _run_dir_in(directory: Path, fn: Callable[..., Any]) -> Path:
    """A new run directory in ``directory``, made here (mkdir fails if the name is taken, so two
    calls never share one): ``<UTC time>-<function>-<random>``."""
    directory.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", getattr(fn, "__name__", "call")).strip("_") or "call"
    while True:
        path = directory / f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{name}-{secrets.token_hex(4)}"
        try:
            path.mkdir(mode=0o755)
            return path
        except FileExistsError:
            continue


def _describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            return f"killed by {signal.Signals(number).name}"
        except ValueError:
            return f"killed by signal {number}"
    return f"exit status {os.WEXITSTATUS(status)}"


def monitored(func: Optional[Callable[..., T]] = None, *, limits: Optional[Limits] = None,
              callback: Optional[Callable[..., Any]] = None, return_resources: bool = True,
              interval: Union[str, float, None] = None,
              out: "Union[str, os.PathLike[str], None]" = None, keep: bool = False,
              start_timeout_s: float = 60.0) -> Any:
    """Decorator: each call runs in a forked child of this process, under ``montrace attach``.

    Any callable works (a lambda, a closure, a nested function, a bound method): the child is a
    copy of this process, so nothing is pickled on the way in. Returns ``(result, resources)``
    (or the result alone with ``return_resources=False``); the result is pickled on the way
    back. An exception inside the function is raised here with its type, message and traceback
    (in ``__cause__``); a crossed limit stops the child and raises :class:`LimitExceeded`.

    The limits, the interval and the callback are checked here, when the function is
    decorated. Each call's run directory is temporary and removed after the call unless
    ``keep=True`` or ``out=DIR`` (a new directory per call in DIR) is given; a run that a limit
    stopped is kept, for :class:`LimitExceeded`'s ``run``."""
    record = _record_args(interval, limits, False, ())
    make_callback = _callback_maker(callback)

    def decorate(fn: Callable[..., T]) -> Callable[..., Any]:
        _refuse_uncallable(fn)

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            return _monitored_call(fn, args, kwargs)

        return call

    def _monitored_call(fn: Callable[..., T], args: Any, kwargs: Any) -> Any:
        from . import _child

        name = getattr(fn, "__qualname__", getattr(fn, "__name__", "call"))
        private = Path(tempfile.mkdtemp(prefix="montrace-call-"))
        if out is not None:
            run_dir = _run_dir_in(Path(out), fn)
        elif keep:
            run_dir = Path(tempfile.mkdtemp(prefix="montrace-monitored-"))
        else:
            run_dir = private / "run"
        reply = private / "outcome.pickle"
        keep_run = keep or out is not None
        go_read, go_write = os.pipe()
        for stream in (sys.stdout, sys.stderr):  # else the child would write them out again
            with contextlib.suppress(Exception):
                stream.flush()
        pid = os.fork()
        if pid == 0:  # the child: waits until montrace follows it, runs the call, never returns
            os.close(go_write)
            _child.run_forked(fn, args, kwargs, go_read, str(reply))
        os.close(go_read)
        try:
            attached = _Attached(pid, record, run_dir, private / "stream.jsonl", make_callback(name),
                                 start_timeout_s)
        except BaseException:
            os.close(go_write)  # the child reads the end of the pipe and leaves without the call
            os.waitpid(pid, 0)
            if keep_run:
                with contextlib.suppress(OSError):
                    run_dir.rmdir()
            shutil.rmtree(private, ignore_errors=True)
            raise
        os.write(go_write, b"g")
        os.close(go_write)
        try:
            _, status = os.waitpid(pid, 0)
        except BaseException:  # Ctrl-C here: the call is abandoned, the run recorded
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            attached.finish(stop=False)
            raise
        montrace_status, stderr = attached.finish(stop=False)
        if not _is_run_dir(run_dir):
            shutil.rmtree(private, ignore_errors=True)
            raise MontraceError(
                f"montrace attach exited with status {montrace_status} and recorded no run", stderr
            )
        recorded = load(run_dir)
        breach = _breach_of(recorded, attached.follower)
        if breach is not None:
            raise breach  # the run is kept: it is the breach's
        try:
            if attached.follower.error is not None:
                raise attached.follower.error
            if not reply.exists():
                raise MontraceError(
                    f"{name} ended without a result ({_describe_status(status)}; run: "
                    f"{recorded.path if keep_run else 'removed'})"
                )
            with open(reply, "rb") as handle:
                ok, value = pickle.load(handle)
            resources = recorded.resources
            if not keep_run:
                resources["run_dir"] = None
        finally:
            shutil.rmtree(private, ignore_errors=True)
        if not ok:
            error, text = value
            raise error from _child.RemoteTraceback(text)
        return (value, resources) if return_resources else value

    return decorate(func) if func is not None else decorate
