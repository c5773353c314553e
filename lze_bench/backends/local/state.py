"""Resumable trainer state: the rollout store and checkpoints.

The data order (lze_bench.data_order.DataOrder, shared with the OpenRLHF
backend) is saved in `trainer_state.pt` as its (epoch, offset) position.

Checkpoint `checkpoints/step_K/` (K = updates done; ledger rows 0..K-1) holds
the HF policy + tokenizer, `trainer_state.pt` (optimizer, stream position,
flags) and `rollout_store.pt`; the selector state goes to
`selector_state/step_K.npz`. The `COMPLETE` marker is written last; a
directory without it is ignored and overwritten.

Both `.pt` files are read with lze_bench.state_file: torch.load(weights_only=True)
allowing tensors, NumPy arrays and the run-state dataclasses only, so resuming
never runs code that someone put in a run directory.
"""

from __future__ import annotations

import shutil
from pathlib import Path


from lze_bench import state_file
from lze_bench.errors import LzeBenchError, damaged_file, disk_full, is_disk_full
from lze_bench.rollout_store import RolloutStore
from lze_bench.rundir import checkpoint_dir, mark_checkpoint_complete, selector_state_path
from lze_bench.selectors import load_state, save_state

TRAINER_STATE = "trainer_state.pt"
ROLLOUT_STORE = "rollout_store.pt"


def save_checkpoint(run_dir: Path, updates: int, model, tokenizer, optimizer, selector, store: RolloutStore,
                    trainer_state: dict) -> Path:
    from lze_bench.backends.local.model import save_policy

    target = checkpoint_dir(run_dir, updates)
    if target.exists():  # an incomplete leftover of a killed run
        shutil.rmtree(target)
    writing = target
    try:
        save_policy(model, tokenizer, target)
        writing = target / TRAINER_STATE
        state_file.save({"optimizer": optimizer.state_dict(), **trainer_state}, writing)
        writing = target / ROLLOUT_STORE
        state_file.save({"capacity": store.capacity, "groups": list(store.groups.values())}, writing)
        writing = state_path = selector_state_path(run_dir, updates)
        state_path.parent.mkdir(parents=True, exist_ok=True)
        save_state(state_path, selector.state_dict())
        mark_checkpoint_complete(target)
    except Exception as exc:
        if not is_disk_full(exc):
            raise
        # the checkpoint has no COMPLETE marker, so a resume ignores it; removing it gives back its space
        shutil.rmtree(target, ignore_errors=True)
        if isinstance(exc, LzeBenchError):  # state_file.save named its file already
            raise
        raise disk_full(writing, exc, f"checkpoint {target.name} was removed unfinished; free space under "
                        f"{run_dir} and run the same command again (it resumes from the last complete "
                        "checkpoint)") from exc
    return target


def load_checkpoint(run_dir: Path, updates: int, optimizer, selector, store: RolloutStore) -> dict:
    """Restore optimizer, selector and store in place; returns the trainer state dict."""
    source = checkpoint_dir(run_dir, updates)
    state = _torch_load(source / TRAINER_STATE, source)
    optimizer.load_state_dict(state.pop("optimizer"))
    saved = _torch_load(source / ROLLOUT_STORE, source)
    for group in saved["groups"]:
        store.put(group)
    path = selector_state_path(run_dir, updates)
    if not path.exists():
        raise LzeBenchError(f"resume from {source}: missing selector state {path}; use a new run_dir")
    selector.load_state_dict(load_state(path))
    return state


def _torch_load(path: Path, checkpoint: Path):
    """A checkpoint's state file (state_file.load); a damaged or refused one is one line saying how to resume
    without it."""
    import pickle

    fix = f"delete {checkpoint} to resume from the checkpoint before it, or start the run over in another run_dir=PATH"
    try:
        return state_file.load(path, fix)
    except (RuntimeError, EOFError, OSError, ValueError, pickle.UnpicklingError) as exc:
        raise damaged_file(path, exc, fix) from exc
