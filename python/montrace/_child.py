"""The forked child of ``montrace.monitored``: waits until montrace follows it, makes the call and
writes the outcome, a pickled ``(True, result)`` or ``(False, (exception, traceback text))``
(pickling an exception drops its traceback, so its text comes along)."""
from __future__ import annotations

import os
import pickle
import sys
import traceback
from typing import Any, Callable, NoReturn, Tuple

#: The child's exit status when the call was not made (montrace did not start) or its outcome
#: could not be written.
EXIT_NOT_RUN = 3


class RemoteTraceback(Exception):
    """The traceback of an exception raised in the monitored child."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))


def outcome_bytes(fn: Callable[..., Any], outcome: Tuple[bool, Any]) -> bytes:
    """The outcome pickled, checked to load again; what cannot cross becomes an error that says
    so (pure)."""
    try:
        data = pickle.dumps(outcome)
        pickle.loads(data)
        return data
    except Exception as err:  # noqa: BLE001 - whatever pickle raises, the parent gets words
        why = f"{type(err).__name__}: {err}"
    ok, value = outcome
    if ok:
        failed: BaseException = TypeError(
            f"{_name(fn)} returned a {type(value).__module__}.{type(value).__qualname__}, which "
            f"cannot be pickled back from the child process montrace.monitored ran it in ({why}); "
            "return something picklable (plain data, arrays, DataFrames)"
        )
        text = ""
    else:
        error, text = value
        failed = RuntimeError(
            f"{_name(fn)} raised {type(error).__module__}.{type(error).__qualname__}: {error} "
            f"(the exception itself cannot be pickled back from the child process: {why})"
        )
    return pickle.dumps((False, (failed, text)))


def run_forked(fn: Callable[..., Any], args: Any, kwargs: Any, go: int, reply: str) -> NoReturn:
    """In the child after fork: never returns."""
    code = EXIT_NOT_RUN
    try:
        started = os.read(go, 1) == b"g"
        os.close(go)
        if started:
            try:
                outcome: Tuple[bool, Any] = (True, fn(*args, **kwargs))
            except BaseException as err:  # sent back, raised in the parent
                text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
                outcome = (False, (err, text))
            data = outcome_bytes(fn, outcome)
            with open(reply + ".tmp", "wb") as handle:
                handle.write(data)
            os.replace(reply + ".tmp", reply)
            code = 0
    except BaseException:  # noqa: BLE001 - the child must reach os._exit
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)
