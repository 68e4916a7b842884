"""Limits and intervals with units a user cannot misread (pure).

A limit is a string with its unit (``"500MiB"``, ``"2GB"``, ``"90s"``, ``"5m"``) or a number in
the limit's base unit: bytes for ``rss`` and ``gpu-mem``, seconds for ``cpu`` and ``wall``, a
count for ``procs``. A bare number below 1 MiB for a memory limit is refused: it is almost
certainly megabytes meant as bytes. The units are montrace's own (monitor/src/units.rs): ``K``,
``KB``, ``KiB`` are 1024 bytes, ``M``/``MB``/``MiB`` 1024², ``G``/``GB``/``GiB`` 1024³, as on the
command line."""
from __future__ import annotations

import math
import re
from typing import Dict, List, Mapping, Union

Value = Union[str, int, float]

MIB = 1 << 20
BYTE_UNITS: Dict[str, int] = {
    "": 1, "b": 1,
    "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
    "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
    "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
    "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}
SECOND_UNITS: Dict[str, float] = {
    "ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3,
    "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0,
}
MEMORY = ("rss", "gpu-mem")
TIME = ("cpu", "wall")
COUNT = ("procs",)
KEYS = MEMORY + TIME + COUNT
_NUMBER = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-zµ]*)\s*$")


def _label(key: str, value: Value) -> str:
    return f"interval={value!r}" if key == "interval" else f"limits={{{key!r}: {value!r}}}"


def _number(value: Value, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{_label(key, value)}: give a string with a unit or a number")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{_label(key, value)}: give a finite number above zero")
    return float(value)


def parse_bytes(value: Value, key: str = "rss") -> int:
    """``"500MiB"`` -> 524288000; a number is bytes and must be at least 1 MiB."""
    if isinstance(value, str):
        found = _NUMBER.match(value)
        unit = found[2].lower() if found else None
        if found is None or unit not in BYTE_UNITS:
            raise ValueError(
                f"limits={{{key!r}: {value!r}}}: not a size; write e.g. '500MiB' or '2GiB' "
                "(units B, KiB, MiB, GiB, TiB; KB, MB, GB are the same 1024-based units)"
            )
        if unit == "":
            raise ValueError(
                f"limits={{{key!r}: {value!r}}}: the size has no unit; write e.g. '{found[1]}MiB' "
                "(units B, KiB, MiB, GiB, TiB), or give a number of bytes"
            )
        size = float(found[1]) * BYTE_UNITS[unit]
        if size < 1:
            raise ValueError(f"limits={{{key!r}: {value!r}}}: a limit must be above zero")
        return int(round(size))
    size = _number(value, key)
    if size < MIB:
        raise ValueError(
            f"limits={{{key!r}: {value!r}}}: a bare number is bytes, and {value!r} bytes is less "
            f"than 1 MiB; write the unit, e.g. '{value!r}MiB' (units B, KiB, MiB, GiB, TiB)"
        )
    return int(size)


def parse_seconds(value: Value, key: str = "wall") -> float:
    """``"90s"`` -> 90.0, ``"5m"`` -> 300.0, ``"100ms"`` -> 0.1; a number is seconds."""
    if isinstance(value, str):
        found = _NUMBER.match(value)
        if found is None or found[2] not in SECOND_UNITS:
            raise ValueError(
                f"{_label(key, value)}: not a duration; write e.g. '90s', '500ms', '5m' or '1h' "
                "(units ns, us, ms, s, m, h), or give a number of seconds"
            )
        seconds = float(found[1]) * SECOND_UNITS[found[2]]
        if seconds <= 0:
            raise ValueError(f"{_label(key, value)}: a duration must be above zero")
        return seconds
    return _number(value, key)


def parse_count(value: Value, key: str = "procs") -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"limits={{{key!r}: {value!r}}}: give a whole number of processes above zero")
    return value


def limit_args(limits: Mapping[str, Value]) -> List[str]:
    """The ``--limit`` arguments for ``limits``, each in montrace's base unit, checked before
    anything runs."""
    args: List[str] = []
    for key, value in limits.items():
        if key in MEMORY:
            text = str(parse_bytes(value, key))  # bytes: montrace reads a bare number as bytes
        elif key in TIME:
            text = duration_text(parse_seconds(value, key))
        elif key in COUNT:
            text = str(parse_count(value, key))
        else:
            raise ValueError(f"unknown limit {key!r}: the limits are {', '.join(KEYS)}")
        args += ["--limit", f"{key}={text}"]
    return args


def duration_text(seconds: float) -> str:
    """``90s``, ``50ms``, ``1500us``: exact, in the largest unit that keeps it whole."""
    ns = round(seconds * 1e9)
    for unit, size in (("s", 10**9), ("ms", 10**6), ("us", 10**3)):
        if ns % size == 0:
            return f"{ns // size}{unit}"
    return f"{ns}ns"


def interval_arg(value: Value) -> str:
    """``--interval`` for a number of seconds or a string with a unit (at least 10 ms)."""
    seconds = parse_seconds(value, "interval")
    if seconds < 0.01:
        raise ValueError(f"interval={value!r} is too short: montrace samples at most every 10 ms")
    return duration_text(seconds)


def format_bytes(value: float) -> str:
    """``208 MiB``, ``1.50 GiB``, ``512 B``."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10)):
        if abs(value) >= size:
            scaled = value / size
            return f"{scaled:.2f} {unit}" if scaled < 10 else f"{scaled:.0f} {unit}"
    return f"{value:.0f} B"


def format_limit_value(key: str, value: float) -> str:
    """A limit's threshold or the value seen, in words: bytes as MiB/GiB, seconds, counts."""
    if key in MEMORY:
        return format_bytes(value)
    if key in TIME:
        return f"{value:.3f} s" if value < 10 else f"{value:.1f} s"
    return f"{value:.0f}"
