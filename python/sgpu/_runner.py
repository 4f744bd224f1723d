"""One rank of ``fn.distributed(...)``: ``python -m sgpu._runner PAYLOAD``.

Loads the function and its arguments from the payload, calls it, and writes
to ``$SGPU_RESULT_FILE`` a pickle of ``("ok", value)`` or, when it raised,
``("raised", exception pickle or None, type name, message, traceback)`` (and
the exception to ``$TORCHELASTIC_ERROR_FILE`` in torch's form, so sgpu's
report shows the traceback). Results travel in the result file, the one
file every backend brings back to the launcher's run directory.
"""
from __future__ import annotations

import importlib
import json
import os
import pickle
import sys
import time
import traceback
import types
from typing import Any


def _dumps(obj: Any) -> bytes:
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # classes defined in __main__, lambdas: by value
        import cloudpickle  # type: ignore[import-untyped]

        return bytes(cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def _write(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _with_filename(code: types.CodeType, filename: str) -> types.CodeType:
    consts = tuple(_with_filename(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _load_function(payload: dict[str, Any]) -> Any:
    ref = payload.get("ref")
    if ref:  # an importable module's function: import it, as its own module
        module, qualname = ref
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        return getattr(obj, "__wrapped__", obj)
    fn = pickle.loads(payload["fn"])
    # cloudpickle names the file of code it carries "<dynamic-code>": give the
    # function (and what it defines) its file back, so tracebacks show the lines.
    filename = payload.get("filename")
    if filename and isinstance(fn, types.FunctionType) and fn.__code__.co_filename == "<dynamic-code>":
        fn.__code__ = _with_filename(fn.__code__, filename)
    return fn


def _error_file(exc: BaseException, text: str) -> None:
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path or os.path.exists(path):  # torch's @record may have written it already
        return
    doc = {"message": {"message": f"{type(exc).__name__}: {exc}",
                       "extraInfo": {"py_callstack": text, "timestamp": str(int(time.time()))}}}
    try:
        with open(path, "w") as f:
            json.dump(doc, f)
    except OSError:
        pass


def main() -> int:
    # The caller's sys.path came as PYTHONPATH: its modules import here too.
    with open(sys.argv[1], "rb") as f:
        payload = pickle.load(f)
    result_file = os.environ.get("SGPU_RESULT_FILE")
    try:
        fn = _load_function(payload)
        args, kwargs = pickle.loads(payload["args"])
        value = fn(*args, **kwargs)
        data = _dumps(("ok", value))
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:  # noqa: B902 - every failure of the user's code goes back to the caller
        # The traceback from the user's function down, without this runner's frame.
        tb = exc.__traceback__.tb_next if exc.__traceback__ else None
        text = "".join(traceback.format_exception(type(exc), exc, tb))
        try:
            exc_bytes = _dumps(exc)
        except Exception:
            exc_bytes = None
        name = f"{type(exc).__module__}.{type(exc).__qualname__}"
        if result_file:
            _write(result_file, _dumps(("raised", exc_bytes, name, str(exc), text)))
        _error_file(exc, text)  # sgpu's report prints it from there
        return 1
    if result_file:
        _write(result_file, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
