"""docs/cluster.md's Parsl workflow, as written (HighThroughputExecutor: its interchange and worker
pool, on 127.0.0.1), run by an ordinary user whose node has montrace's agent: each ``bash_app`` task under
``montrace.parsl.recorded`` is a run of its own, exact, labelled with the app and the task's key,
written as the user; a failing task still fails in Parsl with its status, and is recorded."""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pyarrow.parquet as pq

from conftest import owners
from montrace.parsl import task_key, task_labels, wrap_command

DOC = Path(__file__).resolve().parents[2] / "docs" / "cluster.md"


def doc_example() -> str:
    """docs/cluster.md's Parsl example, as written."""
    after = DOC.read_text().split("<!-- parsl example -->", 1)[1]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


def test_each_task_of_the_docs_parsl_workflow_is_an_exact_run_of_its_own(user, agent: Path) -> None:
    bin_dir = str(Path(sys.executable).parent)  # process_worker_pool.py, as Parsl needs it
    result = user.run([sys.executable, "-c", doc_example()],
                      env={"MONTRACE_AGENT_SOCKET": str(agent),
                           "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"},
                      timeout=300)  # Parsl's interchange and workers start and stop too
    assert result.returncode == 0, result.stderr
    # Parsl got each command's status through montrace: 0 five times, and the failure's 3.
    assert result.stdout.splitlines()[-2:] == ["[0, 0, 0, 0, 0]", "failed with 3"], result
    assert (user.home / "spawn3.out").read_text() == "spawned 3\n"
    runs = {}
    for run in (user.home / "montrace-runs").iterdir():
        info = json.loads((run / "run.json").read_text())
        runs[info["labels"]["parsl.key"]] = (run, info)
    assert len(runs) == 6, sorted(runs)
    for n in range(1, 6):
        run, info = runs[f"spawn-{task_key_of('spawn', n)}"]
        assert info["labels"]["parsl.app"] == "spawn" and info["labels"]["workflow"] == "demo"
        assert info["labels"]["parsl.worker_rank"] in ("0", "1") and "parsl.block" in info["labels"]
        assert info["tracking_mode"] in ("tp_btf", "tracepoint"), (info, result.stderr)
        assert info["exit_code"] == 0
        names = pq.read_table(run / "processes.parquet").column("filename").to_pylist()
        # The task's bash, seq and n /bin/true: every one, as only kernel events give.
        assert (len(names), names.count("/bin/true")) == (n + 2, n), names
    run, info = runs[f"fail-{task_key_of('fail', 3)}"]
    assert info["exit_code"] == 3 and info["tracking_mode"] in ("tp_btf", "tracepoint")
    assert owners(user.home / "montrace-runs") == {user.uid}


def task_key_of(name: str, arg: int) -> str:
    """The hash part of the key the worker gave ``name(arg)``."""
    def app() -> None: ...
    app.__name__ = name
    return task_key(app, (arg,), {}).split("-", 1)[1]


def test_a_key_is_the_app_and_its_arguments_not_parsls_own() -> None:
    def align(sample, stdout=None, parsl_resource_specification=None): ...
    key = task_key(align, ("s1",), {"stdout": "a.out", "parsl_resource_specification": {"cores": 2}})
    assert key == task_key(align, ("s1",), {})
    assert key.startswith("align-") and len(key) == len("align-") + 12
    assert key != task_key(align, ("s2",), {})
    assert task_key(align, ("s1",), {"min_q": 3}) != key


def test_labels_say_the_worker_what_the_task_asked_for_and_the_callers_win() -> None:
    def align(sample): ...
    labels = task_labels(
        align, "align-abc",
        {"parsl_resource_specification": {"cores": 4, "memory": 2048, "running_time": 600}},
        {"PARSL_WORKER_RANK": "1", "PARSL_WORKER_BLOCK_ID": "0", "HOME": "/x"},
        {"workflow": "wgs", "parsl.key": "mine"},
    )
    assert labels == {
        "parsl.app": "align", "parsl.key": "mine", "parsl.worker_rank": "1", "parsl.block": "0",
        "parsl.requested_cores": "4", "parsl.requested_memory_mb": "2048",
        "parsl.requested_running_time_s": "600", "workflow": "wgs",
    }


def test_the_command_line_reaches_bash_as_written() -> None:
    line = "echo 'it''s' \"$HOME\" $(seq 2) > out; exit 3"
    wrapped = wrap_command(line, "/opt/mt bin/montrace", Path("/r/x y"), {"k": "a b"}, ["--quiet"])
    assert wrapped.startswith("exec '/opt/mt bin/montrace' run -o '/r/x y' --quiet --label 'k=a b' -- ")
    argv = shlex.split(wrapped)
    assert argv[-3:] == ["/bin/bash", "-c", line]
