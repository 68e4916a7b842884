"""The pure parts of the package: limits and their units, the words of a breach, the checks of a
callback, the reading of file capabilities and of `montrace doctor`'s answer."""
from __future__ import annotations

import struct

import pytest

import montrace
from montrace._api import _callback_maker, _cctools_resources
from montrace._binary import CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, can_trace, parse_file_caps
from montrace._doctor import parse
from montrace._units import format_bytes, interval_arg, limit_args, parse_bytes, parse_seconds

MIB = 1 << 20


@pytest.mark.parametrize("text, expected", [
    ("500MiB", 500 * MIB), ("500MB", 500 * MIB), ("500m", 500 * MIB), ("2GB", 2 << 30),
    ("2GiB", 2 << 30), ("1.5GiB", 3 << 29), ("4096KiB", 4 * MIB), (" 3 MiB ", 3 * MIB),
    ("1TiB", 1 << 40), ("1048576B", MIB),
])
def test_sizes_with_units(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


def test_a_number_for_memory_is_bytes_and_at_least_a_mebibyte() -> None:
    assert parse_bytes(MIB) == MIB
    assert parse_bytes(2.5 * MIB) == int(2.5 * MIB)
    with pytest.raises(ValueError) as small:
        parse_bytes(100)
    message = str(small.value)
    assert "limits={'rss': 100}" in message and "bare number is bytes" in message
    assert "'100MiB'" in message and "KiB, MiB, GiB" in message
    with pytest.raises(ValueError, match="no unit; write e.g. '100MiB'"):
        parse_bytes("100")
    with pytest.raises(ValueError, match="not a size"):
        parse_bytes("100 apples")
    with pytest.raises(TypeError):
        parse_bytes(True)
    with pytest.raises(ValueError, match="above zero"):
        parse_bytes(-5 * MIB)


@pytest.mark.parametrize("value, seconds", [
    ("90s", 90.0), ("1.5m", 90.0), ("2h", 7200.0), ("250ms", 0.25), ("10us", 1e-5), (90, 90.0), (0.5, 0.5),
])
def test_durations(value, seconds: float) -> None:
    assert parse_seconds(value) == pytest.approx(seconds)


def test_a_duration_string_needs_its_unit() -> None:
    with pytest.raises(ValueError, match=r"limits=\{'wall': '90'\}: not a duration; write e.g. '90s'"):
        parse_seconds("90", "wall")


def test_limit_args_are_exact_and_in_montraces_base_units() -> None:
    assert limit_args({"rss": "500MiB", "gpu-mem": "2GB", "wall": 90, "cpu": "1.5m", "procs": 5}) == [
        "--limit", "rss=524288000", "--limit", "gpu-mem=2147483648", "--limit", "wall=90s",
        "--limit", "cpu=90s", "--limit", "procs=5",
    ]
    assert limit_args({"wall": 0.25}) == ["--limit", "wall=250ms"]
    with pytest.raises(ValueError, match="unknown limit 'memory': the limits are rss, gpu-mem"):
        limit_args({"memory": "1GiB"})
    with pytest.raises(ValueError, match="whole number of processes"):
        limit_args({"procs": 2.5})
    assert interval_arg(0.05) == "50ms" and interval_arg("1s") == "1s"
    with pytest.raises(ValueError, match="at most every 10 ms"):
        interval_arg(0.001)


def test_run_refuses_a_bad_limit_before_anything_runs(tmp_path) -> None:
    with pytest.raises(ValueError, match="1 MiB"):
        montrace.run(["touch", str(tmp_path / "ran")], limits={"rss": 100})
    assert not (tmp_path / "ran").exists()


def test_numbers_in_words() -> None:
    assert format_bytes(2.17989e08) == "208 MiB"
    assert format_bytes(1.5 * (1 << 30)) == "1.50 GiB"
    assert format_bytes(512) == "512 B"
    breach = montrace.LimitExceeded("rss", 100 * MIB, 2.17989e08)
    assert str(breach) == "limit rss exceeded: 208 MiB seen, limit 100 MiB"
    assert str(montrace.LimitExceeded("wall", 2.0, 2.0312)) == "limit wall exceeded: 2.031 s seen, limit 2.000 s"
    assert str(montrace.LimitExceeded("procs", 10, 11)) == "limit procs exceeded: 11 seen, limit 10"


def test_callbacks_are_checked_when_given() -> None:
    one = lambda line: None  # noqa: E731
    assert _callback_maker(one)("f") is one
    assert _callback_maker(print)("f") is print  # a builtin: one argument
    with pytest.raises(TypeError, match=r"takes \(a, b\): montrace calls it with one argument"):
        _callback_maker(lambda a, b: None)
    with pytest.raises(TypeError, match="must be callable"):
        _callback_maker("print")
    got = []
    adapted = _callback_maker(lambda id, name, step, res: got.append((id, name, step, res)))("fit")
    sweep = {"type": "sweep", "elapsed_s": 1.5, "cpu_percent": 150.0, "rss_bytes": 300 * MIB,
             "read_bytes": 7, "write_bytes": 8, "live": 3, "started": 4}
    adapted({"type": "start", "pid": 1})
    adapted(sweep)
    adapted(sweep)
    assert [(g[1], g[2]) for g in got] == [("fit", 1), ("fit", 2)]
    assert got[0][3] == _cctools_resources(sweep)
    assert got[0][3]["memory"] == 300 and got[0][3]["cores"] == 1.5 and got[0][3]["wall_time"] == 1.5
    again = _callback_maker(lambda id, name, step, res: got.append(id))("fit")
    again(sweep)
    assert got[-1] > got[0][0], "each call gets its own id"


def test_file_capabilities_are_read_as_the_kernel_writes_them() -> None:
    # VFS_CAP_REVISION_2 | effective, permitted CAP_BPF + CAP_PERFMON (privilege::file_caps_xattr).
    granted = (1 << (CAP_BPF - 32)) | (1 << (CAP_PERFMON - 32))
    value = struct.pack("<5I", 0x0200_0001, 0, 0, granted, 0)
    caps = parse_file_caps(value)
    assert caps == (1 << CAP_BPF) | (1 << CAP_PERFMON) and can_trace(caps)
    assert can_trace(1 << CAP_SYS_ADMIN) and not can_trace(1 << CAP_BPF)
    assert parse_file_caps(struct.pack("<5I", 0x0100_0000, 0, 0, 0, 0)) is None
    assert parse_file_caps(b"short") is None


DOCTOR = """kernel         ok  6.8.0
BTF            ok  /sys/kernel/btf/vmlinux gives the task fields montrace reads
privilege      ok  capabilities cap_bpf, cap_perfmon from /usr/local/bin/montrace: dropped once the programs are attached
eBPF programs  ok  loaded and attached (tp_btf) in 41 ms
run cgroup     no  none (Permission denied): runs record no cgroup totals and no CPU coverage
NVIDIA GPUs    no  no NVIDIA driver library

montrace run here: exact tracking with eBPF (tp_btf): every process of the tree, however short, with its exit figures
"""


def test_the_doctors_answer_is_read() -> None:
    checks, verdict, mode = parse(DOCTOR)
    assert mode == "tp_btf" and verdict.startswith("montrace run here: exact tracking")
    assert ("run cgroup", False, "none (Permission denied): runs record no cgroup totals and no CPU coverage") in checks
    assert len(checks) == 6
    polled = DOCTOR.replace("eBPF programs  ok  loaded and attached (tp_btf) in 41 ms",
                            "eBPF programs  no  cannot be loaded: no privilege (see above)")
    assert parse(polled)[2] is None
    # Through the resident agent: the agent's mode, whatever this binary may load.
    through = polled.replace(
        "montrace run here: exact tracking with eBPF (tp_btf): every process",
        "agent          ok  /run/montrace/agent.sock answers: the runs it follows are exact (tracepoint)\n\n"
        "montrace run here: exact tracking through the montrace agent at /run/montrace/agent.sock "
        "(tracepoint): every process")
    checks, verdict, mode = parse(through)
    assert mode == "tracepoint" and ("agent" in [c[0] for c in checks]), (checks, verdict)
    failing = polled.replace(
        "montrace run here: exact tracking with eBPF (tp_btf): every process of the tree, however short, with its exit figures",
        "montrace run here: fails: MONTRACE_AGENT_SOCKET names /tmp/a.sock, which does not answer (start the agent, or unset MONTRACE_AGENT_SOCKET)")
    assert parse(failing)[2] is None
