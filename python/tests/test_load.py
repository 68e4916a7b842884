"""montrace.load reads runs of every schema version alike (times as UTC microsecond timestamps,
exact nanoseconds in ``<name>_ns``), and the tree's memory over time is the deduplicated figure
montrace records (system.parquet ``tree_rss_bytes``), not a sum of samples."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import montrace

# A real run written by montrace at schema version 1 (timestamp[ns, tz=UTC]).
FIXTURE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "run-small"
UTC_US = pa.timestamp("us", tz="UTC")


def rewritten(src: Path, dst: Path, version: str) -> Path:
    """``src`` (schema version 1) as version 2 (timestamp[ns], no zone) or 3 (timestamp[us,
    UTC] with int64 ``<name>_ns`` twins appended), every other column as it was."""
    shutil.copytree(src, dst)
    for path in dst.glob("*.parquet"):
        table = pq.read_table(path)
        times = [f.name for f in table.schema if pa.types.is_timestamp(f.type)]
        for name in times:
            column = table.column(name)
            index = table.column_names.index(name)
            if version == "2":
                table = table.set_column(index, name, column.cast(pa.timestamp("ns")))
            else:
                table = table.set_column(index, pa.field(name, UTC_US), column.cast(UTC_US, safe=False))
                table = table.append_column(f"{name}_ns", column.cast(pa.int64()))
        metadata = dict(table.schema.metadata or {})
        metadata[b"montrace.schema_version"] = version.encode()
        pq.write_table(table.replace_schema_metadata(metadata), path, compression="zstd")
    return dst


@pytest.mark.parametrize("frames", ["pandas", "polars"])
def test_every_schema_version_loads_alike(tmp_path: Path, frames: str) -> None:
    exact = pq.read_table(FIXTURE / "processes.parquet").column("start_time").cast(pa.int64()).to_pylist()
    assert len(exact) == 22 and any(ns % 1000 for ns in exact), "the fixture has sub-microsecond times"
    runs = {
        "1": FIXTURE,
        "2": rewritten(FIXTURE, tmp_path / "v2", "2"),
        "3": rewritten(FIXTURE, tmp_path / "v3", "3"),
    }
    seen = {}
    for version, path in runs.items():
        run = montrace.load(path, frames=frames)
        procs = run.table("processes")
        for name in ("start_time", "parent_start_time", "end_time"):
            assert procs.schema.field(name).type == UTC_US, (version, name)
            assert procs.schema.field(f"{name}_ns").type == pa.int64(), (version, name)
        assert procs.column("start_time_ns").to_pylist() == exact, version
        samples = run.table("samples")
        assert samples.column_names[-2:] == ["time_ns", "start_time_ns"], version
        if frames == "pandas":
            assert str(run.samples.time.dtype) == "datetime64[us, UTC]", version
        else:
            assert str(run.samples.schema["time"]) == "Datetime(time_unit='us', time_zone='UTC')", version
        seen[version] = (
            {k: v for k, v in run.resources.items() if k != "run_dir"},
            run.tree_memory(),
            run.table("events").to_pylist(),
            repr(run).replace(str(path), "RUN"),
        )
    assert seen["1"] == seen["2"] == seen["3"]
    figures, tree, _, text = seen["1"]
    assert figures["processes"] == 22 and figures["exact"] is True
    assert len(tree) >= 2 and text.startswith("<montrace.Run 'RUN': 22 processes")


def test_tree_memory_is_the_deduplicated_figure(out: Path) -> None:
    # A 64 MiB Python process that starts /bin/true through subprocess (vfork, then exec) again
    # and again: a sweep between the vfork and the exec would see the child with its parent's
    # memory, which a sum of samples.parquet counts twice.
    script = (
        "import subprocess, time\n"
        "b = bytearray(64 << 20)\n"
        "end = time.monotonic() + 1.0\n"
        "while time.monotonic() < end:\n"
        "    subprocess.run(['/bin/true'])\n"
    )
    run = montrace.run([sys.executable, "-c", script], out=out, interval=0.02)
    system = run.table("system")
    expected = sorted(
        (t, v) for t, v in zip(system.column("time").to_pylist(), system.column("tree_rss_bytes").to_pylist())
        if v is not None
    )
    assert len(expected) >= 5
    assert run.tree_memory() == expected
    assert max(v for _, v in expected) == run.info["tree_memory_peaks"]["rss_bytes"]
    # A run of an earlier version, without system.parquet's tree columns: the sums of samples.
    old = montrace.load(FIXTURE)
    assert "tree_rss_bytes" not in old.table("system").column_names
    samples = old.table("samples")
    sums: dict = {}
    for t, rss in zip(samples.column("time").to_pylist(), samples.column("rss_bytes").to_pylist()):
        sums[t] = sums.get(t, 0) + (rss or 0)
    assert old.tree_memory() == sorted(sums.items())



def test_pyarrow_reads_through_native_files_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # A Python file object handed to pyarrow can be released by one of pyarrow's I/O threads,
    # which must then take the GIL; at interpreter exit that aborts the process ("terminate
    # called without an active exception", apache/arrow#34314), once in a CI run of the suite.
    # Every read gets a pyarrow NativeFile on the descriptor montrace opened (no link followed).
    sources = []
    real = pq.read_table

    def spy(source, *args, **kwargs):  # type: ignore[no-untyped-def]
        sources.append(source)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(pq, "read_table", spy)
    run = montrace.load(FIXTURE)
    for name in ("processes", "samples", "system", "events"):
        assert run.table(name).num_rows > 0, name
    assert len(sources) >= 4
    assert all(isinstance(s, pa.NativeFile) for s in sources), sources
