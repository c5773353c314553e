"""Rolled-out groups kept for replay (ASTRAL, selectors.md §3), shared by every backend.

A group is any object with `prompt_id` and `gen_step` (the local backend's
grpo.Group; OpenRLHF's selection.Group with its Experiences and their
generation-time log-probs).
"""

from __future__ import annotations

from collections import OrderedDict

from lze_bench.errors import LzeBenchError


def store_capacity(requested: int, buffer_size: int | None, batch_size: int) -> int:
    """Groups a run's rollout store keeps: `backend.rollout_store_groups` when >= 0; when -1 (auto), what the
    selector can ask for: ASTRAL's buffer holds at most `buffer_size - floor(sigma*B)` older groups plus one
    step's fresh groups (<= B), so the newest `buffer_size + B` prompts cover every key it can ask for; a
    selector without a buffer replays nothing (0)."""
    if int(requested) >= 0:
        return int(requested)
    buffer_size = int(buffer_size or 0)
    return buffer_size + int(batch_size) if buffer_size else 0


class RolloutStore:
    """Generated groups kept for replay (ASTRAL), newest entry per prompt, at most `capacity` prompts.

    ASTRAL's buffer keeps each prompt's newest group, so a store of the newest
    `store_capacity(...)` prompts holds every key it can ask for.
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
