"""The seeded order of training prompts, shared by every backend (design.md "One training step", 1).

The order depends on the run's `seed` only, so every selector of a comparison
sees the same stream, whichever backend runs it. Epoch `e` is the permutation
`default_rng([seed, e, DATA_TAG])` of the N train prompt ids. A step takes the
next `k` ids and never straddles two epochs (like a data loader with
drop_last: when fewer than `k` remain, the epoch ends and the rest are
skipped), so `begin_epoch(e)` can run before the first step of pass `e`.
Selectors with `candidate_mode="full"` (ASTRAL) see all N ids every step;
`advance` then counts the prompts they rolled out, so their epochs count
passes' worth of data too.
"""

from __future__ import annotations

import numpy as np

from lze_bench.errors import LzeBenchError

DATA_TAG = 0x5EED  # keeps the data-order stream apart from every other use of the run seed


class DataOrder:
    """Seeded passes over prompt ids 0..N-1; position (epoch, offset) saves and restores exactly."""

    def __init__(self, num_prompts: int, seed: int):
        self.num_prompts, self.seed = int(num_prompts), int(seed)
        self.epoch, self.offset = 0, 0
        self._cached_epoch, self._cached = -1, None

    def permutation(self, epoch: int) -> np.ndarray:
        """int64[N]: the order of pass `epoch` (the current pass's is cached)."""
        if epoch != self._cached_epoch:
            self._cached = np.random.default_rng([self.seed, int(epoch), DATA_TAG]).permutation(self.num_prompts)
            self._cached_epoch = int(epoch)
        return self._cached

    def prepare(self, count: int) -> int:
        """Move to the next epoch if fewer than `count` ids remain in this one; returns the epoch."""
        if count > self.num_prompts:
            raise LzeBenchError(f"a step needs {count} candidates but the task has {self.num_prompts} train prompts; "
                                "raise task.num_train or lower trainer.batch_size / data.candidates_per_step")
        if self.offset + count > self.num_prompts:
            self.epoch, self.offset = self.epoch + 1, 0
        return self.epoch

    def take(self, count: int) -> np.ndarray:
        """The next `count` ids (int64), starting a new epoch first if this one cannot supply them."""
        self.prepare(count)
        ids = self.permutation(self.epoch)[self.offset:self.offset + count].astype(np.int64)
        self.offset += count
        return ids

    def advance(self, count: int) -> None:
        """Full-mode selectors: count `count` prompts as consumed."""
        self.offset += int(count)
        while self.offset >= self.num_prompts:
            self.epoch, self.offset = self.epoch + 1, self.offset - self.num_prompts

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "offset": self.offset}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.offset = int(state["epoch"]), int(state["offset"])
