"""Run-state files (optimizer, data position, rollout stores, held groups) that load without running code.

Run directories live on shared filesystems, and resuming reads what is in one.
A pickle names callables that unpickling calls, so `torch.load(weights_only=False)`
of a planted `trainer_state.pt` would run whatever its author chose. These
files are still written by `torch.save` (the groups hold tensors, NumPy arrays
and our dataclasses), but read only by `torch.load(weights_only=True)`: torch's
restricted unpickler, which builds tensors, containers and numbers itself and
calls nothing else but the classes allowed here:

* `STATE_CLASSES`, the dataclasses these files hold (built field by field,
  without their `__init__`) - looked up by this fixed list, never by a name
  read from a file;
* NumPy's array, scalar and dtype rebuilders, which make arrays from bytes.

A file that names anything else is refused in one line (`UnsafeStateFile`).
`save` checks the same list on the file it has just written, so state that a
resume could not read fails at the checkpoint that wrote it, not at the resume.
Files written by earlier lze-bench versions are the same pickles of the same
classes, so they load as before.
"""

from __future__ import annotations

import importlib
import os
import pickle
import re
from pathlib import Path

from lze_bench.errors import LzeBenchError, disk_full, is_disk_full

# "module:qualname" of every class a state file may hold
STATE_CLASSES = (
    "lze_bench.backends.local.grpo:Group",  # the local backend's rolled-out groups (rollout store, held groups)
    "lze_bench.backends.openrlhf.selection:Group",  # the OpenRLHF backend's groups
    "lze_bench.step_rounds:Held",  # a group a selector held for the next step, with its batch row
    "lze_bench.selectors.base:RolloutBatch",
    "openrlhf.trainer.ppo_utils.experience:Experience",  # an OpenRLHF group's samples (tensors, strings)
)


class UnsafeStateFile(LzeBenchError):
    """A state file that names a callable outside the allowed list: loading it could run code."""


def _numpy_globals() -> list:
    import numpy as np

    reconstruct = np.ndarray(0).__reduce__()[0]  # numpy._core.multiarray._reconstruct (numpy.core in NumPy 1)
    scalar = np.float32(0).__reduce__()[0]  # numpy._core.multiarray.scalar
    # dtype instances are restored by their own class's __setstate__; the restricted unpickler allows that
    # only for listed classes, and a pickle names just `numpy.dtype`
    dtype_classes = {type(np.dtype(code)) for code in np.typecodes["All"]}
    return [reconstruct, scalar, np.ndarray, np.dtype, *dtype_classes]


def _state_classes() -> list:
    """The STATE_CLASSES that can be imported here (OpenRLHF's Experience only where OpenRLHF is installed)."""
    classes = []
    for name in STATE_CLASSES:
        module, qualname = name.split(":")
        try:
            classes.append(getattr(importlib.import_module(module), qualname))
        except ImportError:
            continue  # a file naming it is then refused like any other unknown name
    return classes


def allowed_globals() -> list:
    return [*_numpy_globals(), *_state_classes()]


def _allowed_names() -> set[str]:
    return {f"{g.__module__}.{g.__qualname__}" for g in allowed_globals()} | {
        name.replace(":", ".") for name in STATE_CLASSES}


def save(obj, path: str | os.PathLike) -> None:
    """torch.save `obj` to `path` (through a temporary file and a rename); refuses state a resume could not load."""
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        torch.save(obj, tmp)
    except Exception as exc:
        tmp.unlink(missing_ok=True)  # a partial file only takes space; the previous `path` is untouched
        if is_disk_full(exc):
            raise disk_full(path, exc, "free space on its disk and run the same command again (a resume starts "
                            "from the last complete checkpoint)") from exc
        raise
    unknown = sorted(set(torch.serialization.get_unsafe_globals_in_checkpoint(tmp)) - _allowed_names())
    if unknown:
        tmp.unlink()
        raise LzeBenchError(f"{path}: the run state holds {', '.join(unknown)}, which lze_bench.state_file does "
                            "not load (it loads only STATE_CLASSES, so a resume never runs code from a file); "
                            "add the class there or store it as tensors, arrays and plain values")
    os.replace(tmp, path)


def load(path: str | os.PathLike, fix: str):
    """torch.load(weights_only=True) of a state file, allowing STATE_CLASSES and NumPy arrays only (on the CPU).

    A file naming anything else raises UnsafeStateFile (one line: the file, what it names, `fix`); a damaged file
    raises what torch raises (RuntimeError, EOFError, ...), for the caller's own message."""
    import torch

    try:
        with torch.serialization.safe_globals(allowed_globals()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        named = re.search(r"GLOBAL (\S+)", str(exc))
        if named is None and "weights_only" not in str(exc).replace(" ", "_"):
            raise  # a truncated or garbled pickle: damaged, not refused
        what = f"names {named.group(1)}" if named else "holds objects other than tensors, arrays and run state"
        raise UnsafeStateFile(f"{path} {what}, which loading would run; it was not loaded (run directories may "
                              f"hold files planted by others, and state files load only tensors, arrays and "
                              f"lze-bench's run-state classes); {fix}") from exc
