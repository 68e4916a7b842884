"""The child process of ``montrace.monitored``: loads the call, runs it, writes the outcome.

Usage: ``python -m montrace._child REQUEST REPLY``; the reply is a pickled ``(True, result)``
or ``(False, (exception, traceback text))`` (pickling an exception drops its traceback)."""
from __future__ import annotations

import importlib.util
import pickle
import sys
import traceback


class RemoteTraceback(Exception):
    """The traceback of an exception raised in the monitored child."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


def _load_main(path: str) -> None:
    """Makes the parent's ``__main__`` module importable here, as multiprocessing does, so that
    functions defined in a script unpickle (its ``if __name__ == "__main__":`` block does not run)."""
    spec = importlib.util.spec_from_file_location("__mp_main__", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["__mp_main__"] = module
    spec.loader.exec_module(module)
    sys.modules["__main__"] = module


def main(request: str, reply: str) -> int:
    with open(request, "rb") as handle:
        context = pickle.load(handle)
        sys.path[:] = context["sys_path"]
        if context.get("main"):
            _load_main(context["main"])
        fn, args, kwargs = pickle.load(handle)
    try:
        outcome = (True, fn(*args, **kwargs))
    except BaseException as err:  # sent back, raised in the parent
        text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
        outcome = (False, (err, text))
    with open(reply + ".tmp", "wb") as handle:
        try:
            pickle.dump(outcome, handle)
        except Exception as err:  # an unpicklable result or exception
            handle.seek(0)
            handle.truncate()
            failed = TypeError(f"the call's outcome cannot be pickled: {err!r}")
            pickle.dump((False, (failed, "")), handle)
    import os

    os.replace(reply + ".tmp", reply)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
