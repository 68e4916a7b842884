"""``montrace.doctor()``: which binary the package runs, and which tracking mode it gets here."""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from ._binary import MontraceError, choose_binary, file_caps

# One check of `montrace doctor` (monitor/src/commands/doctor.rs): `what ok|no detail`.
_CHECK = re.compile(r"^(?P<what>.+?)\s+(?P<ok>ok|no)\s+(?P<detail>.*)$")
_LOADED = re.compile(r"loaded and attached \((?P<mode>[a-z_]+)\)")
# The verdict where runs go through the resident agent (`montrace agent`).
_THROUGH_AGENT = re.compile(r"exact tracking through the montrace agent at .* \((?P<mode>[a-z_]+)\):")


@dataclass
class Diagnosis:
    """What ``montrace doctor`` says of the binary this package runs.

    ``binary``: its path; ``chosen_because``: why that one (``MONTRACE_BIN``, granted
    capabilities, the wheel's own); ``exact``: True when a run gets exact tracking (eBPF) here,
    False when it polls /proc; ``mode``: ``tp_btf``, ``tracepoint`` or ``polling``; ``checks``:
    ``(what, ok, detail)`` per line of the doctor; ``verdict``: its last line."""

    binary: str
    chosen_because: str
    exact: bool
    mode: str
    file_capabilities: Optional[int]
    checks: List[Tuple[str, bool, str]] = field(default_factory=list)
    verdict: str = ""

    def __str__(self) -> str:
        lines = [
            f"binary    {self.binary} ({self.chosen_because})",
            f"tracking  {'exact (eBPF, ' + self.mode + ')' if self.exact else 'polling /proc'}",
        ]
        lines += [f"  {what:<14} {'ok' if ok else 'no':<3} {detail}" for what, ok, detail in self.checks]
        return "\n".join(lines + ([self.verdict] if self.verdict else []))

    def __repr__(self) -> str:
        return str(self)


def parse(text: str) -> "Tuple[List[Tuple[str, bool, str]], str, Optional[str]]":
    """The checks, the verdict and the eBPF mode (None: no eBPF) from ``montrace doctor``'s
    output (pure)."""
    checks: List[Tuple[str, bool, str]] = []
    verdict = ""
    mode: Optional[str] = None
    for line in text.splitlines():
        if line.startswith("montrace run here:"):
            verdict = line.strip()
            continue
        found = _CHECK.match(line)
        if not found:
            continue
        ok = found["ok"] == "ok"
        checks.append((found["what"], ok, found["detail"]))
        if found["what"] == "eBPF programs" and ok:
            loaded = _LOADED.search(found["detail"])
            mode = loaded["mode"] if loaded else "ebpf"
    # Runs that go through the resident agent get its programs' mode, whatever this binary loads.
    through = _THROUGH_AGENT.search(verdict)
    if through:
        mode = through["mode"]
    return checks, verdict, mode


def doctor(timeout_s: float = 60.0) -> Diagnosis:
    """Runs ``montrace doctor`` with the binary this package would run, and says which binary
    that is and whether its runs track exactly (``print(montrace.doctor())``)."""
    path, why = choose_binary()
    try:
        done = subprocess.run([path, "doctor"], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise MontraceError(f"cannot run {path} doctor: {err}") from err
    checks, verdict, mode = parse(done.stdout)
    if done.returncode != 0 or not checks:
        raise MontraceError(f"{path} doctor failed (status {done.returncode})", done.stderr)
    return Diagnosis(
        binary=path,
        chosen_because=why,
        exact=mode is not None,
        mode=mode or "polling",
        file_capabilities=file_caps(path),
        checks=checks,
        verdict=verdict,
    )
