"""docs/python.md works as written: each Python example runs as a script (in a new directory,
with the installed wheel) and prints what the page says it shows; the install lines name the
wheel `cargo xtask wheel` builds."""
from __future__ import annotations

import fnmatch
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "python.md"


def blocks(language: str) -> "list[str]":
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.S)


# What each example prints, in the page's order.
EXPECTED = [
    [r"^4 processes, [0-9.e-]+ CPU seconds$", r"/bin/true", r"^(tp_btf|tp_classic|polling) 0$"],
    [r"^True \d+ [0-9.]+$"],
    [r"^6 processes; [0-9.]+ CPU seconds$", r"load\s+begin", r"done\s+point"],
    [r"^333332833333500000 [0-9.e-]+ \d+$", r"^stopped: rss \d+(\.\d+)? > 104857600(\.0)?$"],
    [r"^ *0\.\d+ s +[0-9.]+ MiB", r"^done: 3 processes, exit 0$"],
    [r"^\d+ steps of rss_mb$"],
]


def test_every_example_is_checked() -> None:
    assert len(blocks("python")) == len(EXPECTED)


@pytest.mark.parametrize("index", range(len(EXPECTED)))
def test_example(index: int, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(blocks("python")[index])
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    for pattern in EXPECTED[index]:
        assert re.search(pattern, done.stdout, flags=re.M), f"{pattern!r} not in:\n{done.stdout}"


def test_the_install_lines_name_the_built_wheel() -> None:
    install = blocks("sh")[0]
    assert "cargo xtask wheel --release" in install
    pattern = re.search(r"pip install (target/wheels/release/\S+\.whl)", install).group(1)
    built = os.environ.get("MONTRACE_WHEEL")
    assert built, "cargo xtask test passes the wheel it built in MONTRACE_WHEEL"
    relative = os.path.relpath(built, DOC.parents[1])
    assert fnmatch.fnmatch(relative, pattern.replace("/release/", "/dev/")), (relative, pattern)
