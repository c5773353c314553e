"""Rolled-out groups kept for replay (ASTRAL, selectors.md §3), shared by every backend.

A group is any object with `prompt_id` and `gen_step` (the local backend's
grpo.Group; OpenRLHF's selection.Group with its Experiences and their
generation-time log-probs).
"""

from __future__ import annotations

from collections import OrderedDict

from lze_bench.errors import LzeBenchError


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
