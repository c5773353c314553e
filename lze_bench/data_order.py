"""The seeded order of training prompts, shared by every backend (design.md "One training step", 1).

The order depends on the run's `seed` only, so every selector of a comparison
sees the same stream, whichever backend runs it. Epoch (pass) `e` is the
permutation `default_rng([seed, e, DATA_TAG])` of the N train prompt ids.

No prompt is skipped at a pass's end (selectors.md §0, revised 2026-11-24):
every id of a pass is offered before the next pass starts, except

* `take(k)`, a step's first round (and each of GRESO's chunks, the original's
  dataloader batches): it never straddles two passes, like a data loader with
  `drop_last`: when fewer than `k` ids remain, those `< k` ids are dropped and
  the next pass starts. `dropped` counts them (ledger `prompts_dropped`);
* nothing else: `take_across(k)`, a later round of a step, takes the rest of
  this pass and continues into the next one. An id of the new pass that is
  already among this round's ids from the old pass is passed over (it is
  offered in this very round; one round rolls a prompt out once) and one more
  id of the new pass is taken in its place, so the round still offers `k`
  distinct ids (ours; at most `k - 1` ids of the old pass can repeat).

Selectors with `candidate_mode="full"` (ASTRAL) see all N ids every step;
`advance` then counts the prompts they rolled out, so their epochs count
passes' worth of data too. The position (epoch, offset) saves and restores
exactly; `dropped` is a running diagnostic, not state.
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
        self.dropped = 0  # ids left unoffered at pass ends by `take` / `prepare` (drop_last), since construction
        self._cached: dict[int, np.ndarray] = {}

    def permutation(self, epoch: int) -> np.ndarray:
        """int64[N]: the order of pass `epoch` (the current and the next pass are cached)."""
        epoch = int(epoch)
        if epoch not in self._cached:
            perm = np.random.default_rng([self.seed, epoch, DATA_TAG]).permutation(self.num_prompts)
            self._cached = {e: p for e, p in self._cached.items() if e >= epoch - 1}
            self._cached[epoch] = perm.astype(np.int64)
        return self._cached[epoch]

    def _check(self, count: int) -> None:
        if count > self.num_prompts:
            raise LzeBenchError(f"a step needs {count} candidates but the task has {self.num_prompts} train prompts; "
                                "raise task.num_train or lower trainer.batch_size / data.candidates_per_step")

    def prepare(self, count: int) -> int:
        """Move to the next pass if fewer than `count` ids remain in this one (they are dropped); returns the epoch."""
        self._check(count)
        if self.offset + count > self.num_prompts:
            self.dropped += self.num_prompts - self.offset
            self.epoch, self.offset = self.epoch + 1, 0
        return self.epoch

    def take(self, count: int) -> np.ndarray:
        """The next `count` ids (int64) of one pass; a remainder of this pass shorter than `count` is dropped."""
        self.prepare(count)
        ids = self.permutation(self.epoch)[self.offset:self.offset + count].copy()
        self.offset += count
        return ids

    def take_across(self, count: int) -> np.ndarray:
        """The next `count` distinct ids: the rest of this pass, then the next pass (a later round; no drop)."""
        self._check(count)
        left = self.num_prompts - self.offset
        if count <= left:
            ids = self.permutation(self.epoch)[self.offset:self.offset + count].copy()
            self.offset += count
            return ids
        tail = self.permutation(self.epoch)[self.offset:]
        head = self.permutation(self.epoch + 1)
        fresh = np.ones(self.num_prompts, dtype=bool)
        fresh[tail] = False
        fresh = fresh[head]  # bool[N]: positions of the new pass not already in the tail
        need = count - tail.size
        end = int(np.searchsorted(np.cumsum(fresh), need)) + 1 if need > 0 else 0
        self.epoch, self.offset = self.epoch + 1, end
        return np.concatenate([tail, head[:end][fresh[:end]]])

    def advance(self, count: int) -> None:
        """Full-mode selectors: count `count` prompts as consumed."""
        self.offset += int(count)
        while self.offset >= self.num_prompts:
            self.epoch, self.offset = self.epoch + 1, self.offset - self.num_prompts

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "offset": self.offset}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.offset = int(state["epoch"]), int(state["offset"])
