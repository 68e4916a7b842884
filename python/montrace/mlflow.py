"""Logging a run into MLflow: ``montrace.mlflow.log(run)`` after the fact, or
``callback=montrace.mlflow.callback()`` while it goes.

Metrics (one step per sampling sweep, timestamped at the sweep): the tree's ``cpu_percent``
(100 = one core), ``rss_mb``, ``uss_mb``, ``pss_mb``, ``vms_mb``, ``threads``, ``fds``,
``read_mb`` and ``write_mb`` (bytes read/written so far by the live processes),
``cpu_percent_of_capacity`` and ``rss_percent_of_capacity`` (against run.json ``capacity``: a
limited container's limits, else the host), and per GPU
``gpu<N>_memory_mb`` and ``gpu<N>_utilization_percent`` when the run has GPU data. The summary
goes in as params (command, tracking mode, exit status) and ``montrace_*`` metrics, report.html
(when the run has one) as an artifact under ``montrace/``. Needs ``mlflow`` or ``mlflow-skinny``."""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional

from ._load import MIB, Run

#: Series from samples.parquet: (metric, column, scale); summed over the tree at each sweep
#: (the memory ones then replaced by system.parquet's tree columns, which count each memory
#: image once).
SAMPLE_METRICS = (
    ("cpu_percent", "cpu_percent", 1.0),
    ("rss_mb", "rss_bytes", 1 / MIB),
    ("uss_mb", "uss_bytes", 1 / MIB),
    ("pss_mb", "pss_bytes", 1 / MIB),
    ("vms_mb", "vms_bytes", 1 / MIB),
    ("threads", "threads", 1.0),
    ("fds", "fds", 1.0),
    ("read_mb", "read_bytes", 1 / MIB),
    ("write_mb", "write_bytes", 1 / MIB),
)
#: Keys of ``Run.resources`` logged as ``montrace_<key>`` metrics.
SUMMARY_METRICS = (
    "wall_s", "cpu_s", "cpu_user_s", "cpu_system_s", "peak_rss_bytes", "peak_process_rss_bytes",
    "peak_uss_bytes", "processes", "max_concurrent", "read_bytes", "write_bytes",
    "gpu_memory_peak_bytes",
)
BATCH = 1000  # MLflow's log_batch takes at most 1000 metrics per call


def series(run: Run) -> Dict[str, List["tuple[int, int, float]"]]:
    """Each metric as (step, timestamp in ms, value), one per sampling sweep (procfs source)."""
    samples = run.table("samples")
    out: Dict[str, List["tuple[int, int, float]"]] = {}
    if samples.num_rows:
        sources = samples.column("source").to_pylist()
        times = samples.column("time").to_pylist()
        columns = {c: samples.column(c).to_pylist() for _, c, _ in SAMPLE_METRICS}
        sums: Dict[Any, Dict[str, Optional[float]]] = {}
        for i, t in enumerate(times):
            if sources[i] != "procfs":
                continue
            row = sums.setdefault(t, {})
            for name, column, scale in SAMPLE_METRICS:
                value = columns[column][i]
                if value is not None:
                    row[name] = (row.get(name) or 0.0) + value * scale
        # The tree's memory counted once per sweep (a vfork child before its exec shares its
        # parent's memory; summing rows would count it twice): system.parquet's tree columns.
        for t, tree in _tree_memory(run).items():
            row = sums.get(t)
            if row is not None:
                for name, value in tree.items():
                    if value is not None:
                        row[name] = value / MIB
        capacity = run.info.get("capacity") or {}
        cores, memory = capacity.get("cpu_cores"), capacity.get("memory_bytes")
        for step, t in enumerate(sorted(sums)):
            ms = _ms(t)
            row = sums[t]
            if cores and row.get("cpu_percent") is not None:
                row["cpu_percent_of_capacity"] = row["cpu_percent"] / cores
            if memory and row.get("rss_mb") is not None:
                row["rss_percent_of_capacity"] = row["rss_mb"] * MIB / memory * 100
            for name, value in row.items():
                if value is not None:
                    out.setdefault(name, []).append((step, ms, value))
    gpu = run.table("gpu")
    if gpu.num_rows:
        steps: Dict[Any, int] = {}
        for t, index, used, util in zip(
            gpu.column("time").to_pylist(), gpu.column("gpu_index").to_pylist(),
            gpu.column("memory_used_bytes").to_pylist(),
            gpu.column("utilization_gpu_percent").to_pylist(),
        ):
            step = steps.setdefault(t, len(steps))
            if used is not None:
                out.setdefault(f"gpu{index}_memory_mb", []).append((step, _ms(t), used / MIB))
            if util is not None:
                out.setdefault(f"gpu{index}_utilization_percent", []).append((step, _ms(t), util))
    return out


def _tree_memory(run: Run) -> Dict[Any, Dict[str, Optional[int]]]:
    """sweep time -> rss_mb/uss_mb/pss_mb in bytes, from system.parquet's tree columns (runs of
    earlier versions have none: then the sums of samples.parquet stand)."""
    system = run.table("system")
    names = set(system.column_names) if system.num_rows else set()
    if "tree_rss_bytes" not in names:
        return {}
    columns = {
        metric: system.column(column).to_pylist() if column in names else [None] * system.num_rows
        for metric, column in (("rss_mb", "tree_rss_bytes"), ("uss_mb", "tree_uss_bytes"),
                               ("pss_mb", "tree_pss_bytes"))
    }
    return {
        t: {metric: values[i] for metric, values in columns.items()}
        for i, t in enumerate(system.column("time").to_pylist())
    }


def _ms(t: Any) -> int:
    if hasattr(t, "timestamp"):
        # UTC: an aware datetime (schema version 3, and earlier runs as load() reads them).
        import calendar

        return calendar.timegm(t.utctimetuple()) * 1000 + t.microsecond // 1000
    return int(t) // 1_000_000


def log(run: Run, *, prefix: str = "", artifacts: bool = True) -> None:
    """Logs ``run`` into the active MLflow run (one is started if none is)."""
    import mlflow
    from mlflow.entities import Metric, Param

    active = mlflow.active_run() or mlflow.start_run()
    client = mlflow.tracking.MlflowClient()
    metrics = [
        Metric(f"{prefix}{name}", float(value), ms, step)
        for name, points in series(run).items()
        for step, ms, value in points
    ]
    now = int(time.time() * 1000)
    for key in SUMMARY_METRICS:
        value = run.resources.get(key)
        if value is not None:
            metrics.append(Metric(f"{prefix}montrace_{key}", float(value), now, 0))
    params = [
        Param(f"{prefix}montrace_command", str(run.info.get("command", ""))[:500]),
        Param(f"{prefix}montrace_tracking_mode", str(run.info.get("tracking_mode"))),
        Param(f"{prefix}montrace_exit_status", str(run.exit_status)),
        Param(f"{prefix}montrace_run_dir", str(run.path)),
    ]
    run_id = active.info.run_id
    client.log_batch(run_id, params=params)
    for start in range(0, len(metrics), BATCH):
        client.log_batch(run_id, metrics=metrics[start:start + BATCH])
    report = run.path / "report.html"
    if artifacts and report.is_file():
        client.log_artifact(run_id, str(report), artifact_path="montrace")


def callback(*, run_id: Optional[str] = None, prefix: str = "") -> Callable[[Dict[str, Any]], None]:
    """A ``callback=`` for ``montrace.run``/``monitor``/``monitored`` that logs each sweep of the
    live stream into an MLflow run as it comes (step = sweep number): ``cpu_percent``,
    ``rss_mb``, ``uss_mb``, ``pss_mb``, ``read_mb``, ``write_mb``, ``live_processes``,
    ``gpu_memory_mb``. The run is ``run_id``, else the run active when ``callback()`` is called
    (one is started if none is): callbacks are called from montrace's reader thread, where
    MLflow's active run is not set."""
    import mlflow
    from mlflow.entities import Metric

    target = run_id or (mlflow.active_run() or mlflow.start_run()).info.run_id
    client = mlflow.tracking.MlflowClient()
    step = [0]

    def on_line(line: Dict[str, Any]) -> None:
        if line.get("type") != "sweep":
            return
        values = {
            "cpu_percent": line.get("cpu_percent"),
            "cpu_percent_of_capacity": line.get("cpu_percent_of_capacity"),
            "rss_mb": _mb(line.get("rss_bytes")),
            "rss_percent_of_capacity": line.get("rss_percent_of_capacity"),
            "uss_mb": _mb(line.get("uss_bytes")),
            "pss_mb": _mb(line.get("pss_bytes")),
            "read_mb": _mb(line.get("read_bytes")),
            "write_mb": _mb(line.get("write_bytes")),
            "live_processes": line.get("live"),
            "gpu_memory_mb": _mb(line.get("gpu_memory_bytes")),
        }
        now = int(time.time() * 1000)
        client.log_batch(target, metrics=[
            Metric(f"{prefix}{k}", float(v), now, step[0]) for k, v in values.items() if v is not None
        ])
        step[0] += 1

    return on_line


def _mb(value: Optional[float]) -> Optional[float]:
    return None if value is None else value / MIB


__all__ = ["callback", "log", "series", "SAMPLE_METRICS", "SUMMARY_METRICS"]
