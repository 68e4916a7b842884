"""Percentages against what the run could use: inside a cgroup limited to half a core and
256 MiB, a 1 s busy loop uses about 100 % of its capacity (it would be 25 % of this 2-core host
measured against the host); outside, the same loop is measured against the host's CPUs, and
one busy process cannot use more than one of them."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import json, sys, montrace
run = montrace.run(["timeout", "1", "sh", "-c", "while :; do :; done"], out=sys.argv[1], interval=0.1)
print(json.dumps(run.resources))
"""


def resources(argv: "list[str]") -> dict:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_inside_a_limited_cgroup(limited_cgroup, tmp_path) -> None:
    figures = resources(limited_cgroup.wrap([sys.executable, "-c", SCRIPT, str(tmp_path / "run")]))
    assert figures["cpu_capacity_cores"] == 0.5
    assert figures["memory_capacity_bytes"] == limited_cgroup.MEMORY
    assert str(limited_cgroup.dirs[0]) in figures["cpu_capacity_basis"]
    assert figures["avg_cpu_percent_of_capacity"] == pytest.approx(
        figures["cpu_s"] / figures["wall_s"] / 0.5 * 100
    )
    # Half a core, busy for the whole second: most of the capacity (against the 2 cores of
    # this host it would read 25 %).
    assert 60 <= figures["avg_cpu_percent_of_capacity"] <= 115, figures
    assert figures["peak_memory_percent_of_capacity"] == pytest.approx(
        figures["peak_rss_bytes"] / limited_cgroup.MEMORY * 100
    )


def test_outside_any_limit_against_the_host(tmp_path) -> None:
    figures = resources([sys.executable, "-c", SCRIPT, str(tmp_path / "run")])
    assert figures["cpu_capacity_basis"] == "host"
    assert figures["cpu_capacity_cores"] == os.cpu_count()
    # Against all the host's CPUs (what the loop got of one depends on the machine's load).
    assert figures["avg_cpu_percent_of_capacity"] == pytest.approx(
        figures["cpu_s"] / figures["wall_s"] / os.cpu_count() * 100
    )
    assert figures["avg_cpu_percent_of_capacity"] <= 100 / os.cpu_count() * 1.15, figures
