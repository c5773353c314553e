"""Which responses of a step's update batch train on OpenRLHF (no OpenRLHF import; openrlhf.md §9).

DeepSpeed steps once per training step only if every data-parallel rank runs
the same number of whole micro-batches: OpenRLHF's actor DataLoader drops a
partial micro-batch (`drop_last=True`) and `RayActorGroup.async_run_method_batch`
splits by ceiling, so a rank can get nothing and hang. The update batch of a
shrinking (lze), filling (dapo, greso, hive) or replaying (astral) selector has
any size, so we trim it: of the `T` responses the update would train,
`floor(T / unit) * unit` train, with `unit = train.micro_batch_size x DP ranks`,
chosen uniformly at random (`rng.permutation(T)[:K]`, rng = step_rng(seed, t,
TAG_SELECT_UPDATE, 98)); advantages are computed on whole groups before the
cut, so a trimmed response never changes another's advantage. This is the
authors' LZE trainer's rule (a random subset of responses in whole
mini-batches, selectors.md §5) applied at the unit DeepSpeed needs; with
`selector.align_minibatch=true` LZE's own mini-batch trim runs first
(rng round 99, as on the local backend) and this one cuts what remains. `K = 0`
(fewer responses than one unit) means no optimizer step at this training
step; the ledger books 0 trained. Pick `train.micro_batch_size` so that a unit
is small next to the kept batch (`lze-bench train backend=openrlhf --dry-run` prints it).
"""

from __future__ import annotations

import numpy as np

from lze_bench.selectors.base import TAG_SELECT_UPDATE, step_rng

TRIM_ROUND = 98  # rng [seed, step, 1, 98]; LZE's alignment uses round 99
ALIGN_ROUND = 99


def trim_unit(micro_batch_size: int, dp_ranks: int) -> int:
    return int(micro_batch_size) * int(dp_ranks)


def trained_masks(selector, *, kept_groups: int, n: int, rolled_out: int, unit: int, seed: int, step: int,
                  replayed_groups: int = 0, choices: list | None = None):
    """bool[k] per train group (kept groups first, then replayed ones): the responses that train; without
    `choices`, every response of `kept_groups + replayed_groups` groups of n may, and the rows come as one
    bool[G, n] array.

    `choices` are the rollouts the selector sends to the update per train group (record.train_choices: all
    of a group but for a selector that keeps a subset, PODS); only those can train, and the trim draws
    among them. Groups of n rollouts flattened in order are the [G, n] matrix every fixed-group selector
    always had, so their trims keep their draws bit for bit."""
    if choices is None:
        whole = np.ones((int(kept_groups) + int(replayed_groups), int(n)), dtype=bool)
        rows = trained_masks(selector, kept_groups=kept_groups, n=n, rolled_out=rolled_out, unit=unit, seed=seed,
                             step=step, choices=list(whole))
        return np.stack(rows) if rows else whole
    rows = [np.asarray(c, dtype=bool).copy() for c in choices]
    align = getattr(selector, "align_mask", None)
    if align is not None and kept_groups:
        cut = align(int(kept_groups), int(n), int(rolled_out) * int(n),
                    step_rng(seed, step, TAG_SELECT_UPDATE, ALIGN_ROUND))
        if cut is not None:
            for g in range(int(kept_groups)):
                rows[g] &= np.asarray(cut[g], dtype=bool)[:rows[g].size]
    if not rows:
        return []
    flat = _whole_units(np.concatenate(rows), unit, step_rng(seed, step, TAG_SELECT_UPDATE, TRIM_ROUND))
    bounds = np.cumsum([0] + [r.size for r in rows])
    return [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def _whole_units(mask: np.ndarray, unit: int, rng: np.random.Generator) -> np.ndarray:
    flat = np.flatnonzero(mask.reshape(-1))
    count = (flat.size // int(unit)) * int(unit)
    if count == flat.size:
        return mask
    out = np.zeros(mask.size, dtype=bool)
    out[np.sort(flat[rng.permutation(flat.size)[:count]])] = True
    return out.reshape(mask.shape)


def balanced_chunks(count: int, ranks: int, micro_batch_size: int) -> list[tuple[int, int]]:
    """[start, end) of the experience maker's forward micro-batches: a multiple of `ranks` chunks,
    sizes within one of each other and at most `micro_batch_size`, so every rank runs the same
    number of forwards (ZeRO-3 gathers parameters collectively) and none gets nothing
    (OpenRLHF's `async_run_method_batch` refuses fewer items than ranks)."""
    count, ranks = int(count), int(ranks)
    if count < ranks:
        raise ValueError(f"{count} samples cannot give each of {ranks} ranks a forward")
    chunks = ranks * -(-count // (ranks * int(micro_batch_size)))
    base, extra = divmod(count, chunks)
    bounds, start = [], 0
    for c in range(chunks):
        end = start + base + (1 if c < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds
