"""Resumable trainer state: the rollout store and checkpoints.

The data order (lze_bench.data_order.DataOrder, shared with the OpenRLHF
backend) is saved in `trainer_state.pt` as its (epoch, offset) position.

Checkpoint `checkpoints/step_K/` (K = updates done; ledger rows 0..K-1) holds
the HF policy + tokenizer, `trainer_state.pt` (optimizer, stream position,
flags) and `rollout_store.pt`; the selector state goes to
`selector_state/step_K.npz`. The `COMPLETE` marker is written last; a
directory without it is ignored and overwritten.
"""

from __future__ import annotations

import shutil
from collections import OrderedDict
from pathlib import Path


from lze_bench.errors import LzeBenchError
from lze_bench.rundir import checkpoint_dir, mark_checkpoint_complete, selector_state_path
from lze_bench.selectors import load_state, save_state

TRAINER_STATE = "trainer_state.pt"
ROLLOUT_STORE = "rollout_store.pt"


class RolloutStore:
    """Generated groups kept for replay (ASTRAL), newest entry per prompt, at most `capacity` prompts.

    ASTRAL's buffer keeps each prompt's newest group: at most
    `buffer_size - floor(sigma*B)` older groups plus one step's fresh groups
    (<= B), so a store of the newest `buffer_size + B` prompts holds every key
    it can ask for (the trainer's default capacity).
    """

    def __init__(self, capacity: int):
        self.capacity = int(capacity)
        self.groups: OrderedDict[int, object] = OrderedDict()

    def put(self, group) -> None:
        if self.capacity <= 0:
            return
        self.groups.pop(group.prompt_id, None)
        self.groups[group.prompt_id] = group
        while len(self.groups) > self.capacity:
            self.groups.popitem(last=False)

    def get(self, prompt_id: int, gen_step: int):
        group = self.groups.get(int(prompt_id))
        if group is None or group.gen_step != int(gen_step):
            raise LzeBenchError(
                f"replay asked for group (prompt {prompt_id}, step {gen_step}), which the rollout store no longer "
                f"holds (capacity {self.capacity}); raise backend.rollout_store_groups"
            )
        return group


def save_checkpoint(run_dir: Path, updates: int, model, tokenizer, optimizer, selector, store: RolloutStore,
                    trainer_state: dict) -> Path:
    import torch

    from lze_bench.backends.local.model import save_policy

    target = checkpoint_dir(run_dir, updates)
    if target.exists():  # an incomplete leftover of a killed run
        shutil.rmtree(target)
    save_policy(model, tokenizer, target)
    torch.save({"optimizer": optimizer.state_dict(), **trainer_state}, target / TRAINER_STATE)
    torch.save({"capacity": store.capacity, "groups": list(store.groups.values())}, target / ROLLOUT_STORE)
    state_path = selector_state_path(run_dir, updates)
    state_path.parent.mkdir(parents=True, exist_ok=True)
    save_state(state_path, selector.state_dict())
    mark_checkpoint_complete(target)
    return target


def load_checkpoint(run_dir: Path, updates: int, optimizer, selector, store: RolloutStore) -> dict:
    """Restore optimizer, selector and store in place; returns the trainer state dict."""
    import torch

    source = checkpoint_dir(run_dir, updates)
    state = torch.load(source / TRAINER_STATE, map_location="cpu", weights_only=False)
    optimizer.load_state_dict(state.pop("optimizer"))
    saved = torch.load(source / ROLLOUT_STORE, map_location="cpu", weights_only=False)
    for group in saved["groups"]:
        store.put(group)
    path = selector_state_path(run_dir, updates)
    if not path.exists():
        raise LzeBenchError(f"resume from {source}: missing selector state {path}; use a new run_dir")
    selector.load_state_dict(load_state(path))
    return state
