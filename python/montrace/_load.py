"""Reading a run directory: its Parquet tables as DataFrames, run.json and summary.json as dicts.

A finished run has ``<table>.parquet``; a running or killed one has ``<table>.parts/`` (closed
Parquet parts, in order), read the same way. Runs of every schema version read alike: each time
column is a UTC timestamp in microseconds with its exact nanoseconds beside it as
``<name>_ns`` (schema version 3 writes them so; ``_with_exact_times`` makes the tables of
versions 1 and 2 look the same)."""
from __future__ import annotations

import errno
import html
import json
import os
import re
import stat
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List, Optional

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ._binary import MontraceError

TABLES = ("processes", "samples", "system", "events", "marks", "gpu", "gpu_processes")
MIB = 1024 * 1024

#: The type of every time column (schema version 3): what DuckDB, pandas, polars and Spark all
#: read as a UTC time. The exact nanoseconds are in ``<name>_ns`` (int64).
TIME_TYPE = pa.timestamp("us", tz="UTC")

#: Figures that need every process's start and end within the run: where the time went over the
#: tree (run.json ``time``). A polled run misses the processes shorter than its interval and sees
#: the others' ends one interval late; an attached tree's root (``montrace.monitor()``'s own
#: process, ``monitored``'s child waiting for montrace) started before the run, and its life
#: before the run would count on the path: such runs have none.
EXACT_ONLY = ("critical_path_s", "avg_parallelism")


# A part or a JSON file of a run is opened without following a symbolic link: a run directory
# is the monitored command's to write in, and a link it planted (``samples.parts/samples-9.parquet
# -> /etc/shadow``) would have the reader, root maybe, open a file of someone else's.
_NOFOLLOW = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
# (Non-blocking: a FIFO planted as a part must not hang the open; it is then refused.)
_NOFOLLOW_FILE = _NOFOLLOW | os.O_NONBLOCK
# run.json and summary.json are small (a few KiB); a larger one was not written by montrace.
_MAX_JSON_BYTES = 64 * MIB


def _refused(path: Path, err: OSError) -> MontraceError:
    if err.errno == errno.ELOOP:
        return MontraceError(
            f"{path} is a symbolic link: refused (montrace never writes one into a run directory; "
            "the monitored command may have)"
        )
    if err.errno == errno.ENOTDIR:
        return MontraceError(f"{path} is not a directory (or a symbolic link to one): refused")
    return MontraceError(f"cannot open {path}: {err.strerror}")


def _open_nofollow(name: str, dir_fd: int, shown: Path) -> Any:
    """The regular file ``name`` under ``dir_fd``, opened without following a link."""
    try:
        fd = os.open(name, _NOFOLLOW_FILE, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as err:
        raise _refused(shown, err) from None
    handle = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
        handle.close()
        raise MontraceError(f"{shown} is not a regular file: refused")
    return handle


def _open_dir(path: Path) -> int:
    """The run directory itself, as the caller named it (a link to it is the caller's own)."""
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_DIRECTORY)
    except FileNotFoundError:
        raise
    except OSError as err:
        raise _refused(path, err) from None


def _read_parquet(name: str, dir_fd: int, shown: Path) -> pa.Table:
    with _open_nofollow(name, dir_fd, shown) as handle:
        try:
            # pyarrow reads the file through its own native handle on the descriptor opened above
            # (``/proc/self/fd/N`` is that very file, whatever the path now names), never through
            # the Python file object: an I/O thread of pyarrow's that drops the last reference
            # to a Python file object must take the GIL, and at interpreter exit that ends the
            # thread by a forced unwind, which aborts the process ("terminate called without an
            # active exception", apache/arrow#34314; 9 exits in 40 here, and once in CI after
            # the read went single-threaded). A native file needs no GIL to close.
            with pa.OSFile(f"/proc/self/fd/{handle.fileno()}", "r") as native:
                return pq.read_table(native, use_threads=False, pre_buffer=False)
        except (pa.ArrowException, OSError, ValueError) as err:
            raise MontraceError(f"{shown} is not a Parquet file montrace wrote: {err}") from None


def _read_table(directory: Path, name: str) -> Optional[pa.Table]:
    final = f"{name}.parquet"
    parts = f"{name}.parts"
    for _ in range(3):
        try:
            top = _open_dir(directory)
            try:
                try:
                    return _read_parquet(final, top, directory / final)
                except FileNotFoundError:
                    pass
                try:
                    parts_fd = os.open(parts, _NOFOLLOW | os.O_DIRECTORY, dir_fd=top)
                except FileNotFoundError:
                    return None
                except OSError as err:
                    raise _refused(directory / parts, err) from None
                try:
                    files = sorted(
                        p for p in os.listdir(parts_fd)
                        if p.startswith(f"{name}-") and p.endswith(".parquet")
                    )
                    if not files:
                        return None
                    return pa.concat_tables(
                        [_read_parquet(p, parts_fd, directory / parts / p) for p in files]
                    )
                finally:
                    os.close(parts_fd)
            finally:
                os.close(top)
        except FileNotFoundError:
            # The run ended while we read its parts: they became the final file.
            continue
    return None


def _with_exact_times(table: pa.Table) -> pa.Table:
    """``table`` with the time columns of schema version 3 whatever version wrote it: each
    timestamp column as ``TIME_TYPE``, and its exact nanoseconds as int64 ``<name>_ns``
    (appended, in the order of the time columns, as montrace writes them). Versions 1
    (``timestamp[ns, tz=UTC]``) and 2 (``timestamp[ns]``, UTC) hold nanoseconds in the
    timestamp itself."""
    for name in [f.name for f in table.schema if pa.types.is_timestamp(f.type)]:
        column = table.column(name)
        exact = f"{name}_ns"
        if exact not in table.column_names:
            nanos = pc.cast(column, pa.timestamp("ns", tz=column.type.tz))
            table = table.append_column(pa.field(exact, pa.int64()), pc.cast(nanos, pa.int64()))
        if column.type != TIME_TYPE:
            # Nanoseconds to microseconds: the exact value is in the twin.
            as_utc = pc.cast(column, pa.timestamp(column.type.unit, tz="UTC"))
            index = table.column_names.index(name)
            table = table.set_column(index, pa.field(name, TIME_TYPE),
                                     pc.cast(as_utc, TIME_TYPE, safe=False))
    return table


def _epoch_ns(text: str) -> Optional[int]:
    """Nanoseconds since the epoch of an RFC 3339 UTC time (``...T20:06:11.511746Z``)."""
    found = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(?:Z|\+00:00)$", text or "")
    if not found:
        return None
    seconds = datetime.strptime(found[1], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    return int(seconds) * 10**9 + int((found[2] or "0").ljust(9, "0"))


def _read_json(path: Path) -> Dict[str, Any]:
    """run.json or summary.json as a dict ({} when there is none); anything else montrace did not
    write (a link, bad JSON, nesting deep enough to exhaust Python's recursion, another type at
    the top) raises MontraceError."""
    try:
        top = _open_dir(path.parent)
    except FileNotFoundError:
        return {}
    try:
        with _open_nofollow(path.name, top, path) as handle:
            data = handle.read(_MAX_JSON_BYTES + 1)
    except FileNotFoundError:
        return {}
    finally:
        os.close(top)
    if len(data) > _MAX_JSON_BYTES:
        raise MontraceError(f"{path} is over {_MAX_JSON_BYTES // MIB} MiB: not a file montrace wrote")
    try:
        value = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as err:
        # (json.JSONDecodeError and UnicodeDecodeError are ValueErrors.)
        raise MontraceError(f"{path} is not JSON montrace wrote: {type(err).__name__}: {err}") from None
    if not isinstance(value, dict):
        raise MontraceError(f"{path} holds a JSON {type(value).__name__}, not an object: not a file montrace wrote")
    return value


def _check_summary(path: Path, summary: Dict[str, Any]) -> Dict[str, Any]:
    """summary.json's parts this module reads, checked for their types."""
    reps = summary.get("repetitions")
    if reps is not None:
        if not isinstance(reps, list) or not all(isinstance(r, dict) for r in reps):
            raise MontraceError(f"{path}: `repetitions` is not a list of objects")
        for rep in reps:
            metrics = rep.get("metrics")
            if metrics is not None and not isinstance(metrics, dict):
                raise MontraceError(f"{path}: a repetition's `metrics` is not an object")
            for key, value in (metrics or {}).items():
                if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                    raise MontraceError(f"{path}: metric {key!r} is {value!r}, not a number")
    _check_types(path, summary, {"exit_status": int, "limit_breach": dict})
    return summary


def _check_info(path: Path, info: Dict[str, Any]) -> Dict[str, Any]:
    """run.json's parts this module reads, checked for their types."""
    _check_types(path, info, {"exit_status": int, "limit_breach": dict, "capacity": dict, "command_wall_s": (int, float)})
    return info


def _check_types(path: Path, values: Dict[str, Any], types: Dict[str, Any]) -> None:
    for key, kind in types.items():
        value = values.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
            raise MontraceError(f"{path}: `{key}` is {value!r}: not what montrace writes there")


class Run:
    """One run directory written by ``montrace run`` or ``montrace attach``.

    Tables are pandas DataFrames (``frames="polars"`` for polars); ``info`` is run.json and
    ``summary`` summary.json (empty dicts when a killed run has none). Time columns are UTC
    timestamps (microseconds), with the exact nanoseconds in ``<name>_ns``, for runs of every
    schema version."""

    def __init__(self, path: "str | os.PathLike[str]", frames: str = "pandas") -> None:
        self.path = Path(path)
        if frames not in ("pandas", "polars", "arrow"):
            raise ValueError(f"frames must be 'pandas', 'polars' or 'arrow', not {frames!r}")
        if not ((self.path / "processes.parquet").is_file() or (self.path / "processes.parts").is_dir()):
            raise MontraceError(
                f"{self.path} is not a montrace run directory (no processes.parquet nor "
                "processes.parts/): give the directory `montrace run --out` wrote"
            )
        self.frames = frames
        self.info: Dict[str, Any] = _check_info(self.path / "run.json", _read_json(self.path / "run.json"))
        self.summary: Dict[str, Any] = _check_summary(
            self.path / "summary.json", _read_json(self.path / "summary.json")
        )
        self._cache: Dict[str, Any] = {}

    # Tables -------------------------------------------------------------------------------

    def table(self, name: str) -> pa.Table:
        """A table as a pyarrow Table (an empty one, without columns, when the run has none,
        e.g. ``gpu`` without an NVIDIA GPU)."""
        if name not in TABLES:
            raise KeyError(f"no table {name!r}: the tables are {', '.join(TABLES)}")
        table = _read_table(self.path, name)
        return _with_exact_times(table) if table is not None else pa.table({})

    def frame(self, name: str, frames: Optional[str] = None) -> Any:
        kind = frames or self.frames
        key = f"{kind}:{name}"
        if key not in self._cache:
            table = self.table(name)
            if kind == "pandas":
                self._cache[key] = table.to_pandas()
            elif kind == "polars":
                import polars as pl

                self._cache[key] = pl.from_arrow(table)
            else:
                self._cache[key] = table
        return self._cache[key]

    @property
    def processes(self) -> Any:
        return self.frame("processes")

    @property
    def samples(self) -> Any:
        return self.frame("samples")

    @property
    def system(self) -> Any:
        return self.frame("system")

    @property
    def events(self) -> Any:
        return self.frame("events")

    @property
    def marks(self) -> Any:
        return self.frame("marks")

    @property
    def gpu(self) -> Any:
        return self.frame("gpu")

    @property
    def gpu_processes(self) -> Any:
        return self.frame("gpu_processes")

    # Headline figures ---------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """True when montrace ended the run cleanly (its tables are whole files)."""
        return (self.path / "processes.parquet").is_file()

    @property
    def exit_status(self) -> Optional[int]:
        if "exit_status" in self.summary:
            return int(self.summary["exit_status"])
        return self.info.get("exit_status")

    @property
    def limit_breach(self) -> Optional[Dict[str, Any]]:
        return self.summary.get("limit_breach") or self.info.get("limit_breach")

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
        processes = self.table("processes")
        if began is None or processes.num_rows == 0 or "start_time_ns" not in processes.column_names:
            return False
        first = pc.min(processes.column("start_time_ns")).as_py()
        return first is not None and first < began

    @property
    def resources(self) -> Dict[str, Any]:
        """The run's figures as one flat dict (like cctools' resource_monitor summary): wall
        and CPU seconds, peaks of the tree and of its largest process, processes and how many at
        once, bytes read and written, the GPU memory peak (None without GPU data), and whether
        the tree was followed ``exact``ly. Where the time went over the tree (``EXACT_ONLY``)
        is None for a polled run and for one whose root started before it."""
        metrics: Dict[str, Any] = {}
        reps = self.summary.get("repetitions") or []
        if reps:
            metrics = dict(reps[-1].get("metrics", {}))
        procs = self.table("processes")
        if not metrics and procs.num_rows:
            metrics = _metrics_from_processes(procs)
        out = {
            "wall_s": metrics.get("wall_s", self.info.get("command_wall_s")),
            "cpu_user_s": metrics.get("cpu_user_s"),
            "cpu_system_s": metrics.get("cpu_system_s"),
            "cpu_s": metrics.get("cpu_s"),
            "peak_rss_bytes": _int(metrics.get("peak_tree_rss_bytes")),
            "peak_process_rss_bytes": _int(metrics.get("peak_rss_bytes")),
            "peak_uss_bytes": _int(metrics.get("peak_tree_uss_bytes")),
            "processes": _int(metrics.get("processes")),
            "max_concurrent": _int(metrics.get("max_concurrent")),
            "read_bytes": _int(metrics.get("read_bytes")),
            "write_bytes": _int(metrics.get("write_bytes")),
            "gpu_memory_peak_bytes": self._gpu_memory_peak(),
            "critical_path_s": metrics.get("critical_path_s"),
            "avg_parallelism": metrics.get("avg_parallelism"),
            "exit_status": self.exit_status,
            "tracking_mode": self.info.get("tracking_mode"),
            "run_dir": str(self.path),
        }
        out.update(_capacity_shares(self.info.get("capacity"), out))
        out["exact"] = self.exact
        if not self.exact or self.root_predates_run:
            for key in EXACT_ONLY:
                out[key] = None
        return out

    def _gpu_memory_peak(self) -> Optional[int]:
        """The most GPU memory the tree's processes held at once (sampled), or the largest a
        single process held (NVML's figure at its exit), whichever is larger."""
        gpu = self.table("gpu_processes")
        if gpu.num_rows == 0:
            return None
        per_time: Dict[Any, int] = {}
        times = gpu.column("time").to_pylist()
        for t, used in zip(times, gpu.column("gpu_memory_bytes").to_pylist()):
            per_time[t] = per_time.get(t, 0) + (used or 0)
        largest = [v for v in gpu.column("max_gpu_memory_bytes").to_pylist() if v is not None]
        return max(list(per_time.values()) + largest)

    def tree_memory(self) -> List["tuple[Any, int]"]:
        """(time, RSS of the whole tree) for each sampling sweep: system.parquet's
        ``tree_rss_bytes``, in which each address space counts once (a vfork child before its
        exec is not charged its parent's memory again; run.json ``tree_memory_peaks.source``
        says how it was counted). Runs of earlier versions have no such column: then the sum
        of the sweep's samples.parquet ``rss_bytes``."""
        system = self.table("system")
        if system.num_rows and "tree_rss_bytes" in system.column_names:
            tree = [
                (t, int(rss))
                for t, rss in zip(system.column("time").to_pylist(), system.column("tree_rss_bytes").to_pylist())
                if rss is not None
            ]
            if tree:
                return sorted(tree)
        samples = self.table("samples")
        if samples.num_rows == 0:
            return []
        per_time: Dict[Any, int] = {}
        for t, rss in zip(samples.column("time").to_pylist(), samples.column("rss_bytes").to_pylist()):
            per_time[t] = per_time.get(t, 0) + (rss or 0)
        return sorted(per_time.items())

    def groups(self) -> List[Dict[str, Any]]:
        """One row per program (the executable's file name): processes, CPU seconds, the largest
        peak RSS; most CPU first."""
        procs = self.table("processes")
        rows: Dict[str, Dict[str, Any]] = {}
        cols = {c: procs.column(c).to_pylist() for c in ("filename", "comm", "cpu_user_ns", "cpu_system_ns", "peak_rss_bytes")}
        for i in range(procs.num_rows):
            name = os.path.basename(cols["filename"][i] or "") or (cols["comm"][i] or "?")
            row = rows.setdefault(name, {"program": name, "processes": 0, "cpu_s": 0.0, "peak_rss_bytes": 0})
            row["processes"] += 1
            row["cpu_s"] += ((cols["cpu_user_ns"][i] or 0) + (cols["cpu_system_ns"][i] or 0)) / 1e9
            row["peak_rss_bytes"] = max(row["peak_rss_bytes"], cols["peak_rss_bytes"][i] or 0)
        return sorted(rows.values(), key=lambda r: -r["cpu_s"])

    def __repr__(self) -> str:
        r = self.resources
        polled = "" if self.exact else ", polled /proc: processes shorter than the interval may be missing"
        return (
            f"<montrace.Run {str(self.path)!r}: {r['processes']} processes, "
            f"cpu {_fmt_s(r['cpu_s'])}, wall {_fmt_s(r['wall_s'])}, "
            f"peak RSS {_fmt_bytes(r['peak_rss_bytes'])}, exit {r['exit_status']}{polled}>"
        )

    def _repr_html_(self) -> str:
        r = self.resources
        esc = html.escape
        head = [
            ("command", esc(str(self.info.get("command", "")))),
            ("tracking", esc(str(r["tracking_mode"]))),
            ("exit status", esc(str(r["exit_status"]))),
            ("wall", _fmt_s(r["wall_s"])),
            ("CPU (user + system)", f"{_fmt_s(r['cpu_s'])} ({_fmt_s(r['cpu_user_s'])} + {_fmt_s(r['cpu_system_s'])})"),
            ("memory peak of the tree", _fmt_bytes(r["peak_rss_bytes"])),
            ("largest process peak", _fmt_bytes(r["peak_process_rss_bytes"])),
            ("processes (at most at once)", f"{r['processes']} ({r['max_concurrent']})"),
            ("read / written", f"{_fmt_bytes(r['read_bytes'])} / {_fmt_bytes(r['write_bytes'])}"),
        ]
        if r["gpu_memory_peak_bytes"] is not None:
            head.append(("GPU memory peak", _fmt_bytes(r["gpu_memory_peak_bytes"])))
        if self.limit_breach:
            b = self.limit_breach
            head.append(("stopped by limit", esc(f"{b.get('limit')}: {b.get('value')} over {b.get('threshold')}")))
        rows = "".join(f"<tr><th style='text-align:left'>{k}</th><td>{v}</td></tr>" for k, v in head)
        groups = "".join(
            f"<tr><td>{esc(g['program'])}</td><td>{g['processes']}</td><td>{g['cpu_s']:.3f}</td>"
            f"<td>{_fmt_bytes(g['peak_rss_bytes'])}</td></tr>"
            for g in self.groups()[:15]
        )
        return (
            f"<div class='montrace-run'><b>montrace run</b> <code>{esc(str(self.path))}</code>"
            f"<table>{rows}</table>"
            "<table><thead><tr><th>program</th><th>processes</th><th>CPU s</th>"
            f"<th>largest peak RSS</th></tr></thead><tbody>{groups}</tbody></table>"
            f"{_memory_svg(self.tree_memory())}</div>"
        )


def load(path: "str | os.PathLike[str]", frames: str = "pandas") -> Run:
    """Opens a run directory (finished, running or killed)."""
    return Run(path, frames=frames)


def _metrics_from_processes(procs: pa.Table) -> Dict[str, Any]:
    """A killed run has no summary.json: its totals from the processes table."""
    col = lambda c: [v or 0 for v in procs.column(c).to_pylist()]  # noqa: E731
    user = sum(col("cpu_user_ns")) / 1e9
    system = sum(col("cpu_system_ns")) / 1e9
    return {
        "cpu_user_s": user,
        "cpu_system_s": system,
        "cpu_s": user + system,
        "peak_rss_bytes": max(col("peak_rss_bytes"), default=0),
        "processes": procs.num_rows,
        "read_bytes": sum(col("read_bytes")),
        "write_bytes": sum(col("write_bytes")),
    }


def _capacity_shares(capacity: Optional[Dict[str, Any]], figures: Dict[str, Any]) -> Dict[str, Any]:
    """Percentages against what the run could use (run.json ``capacity``: a limited container's
    cgroup limits, else the host): the average CPU over the wall time (100 = every core it may
    use busy the whole time) and the tree's memory peak."""
    capacity = capacity or {}
    cores, memory = capacity.get("cpu_cores"), capacity.get("memory_bytes")
    cpu_s, wall_s, peak = figures.get("cpu_s"), figures.get("wall_s"), figures.get("peak_rss_bytes")
    return {
        "cpu_capacity_cores": cores,
        "cpu_capacity_basis": capacity.get("cpu_basis"),
        "memory_capacity_bytes": memory,
        "memory_capacity_basis": capacity.get("memory_basis"),
        "avg_cpu_percent_of_capacity": (
            cpu_s / wall_s / cores * 100 if cores and cpu_s is not None and wall_s else None
        ),
        "peak_memory_percent_of_capacity": peak / memory * 100 if memory and peak is not None else None,
    }


def _int(value: Any) -> Optional[int]:
    return None if value is None else int(value)


def _fmt_s(value: Optional[float]) -> str:
    return "–" if value is None else f"{value:.3f} s"


def _fmt_bytes(value: Optional[float]) -> str:
    if value is None:
        return "–"
    for unit, size in (("GiB", 1024**3), ("MiB", MIB), ("KiB", 1024)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{int(value)} B"


def _memory_svg(points: List["tuple[Any, int]"], width: int = 600, height: int = 160) -> str:
    """The tree's RSS over time as an inline SVG line (no plotting library needed)."""
    if len(points) < 2:
        return ""
    t0 = points[0][0]
    xs = [(t - t0).total_seconds() if hasattr(t - t0, "total_seconds") else float(t - t0) for t, _ in points]
    ys = [v / MIB for _, v in points]
    span, top = max(xs[-1], 1e-9), max(max(ys), 1e-9)
    pad = 40
    coords = " ".join(
        f"{pad + x / span * (width - pad - 10):.1f},{height - 20 - y / top * (height - 35):.1f}"
        for x, y in zip(xs, ys)
    )
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img' "
        f"aria-label='memory of the tree over time'>"
        f"<text x='4' y='12' font-size='11'>RSS of the tree, peak {top:.1f} MiB</text>"
        f"<text x='{pad}' y='{height - 4}' font-size='10'>0 s</text>"
        f"<text x='{width - 60}' y='{height - 4}' font-size='10'>{span:.1f} s</text>"
        f"<polyline fill='none' stroke='#1f77b4' stroke-width='1.5' points='{coords}'/></svg>"
    )
