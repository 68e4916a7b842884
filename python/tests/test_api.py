"""The package against real runs of the installed wheel's montrace: counts and CPU seconds equal
processes.parquet, a killed run loads, monitor() / phase() / monitored() / the stream / the
callback do what docs/python.md says."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

import pandas as pd
import pyarrow.parquet as pq
import pytest

import montrace
from workloads import allocate, allocate_briefly, crash, spawn_true


def kernel_cpu_s(run: montrace.Run) -> float:
    p = run.processes
    return float((p.cpu_user_ns.fillna(0) + p.cpu_system_ns.fillna(0)).sum()) / 1e9


def test_run_figures_are_those_of_processes_parquet(out: Path) -> None:
    run = montrace.run(["sh", "-c", "for i in " + " ".join(["x"] * 20) + "; do /bin/true; done"], out=out, interval=0.05)
    assert run.path == out and run.finished
    assert run.info["tracking_mode"] != "polling"
    rows = pq.read_table(out / "processes.parquet")
    assert len(run.processes) == rows.num_rows == 21
    assert (run.processes.filename == "/bin/true").sum() == 20
    figures = run.resources
    assert figures["processes"] == 21
    assert not run.root_predates_run and figures["exact"] is True
    assert figures["critical_path_s"] == run.info["time"]["critical_path_s"] > 0
    assert figures["avg_parallelism"] == run.info["time"]["avg_parallelism"]
    assert figures["cpu_s"] == pytest.approx(kernel_cpu_s(run), abs=1e-9)
    assert figures["exit_status"] == 0 == run.exit_status
    assert run.summary["exit_status"] == 0 and run.info["argv"][0] == "sh"
    for name in ("samples", "system", "events", "marks"):
        assert len(run.frame(name)) == pq.read_table(out / f"{name}.parquet").num_rows
    assert len(run.gpu) == 0  # no NVIDIA GPU here: an empty frame
    polars = montrace.load(out, frames="polars")
    assert polars.processes.height == 21


def test_check_raises_on_a_failing_command(out: Path) -> None:
    with pytest.raises(montrace.CommandFailed) as failed:
        montrace.run(["sh", "-c", "exit 3"], out=out, check=True)
    assert failed.value.status == 3
    assert failed.value.run.exit_status == 3
    assert montrace.run(["sh", "-c", "exit 3"], out=out.with_name("again")).exit_status == 3


def test_bad_arguments_raise_montrace_error(tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "file").write_text("mine")
    with pytest.raises(montrace.MontraceError) as err:
        montrace.run(["true"], out=taken)
    assert "holds something already" in str(err.value) and "the command was not run" in str(err.value)
    assert (taken / "file").read_text() == "mine"
    with pytest.raises(montrace.MontraceError) as err:  # montrace's own refusal, with its words
        montrace.run(["true"], out=tmp_path / "new", extra_args=["--ring-buffer-size", "3"])
    assert "recorded no run" in str(err.value) and "ring" in str(err.value)
    assert not (tmp_path / "new").exists()


def test_a_killed_run_loads(tmp_path: Path) -> None:
    out = tmp_path / "killed"
    proc = subprocess.Popen(
        [montrace.binary(), "run", "-q", "--no-report", "--interval", "50ms", "--flush-interval",
         "100ms", "--out", str(out), "--", "sh", "-c", "/bin/true; exec sleep 30"],
    )
    parts = out / "samples.parts"
    flushed = out / "processes.parts"
    deadline = time.monotonic() + 30
    # Two sample parts, and the part with /bin/true's row (it ended at once; sh goes on as sleep).
    while len(list(parts.glob("*.parquet"))) < 2 or not list(flushed.glob("*.parquet")):
        assert time.monotonic() < deadline, "no sample parts"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    run = montrace.load(out)
    assert not run.finished and run.summary == {}
    samples = run.samples
    assert len(samples) > 0
    pids = set(samples.pid)
    # The tree outlived montrace: end it.
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    # The figures are those of the processes flushed before the kill: /bin/true's row alone.
    rows = [r for part in sorted(flushed.glob("*.parquet")) for r in pq.read_table(part).to_pylist()]
    assert [r["filename"] for r in rows] == ["/bin/true"] and rows[0]["exit_code"] == 0
    res = run.resources
    assert res["processes"] == len(rows) == len(run.processes) == 1
    assert res["cpu_user_s"] == rows[0]["cpu_user_ns"] / 1e9
    assert res["cpu_system_s"] == rows[0]["cpu_system_ns"] / 1e9
    assert res["cpu_s"] == res["cpu_user_s"] + res["cpu_system_s"] > 0
    assert res["peak_process_rss_bytes"] == rows[0]["peak_rss_bytes"] > 0
    assert (res["read_bytes"], res["write_bytes"]) == (rows[0]["read_bytes"], rows[0]["write_bytes"])
    assert "montrace run" in run._repr_html_()


def test_monitor_records_the_50_processes_started_in_the_block(tmp_path: Path) -> None:
    with montrace.monitor(interval=0.05, out=tmp_path / "m") as m:
        m.mark("first")  # at once: the socket is bound before the block starts
        for _ in range(50):
            subprocess.run(["/bin/true"], check=True)
        x = sum(i * i for i in range(200_000))
    assert x > 0
    run = m.run
    assert run is not None and run.finished
    procs = run.processes
    assert (procs.filename == "/bin/true").sum() == 50
    assert len(procs) == 51  # and this Python process, the root
    assert int(procs.pid[procs.parent_pid.isna() | (procs.pid == os.getpid())].iloc[0]) == os.getpid()
    assert m.resources["processes"] == 51
    assert list(run.marks.label) == ["first"]
    children = procs[procs.pid != os.getpid()]
    child_cpu = float((children.cpu_user_ns + children.cpu_system_ns).sum()) / 1e9
    # Children's exact exit figures plus this process's own (getrusage over the block).
    assert m.resources["cpu_s"] > child_cpu
    assert m.resources["wall_s"] > 0


def test_phase_marks_bracket_the_work(tmp_path: Path) -> None:
    with montrace.monitor(interval=0.05, out=tmp_path / "m") as m:
        with m.phase("work"):
            subprocess.run(["sleep", "0.2"], check=True)
        m.mark("after")
    marks = m.run.marks
    assert list(zip(marks.label, marks.kind)) == [("work", "begin"), ("work", "end"), ("after", "point")]
    sleep = m.run.processes[m.run.processes.filename.str.endswith("/sleep")].iloc[0]
    begin, end = marks.time.iloc[0], marks.time.iloc[1]
    assert begin <= sleep.start_time and sleep.end_time <= end
    assert (marks.pid == os.getpid()).all()


def test_monitored_returns_the_result_and_the_resources(tmp_path: Path) -> None:
    result, resources = montrace.monitored(out=tmp_path)(spawn_true)(3)
    assert result == 3
    run = montrace.load(resources["run_dir"])
    procs = run.processes
    assert (procs.filename == "/bin/true").sum() == 3
    assert resources["processes"] == len(procs) == 4  # the child Python and its 3
    assert resources["cpu_s"] == pytest.approx(kernel_cpu_s(run), abs=1e-9)
    plain = montrace.monitored(return_resources=False)(spawn_true)(1)
    assert plain == 1


def test_monitored_raises_limit_exceeded_and_this_process_goes_on() -> None:
    fn = montrace.monitored(limits={"rss": "100MiB"}, interval=0.05)(allocate)
    with pytest.raises(montrace.LimitExceeded) as breach:
        fn(300)
    err = breach.value
    assert err.limit == "rss"
    assert err.threshold == 100 * 1024 * 1024
    assert err.value > err.threshold
    assert err.run is not None and err.run.limit_breach["limit"] == "rss"
    seen = round(err.value / 2**20)
    assert str(err).startswith(f"limit rss exceeded: {seen} MiB seen, limit 100 MiB (run: "), str(err)
    shutil.rmtree(err.run.path.parent)  # the breach's run was kept for it
    # Still alive and able to go on.
    assert montrace.monitored(return_resources=False)(spawn_true)(0) == 0


def test_monitored_propagates_exceptions_with_their_traceback() -> None:
    with pytest.raises(ValueError, match="boom 7") as raised:
        montrace.monitored(crash)(7)
    cause = raised.value.__cause__
    assert cause is not None and "in crash" in str(cause) and "boom 7" in str(cause)


class Counter:
    def __init__(self, start: int) -> None:
        self.start = start

    def add(self, n: int) -> int:
        return self.start + n


class Refused(Exception):
    """An exception of the tests' own, raised in the child and raised again here."""


def test_monitored_takes_any_callable_without_cloudpickle(monkeypatch) -> None:
    # MLflow, installed for its tests, brings cloudpickle: here it cannot be imported.
    monkeypatch.setitem(sys.modules, "cloudpickle", None)
    with pytest.raises(ImportError):
        import cloudpickle  # noqa: F401
    offset = 40

    def nested(n: int) -> int:  # a closure over `offset`, defined in a function
        return n + offset

    lock = threading.Lock()  # an argument that cannot be pickled: it is never pickled
    plain = dict(return_resources=False)
    assert montrace.monitored(**plain)(lambda: 41 + 1)() == 42
    assert montrace.monitored(**plain)(nested)(2) == 42
    assert montrace.monitored(**plain)(Counter(40).add)(2) == 42
    assert montrace.monitored(**plain)(lambda held: held.acquire(blocking=False))(lock) is True
    assert not lock.locked(), "the child acquired its own copy of the lock"

    class Box:
        @montrace.monitored(return_resources=False)
        def times(self, n: int) -> int:
            return 6 * n

    assert Box().times(7) == 42


def test_monitored_runs_the_call_in_a_child_recorded_whole(tmp_path: Path) -> None:
    outside = 3
    result, resources = montrace.monitored(out=tmp_path)(lambda: spawn_true(outside))()
    assert result == 3
    run = montrace.load(resources["run_dir"])
    procs = run.processes
    assert (procs.filename == "/bin/true").sum() == 3
    child = procs[procs.filename != "/bin/true"]
    assert len(child) == 1 and int(child.pid.iloc[0]) != os.getpid()
    assert resources["processes"] == len(procs) == 4
    assert resources["exact"] is True
    # The child waited for montrace before the call: the run saw the end of its life only, and
    # where the time went over a life it did not see is not shown.
    assert run.root_predates_run and resources["critical_path_s"] is None
    assert resources["avg_parallelism"] is None and 0 < resources["wall_s"]


def test_monitored_brings_back_the_exception_with_its_type_and_message() -> None:
    def refuse(n: int) -> None:
        raise Refused(f"no {n}")

    with pytest.raises(Refused, match="^no 5$") as raised:
        montrace.monitored(refuse)(5)
    assert "in refuse" in str(raised.value.__cause__)
    with pytest.raises(KeyError, match="'missing'"):
        montrace.monitored(lambda: {}["missing"])()


def test_what_cannot_come_back_is_said() -> None:
    with pytest.raises(TypeError, match=r"returned a _thread.lock, which cannot be pickled back"):
        montrace.monitored(threading.Lock)()

    class Local(Exception):
        pass

    def raise_local() -> None:
        raise Local("kept in words")

    with pytest.raises(RuntimeError, match=r"raised .*Local: kept in words \(the exception itself cannot"):
        montrace.monitored(raise_local)()


def test_what_cannot_work_is_refused_when_decorated() -> None:
    async def coroutine() -> int:
        return 1

    def generator() -> Iterator[int]:
        yield 1

    with pytest.raises(TypeError, match="is async"):
        montrace.monitored(coroutine)
    with pytest.raises(TypeError, match="generator function"):
        montrace.monitored(generator)
    with pytest.raises(TypeError, match="takes a callable"):
        montrace.monitored(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="1 MiB"):
        montrace.monitored(limits={"rss": 100})
    with pytest.raises(TypeError, match=r"\(id, name, step, resources\)"):
        montrace.monitored(callback=lambda a, b: None)


def test_the_call_is_not_made_when_montrace_does_not_start(tmp_path: Path, monkeypatch) -> None:
    marker = tmp_path / "called"
    monkeypatch.setenv("MONTRACE_BIN", "/bin/false")
    with pytest.raises(montrace.MontraceError, match="montrace attach did not start"):
        montrace.monitored(lambda: marker.touch())()
    assert not marker.exists(), "the call ran unmonitored"
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)  # the child was reaped


def test_a_cctools_callback_gets_each_sweep(tmp_path: Path) -> None:
    got = []
    cctools = montrace.monitored(callback=lambda id, name, step, res: got.append((id, name, step, res)),
                                 interval=0.05, return_resources=False)(allocate_briefly)
    assert cctools(40) == 40 << 20
    assert got, "no sweep reached the callback"
    ids = {g[0] for g in got}
    assert len(ids) == 1 and {g[1] for g in got} == {"allocate_briefly"}
    assert [g[2] for g in got] == list(range(1, len(got) + 1))
    assert max(g[3]["memory"] for g in got) > 40  # MB, as cctools says
    assert all(g[3]["montrace"]["type"] == "sweep" for g in got)


def test_run_into_an_existing_run_raises_and_does_not_run(tmp_path: Path) -> None:
    first = montrace.run(["true"], out=tmp_path / "run")
    before = sorted(p.name for p in first.path.iterdir())
    marker = tmp_path / "ran"
    with pytest.raises(montrace.MontraceError, match="holds a run directory already"):
        montrace.run(["touch", str(marker)], out=tmp_path / "run")
    assert not marker.exists(), "the new command ran"
    assert sorted(p.name for p in first.path.iterdir()) == before
    empty = tmp_path / "empty"
    empty.mkdir()
    assert montrace.run(["touch", str(marker)], out=empty).exit_status == 0 and marker.exists()


def test_monitored_runs_get_unique_names_and_temporary_ones_go(tmp_path: Path, monkeypatch) -> None:
    fn = montrace.monitored(out=tmp_path / "runs")(lambda: 1)
    dirs = [fn()[1]["run_dir"] for _ in range(3)]  # well within one second each
    assert len(set(dirs)) == 3
    assert sorted(str(p) for p in (tmp_path / "runs").iterdir()) == sorted(dirs)
    assert all(montrace.load(d).processes.shape[0] == 1 for d in dirs)
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # where the package makes its own
    result, resources = montrace.monitored(lambda: 2)()
    assert result == 2 and resources["run_dir"] is None and resources["processes"] == 1
    assert list(temp.iterdir()) == [], "the temporary run was left behind"
    kept = montrace.monitored(keep=True)(lambda: 3)()[1]["run_dir"]
    assert [str(p) for p in temp.iterdir()] == [kept] and montrace.load(kept).finished


def test_notices_are_shown_once_per_process(capsys: pytest.CaptureFixture) -> None:
    from montrace._binary import StderrRelay

    for _ in range(3):
        read, write = os.pipe()
        with os.fdopen(write, "wb") as pipe:
            pipe.write(b"montrace: no cgroup for the run, so no kernel totals: test notice\n"
                       b"montrace: error: every time\n")
        relay = StderrRelay(os.fdopen(read, "rb"))
        assert "test notice" in relay.finish()  # kept for error messages every time
    err = capsys.readouterr().err
    assert err.count("test notice") == 1 and err.count("every time") == 3


def test_the_stream_and_the_callback(tmp_path: Path) -> None:
    got = []
    seen_while_running = []

    def callback(line: dict) -> None:
        got.append(line)
        if line["type"] == "sweep":
            seen_while_running.append(time.time())

    stream = tmp_path / "stream.jsonl"
    run = montrace.run(
        ["sh", "-c", "for i in 1 2 3 4 5; do /bin/true; done; sleep 0.5"],
        interval=0.05, out=tmp_path / "run", stream=stream, callback=callback,
    )
    text = stream.read_text()
    lines = [json.loads(line) for line in text.splitlines()]  # valid JSON on every line
    assert got == lines, "the callback got every line, in order"
    assert lines[-1]["type"] == "end" and lines[-1]["final"] is True
    assert sum(1 for line in lines if line.get("final")) == 1
    sweeps = [line for line in lines if line["type"] == "sweep"]
    # One sweep line per row of system.parquet, at its time (the line's is cut to microseconds),
    # in order: a sweep that found no process of the tree still writes both.
    system_times = [t.floor("us") for t in run.system.time]
    assert len(system_times) >= 2
    assert [pd.Timestamp(line["time"]) for line in sweeps] == system_times
    assert [line for line in got if line["type"] == "sweep"] == sweeps
    procs = run.processes
    starts = {line["pid"] for line in lines if line["type"] == "start"}
    exits = {line["pid"] for line in lines if line["type"] == "exit"}
    assert starts == exits == set(int(p) for p in procs.pid)
    assert sum(1 for line in lines if line["type"] == "start") == len(procs)
    end_of_run = procs.end_time.max().timestamp()
    assert seen_while_running and seen_while_running[0] < end_of_run
    assert montrace.read_stream(stream) == lines


def test_a_failing_callback_is_raised_after_the_run(tmp_path: Path) -> None:
    def callback(line: dict) -> None:
        raise RuntimeError("callback broke")

    with pytest.raises(RuntimeError, match="callback broke"):
        montrace.run(["sleep", "0.2"], out=tmp_path / "run", interval=0.05, callback=callback)
    assert (tmp_path / "run" / "processes.parquet").is_file(), "the run was recorded whole"


def test_repr_html_shows_the_headline_the_groups_and_the_memory_plot(tmp_path: Path) -> None:
    run = montrace.run(
        [sys.executable, "-c", "b = bytearray(40 * 1024 * 1024); import time; time.sleep(0.4)"],
        out=tmp_path / "run", interval=0.05,
    )
    page = run._repr_html_()
    assert "memory peak of the tree" in page and "<svg" in page and "<polyline" in page
    assert os.path.basename(sys.executable) in page  # the group table names the program
    peak_mib = run.resources["peak_rss_bytes"] / 2**20
    assert peak_mib > 40 and f"{peak_mib:.1f} MiB" in page
