"""The loader against a run directory the monitored command rewrote (issue 27): a part, a table
or run.json replaced by a symbolic link to someone else's file, a FIFO, and run.json/summary.json
that are not what montrace writes. Each is refused with MontraceError; the file a link points to is
never read, and nothing outside the run directory changes."""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import montrace
from montrace import MontraceError


def _processes(pids: "list[int]") -> pa.Table:
    return pa.table({
        "pid": pa.array(pids, pa.uint32()),
        "start_time": pa.array([1_714_564_800_000_000_000 + p for p in pids], pa.timestamp("ns", tz="UTC")),
        "comm": pa.array([f"p{p}" for p in pids]),
    })


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A run directory as a killed run leaves it: processes.parquet, samples in parts, run.json."""
    run = tmp_path / "run"
    run.mkdir()
    pq.write_table(_processes([1, 2]), run / "processes.parquet")
    parts = run / "samples.parts"
    parts.mkdir()
    pq.write_table(_processes([1]), parts / "samples-000000.parquet")
    (run / "run.json").write_text(json.dumps({"command": "true", "exit_status": 0}))
    return run


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """Someone else's file (here: a Parquet table of its own, which the loader would read fine
    if it followed the link) outside the run directory."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path = elsewhere / "secret.parquet"
    pq.write_table(_processes([666]), path)
    os.chmod(path, 0o600)
    return path


def _unchanged(path: Path):
    before = (path.read_bytes(), os.stat(path).st_mode, os.stat(path).st_mtime_ns)
    return lambda: (path.read_bytes(), os.stat(path).st_mode, os.stat(path).st_mtime_ns) == before


def test_an_untouched_run_reads(run: Path) -> None:
    loaded = montrace.load(run)
    assert loaded.table("processes").num_rows == 2
    assert loaded.table("samples").num_rows == 1
    assert loaded.info["command"] == "true"


def test_a_symlinked_part_is_refused_not_followed(run: Path, secret: Path) -> None:
    same = _unchanged(secret)
    (run / "samples.parts" / "samples-000001.parquet").symlink_to(secret)
    loaded = montrace.load(run)
    with pytest.raises(MontraceError, match="symbolic link"):
        loaded.table("samples")
    assert same()
    # The untouched tables still read.
    assert loaded.table("processes").num_rows == 2


def test_a_symlinked_table_is_refused(run: Path, secret: Path) -> None:
    same = _unchanged(secret)
    (run / "processes.parquet").unlink()
    (run / "processes.parquet").symlink_to(secret)
    with pytest.raises(MontraceError, match="symbolic link"):
        montrace.load(run).table("processes")
    assert same()


def test_a_symlinked_parts_directory_is_refused(run: Path, secret: Path) -> None:
    same = _unchanged(secret)
    elsewhere = secret.parent / "samples.parts"
    elsewhere.mkdir()
    os.link(secret, elsewhere / "samples-000000.parquet")
    for part in (run / "samples.parts").iterdir():
        part.unlink()
    (run / "samples.parts").rmdir()
    (run / "samples.parts").symlink_to(elsewhere)
    with pytest.raises(MontraceError, match="symbolic link|not a directory"):
        montrace.load(run).table("samples")
    assert same()


def test_a_symlinked_run_json_is_refused(run: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"command": "someone else's"}))
    (run / "run.json").unlink()
    (run / "run.json").symlink_to(target)
    with pytest.raises(MontraceError, match="symbolic link"):
        montrace.load(run)
    assert json.loads(target.read_text()) == {"command": "someone else's"}


def test_a_fifo_in_place_of_a_part_is_refused_at_once(run: Path) -> None:
    os.mkfifo(run / "samples.parts" / "samples-000001.parquet")
    outcome: "list[BaseException]" = []

    def read() -> None:
        try:
            montrace.load(run).table("samples")
        except BaseException as err:  # noqa: BLE001 - handed to the test's thread
            outcome.append(err)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "the loader blocked on a FIFO"
    assert len(outcome) == 1 and isinstance(outcome[0], MontraceError), outcome


@pytest.mark.parametrize(
    "name, text, why",
    [
        ("run.json", "[" * 200_000, "RecursionError"),
        ("run.json", "{\"command\": ", "not JSON"),
        ("run.json", "\xff\xfe", "not JSON"),
        ("run.json", "[1, 2]", "not an object"),
        ("run.json", json.dumps({"exit_status": "0"}), "exit_status"),
        ("run.json", json.dumps({"capacity": [1]}), "capacity"),
        ("summary.json", "{" * 200_000, "RecursionError|not JSON"),
        ("summary.json", json.dumps({"repetitions": "x"}), "repetitions"),
        ("summary.json", json.dumps({"repetitions": [1]}), "repetitions"),
        ("summary.json", json.dumps({"repetitions": [{"metrics": [1]}]}), "metrics"),
        ("summary.json", json.dumps({"repetitions": [{"metrics": {"cpu_s": "1"}}]}), "cpu_s"),
        ("summary.json", json.dumps({"exit_status": None, "limit_breach": "x"}), "limit_breach"),
    ],
)
def test_malformed_json_raises_montrace_error(run: Path, name: str, text: str, why: str) -> None:
    (run / name).write_bytes(text.encode("utf-8", "surrogateescape") if text != "\xff\xfe" else b"\xff\xfe")
    with pytest.raises(MontraceError, match=why):
        montrace.load(run)


def test_a_well_formed_summary_reads(run: Path) -> None:
    (run / "summary.json").write_text(json.dumps({
        "exit_status": 3,
        "repetitions": [{"metrics": {"cpu_s": 1.5, "wall_s": 2, "processes": 4}}],
    }))
    loaded = montrace.load(run)
    assert loaded.exit_status == 3
    assert loaded.resources["cpu_s"] == 1.5
    assert loaded.resources["processes"] == 4
