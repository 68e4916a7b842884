"""montrace.mlflow against a real local MLflow tracking store (a sqlite backend): the metrics
read back with MlflowClient are the run's samples, summed over the tree at each sweep."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

import montrace
import montrace.mlflow

import mlflow  # noqa: E402  (installed with the tests)
MIB = 1024 * 1024


@pytest.fixture
def tracking(tmp_path: Path):
    """A sqlite tracking store (MLflow's own recommendation) with artifacts under tmp_path."""
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    client = mlflow.tracking.MlflowClient()
    experiment = client.create_experiment("montrace", artifact_location=(tmp_path / "artifacts").as_uri())
    mlflow.set_experiment(experiment_id=experiment)
    yield client
    mlflow.set_tracking_uri(None)


def test_log_puts_the_series_the_summary_and_the_report_into_the_active_run(tracking, tmp_path: Path) -> None:
    run = montrace.run(
        [sys.executable, "-c", "b = bytearray(30 * 1024 * 1024); import time; time.sleep(0.5)"],
        out=tmp_path / "run", interval=0.05,
    )
    with mlflow.start_run() as active:
        montrace.mlflow.log(run)
    run_id = active.info.run_id

    samples = run.samples
    sweeps = samples[samples.source == "procfs"].groupby("time").sum(numeric_only=True).sort_index()
    assert len(sweeps) >= 5
    # The tree's memory is system.parquet's, each memory image once (run.json
    # tree_memory_peaks.source says how); the other series are sums of the sweep's rows.
    tree = run.system.set_index("time")["tree_rss_bytes"]
    sweeps["tree_rss_bytes"] = [tree.get(t, r) for t, r in zip(sweeps.index, sweeps["rss_bytes"])]
    for metric, column, scale in (("rss_mb", "tree_rss_bytes", 1 / MIB), ("cpu_percent", "cpu_percent", 1.0),
                                  ("threads", "threads", 1.0), ("fds", "fds", 1.0)):
        history = sorted(tracking.get_metric_history(run_id, metric), key=lambda m: m.step)
        assert [m.step for m in history] == list(range(len(sweeps))), metric
        expected = list(sweeps[column] * scale)
        assert [m.value for m in history] == pytest.approx(expected), metric
        first_ms = sweeps.index[0].value // 1_000_000  # ns since the epoch (UTC)
        assert history[0].timestamp == first_ms
    assert max(m.value for m in tracking.get_metric_history(run_id, "rss_mb")) > 30

    logged = tracking.get_run(run_id).data
    assert logged.params["montrace_tracking_mode"] == run.info["tracking_mode"]
    assert logged.params["montrace_exit_status"] == "0"
    assert logged.metrics["montrace_processes"] == len(run.processes)
    assert logged.metrics["montrace_cpu_s"] == pytest.approx(run.resources["cpu_s"])
    artifacts = [a.path for a in tracking.list_artifacts(run_id, "montrace")]
    assert artifacts == ["montrace/report.html"]


def test_the_callback_logs_each_sweep_as_it_comes(tracking, tmp_path: Path) -> None:
    lines = []

    with mlflow.start_run() as active:
        log_sweep = montrace.mlflow.callback()

        def callback(line: dict) -> None:
            lines.append(line)
            log_sweep(line)

        montrace.run(["sleep", "0.4"], out=tmp_path / "run", interval=0.05, callback=callback)
    sweeps = [line for line in lines if line["type"] == "sweep"]
    history = sorted(tracking.get_metric_history(active.info.run_id, "rss_mb"), key=lambda m: m.step)
    assert [m.value for m in history] == pytest.approx([s["rss_bytes"] / MIB for s in sweeps])
    live = tracking.get_metric_history(active.info.run_id, "live_processes")
    assert len(live) == len(sweeps) >= 3
