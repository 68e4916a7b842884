"""docs/python.md works as written: each Python example runs as a script (in a new directory) in
an environment with only the wheel and its declared dependencies, as a user who followed the
page has (no cloudpickle, no MLflow: the tests' own environment has both), and prints what the
page says it shows; the MLflow example runs where MLflow is installed, as the page says. The
install lines name the wheel `cargo xtask wheel` builds."""
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
    [r"^\S+/montrace (True|False) (tp_btf|tracepoint|polling)$", r"^binary +\S+/montrace \(",
     r"^tracking +(exact \(eBPF|polling)"],
    [r"^4 processes, [0-9.e-]+ CPU seconds$", r"/bin/true", r"^(tp_btf|tracepoint|polling) 0$"],
    [r"^True \d+ [0-9.]+$"],
    [r"^6 processes; [0-9.]+ CPU seconds$", r"load\s+begin", r"done\s+point"],
    [r"^52$", r"^333332833333500000 [0-9.e-]+ \d+$", r"^stopped: rss \d+(\.\d+)? > 104857600(\.0)?$",
     r"^limit rss exceeded: \d+ MiB seen, limit 100 MiB \(run: /\S+\)$"],
    [r"^ *0\.\d+ s +[0-9.]+ MiB", r"^done: 3 processes, exit 0$"],
    [r"^\d+ steps of rss_mb$"],
]


def docs_python() -> str:
    """The interpreter of the environment with the wheel alone (`cargo xtask test` makes it)."""
    python = os.environ.get("MONTRACE_DOCS_PYTHON")
    assert python, "cargo xtask test passes the docs' environment in MONTRACE_DOCS_PYTHON"
    return python


def test_every_example_is_checked() -> None:
    assert len(blocks("python")) == len(EXPECTED)


def test_the_docs_environment_has_the_wheel_and_its_dependencies_only() -> None:
    probe = "import importlib.util as u, sys; print([m for m in sys.argv[1:] if u.find_spec(m)])"
    found = subprocess.run([docs_python(), "-c", probe, "montrace", "pyarrow", "pandas",
                            "cloudpickle", "mlflow", "dill", "polars"],
                           capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "['montrace', 'pyarrow', 'pandas']", found.stdout


@pytest.mark.parametrize("index", range(len(EXPECTED)))
def test_example(index: int, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    code = blocks("python")[index]
    script.write_text(code)
    python = sys.executable if re.search(r"^import mlflow", code, flags=re.M) else docs_python()
    done = subprocess.run([python, str(script)], cwd=tmp_path, capture_output=True,
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
