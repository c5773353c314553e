"""`lze-bench bench selectors`: time one step of each selector at 10^4, 10^5 and 10^6 prompts.

One step = `select_rollout` + `observe` + `select_update` on a pool of N
prompts whose candidates are the whole pool (a seeded permutation) and
whose batch is every prompt the selector rolls out (N groups for uniform,
dapo, lze, greso minus its skips; N/2 for hive, whose budget is N /
pool_factor; N/2 for astral; N/16 for mopps, adarft and sec). GRESO and HIVE run one round per step (their
dynamic-sampling counters are reset after it, untimed).
Rewards are 0/1 with each prompt's own random pass rate, `samples` per
prompt. Before timing, `warmup` steps give every selector realistic
per-prompt history, and the epoch is set to 1 so LZE takes its top-k path
(Gumbel noise + partition), the expensive one. Building the RolloutBatch and
the backend's feature computation (HIVE's prompt entropy, ASTRAL's
embeddings) are not timed: the features are precomputed arrays.

ASTRAL re-predicts every prompt at each round start, O(N * ref_size * d):
it is reported as two rows, a round-start step and a mid-round step; its
buffer_size is B (the authors' script: 512 at B = 512), and its predictor
diagnostics (`step_metrics`, read by the backend for the ledger) are not
part of a step here.
SPEED and Reinforce-Ada decide a step in calls (screening, then continuation rounds): their row times a
step's first call, and a `:next` row the same step's next call on the groups the first one held, each
extended by the rollouts it asked for (drawn untimed; no fresh prompts, whose screening the first row
times).
Goal: < 50 ms per step at 10^6 prompts on one core for the
selectors that score recorded statistics (all but astral's round start).

`history=full` then observes every prompt once (untimed) before the timed steps: the state after a
pass over the data, the most expensive for mopps (a Beta draw, not a uniform, for every prompt seen).

Options: sizes=10000,100000,1000000 repeats=3 samples=8 warmup=2 history=warm|full
selectors=NAME,NAME embed_dim=64 seed=0.
"""

from __future__ import annotations

import time

import numpy as np

from lze_bench.bench import BenchResult
from lze_bench.errors import LzeBenchError
from lze_bench.registry import BENCH_COMMANDS, SELECTORS

GOAL_MS = 50.0
SORT_GOAL = 5.0  # a step at 10^6 prompts within 5 np.sort(10^6) of the same machine
HISTORIES = ("warm", "full")  # what the selector has seen before timing: the warm-up steps only, or every prompt


def _ints(text: str, key: str) -> list[int]:
    try:
        return [int(float(item)) for item in text.split(",") if item]
    except ValueError as exc:
        raise LzeBenchError(f"bench selectors: {key}={text!r} must be integers separated by commas") from exc


class Pool:
    """A synthetic pool: per-prompt pass rates, prompt entropy and embeddings, seeded."""

    def __init__(self, size: int, samples: int, embed_dim: int, seed: int):
        rng = np.random.default_rng([seed, size])
        self.size, self.samples, self.seed = size, samples, seed
        self.pass_rate = rng.random(size).astype(np.float32)
        self.entropy = rng.random(size).astype(np.float32)
        self.embedding = rng.standard_normal((size, embed_dim), dtype=np.float32)
        self.order = rng.permutation(size).astype(np.int64)
        self.spent = (0.0, 0.0)  # (cpu, wall) seconds inside `features` since the last reset

    def features(self, name, ids):
        """The backend's FeatureFn: a gather from precomputed arrays; its own time is kept apart (`spent`)."""
        start = _clock()
        out = {"prompt_entropy": self.entropy, "prompt_embedding": self.embedding}[name][ids]
        end = _clock()
        self.spent = (self.spent[0] + end[0] - start[0], self.spent[1] + end[1] - start[1])
        return out

    def rewards(self, ids: np.ndarray, step: int, columns: int | None = None, draw: int = 99) -> np.ndarray:
        """0/1 float32[len(ids), columns] (default `samples`): each prompt right at its own pass rate
        (`draw` seeds the stream with the seed and step: 99 a step's first call, 98 its next)."""
        shape = (ids.size, self.samples if columns is None else int(columns))
        draws = np.random.default_rng([self.seed, step, draw]).random(shape, dtype=np.float32)
        return (draws < self.pass_rate[ids, None]).astype(np.float32)


# selectors whose batch is a small share of the pool by design: mopps keeps B of ts_ratio * B = 16 B candidates;
# adarft and sec choose B of all N, and sec needs every arm (here one of 5 levels) to hold at least B prompts
SIXTEENTH = ("mopps", "adarft", "sec")


def budget_for(name: str, size: int) -> int:
    if name in SIXTEENTH:
        return size // 16
    return size // 2 if name in ("hive", "astral") else size


def metadata_for(size: int, seed: int) -> dict:
    """Per-prompt columns for the selectors that read them: a level 1-5 and a difficulty in [0, 100]."""
    rng = np.random.default_rng([seed, size, 1])
    return {"level": rng.integers(1, 6, size), "difficulty": np.round(rng.random(size) * 100)}


def make_selector(name: str, size: int, seed: int = 0):
    from lze_bench.selectors import build_selector

    cls = SELECTORS[name]
    overrides = {"train_batch_size": size, "gen_batch_size": size} if name == "dapo" else {}
    if name == "astral":  # the authors' buffer_size = B (512 at B = 512); it must hold floor(sigma * B) groups
        overrides = {"buffer_size": budget_for(name, size)}
    return build_selector(cls.Config(**overrides), num_prompts=size, batch_size=budget_for(name, size),
                          metadata=metadata_for(size, seed))


def sort_reference_ms(size: int = 10**6, repeats: int = 5) -> float:
    """CPU ms of `np.sort` of `size` random float64 (best of repeats): the yardstick a step is compared with."""
    values = np.random.default_rng(0).random(size)
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        np.sort(values)
        best = min(best, time.process_time() - start)
    return best * 1e3


def _clock() -> tuple[float, float]:
    return time.process_time(), time.perf_counter()


def one_step(sel, pool: Pool, step: int) -> tuple[np.ndarray, np.ndarray, int]:
    """CPU and wall seconds of (select_rollout, observe, select_update), and the batch size."""
    spans, batch, _ = first_call(sel, pool, step)
    if hasattr(sel, "finish_update"):  # greso, hive: one round is the whole step here (not timed)
        sel.finish_update()
    return spans[:, 0], spans[:, 1], batch.num_groups


def first_call(sel, pool: Pool, step: int):
    """A step's first round: ((cpu, wall) seconds of select_rollout, observe and select_update as [3, 2], the
    batch, the decision)."""
    from lze_bench.selectors.base import RolloutBatch, step_rng

    probe = sel.probe(step, step_rng(pool.seed, step, 3))
    if probe is not None:
        sel.observe_probe(RolloutBatch(prompt_ids=probe, rewards=pool.rewards(probe, step), step=step))
    if hasattr(sel, "begin_update"):
        sel.begin_update()
    rng0, rng1 = step_rng(pool.seed, step, 0), step_rng(pool.seed, step, 1)
    pool.spent = (0.0, 0.0)
    t0 = _clock()
    ids = sel.select_rollout(pool.order, budget_for(sel.name, pool.size), step, rng0, pool.features)
    t1 = _clock()
    t0 = (t0[0] + pool.spent[0], t0[1] + pool.spent[1])  # the feature gathers are backend work: not timed
    columns = sel.first_rollouts(pool.samples)  # a step's first call: n_init (speed), round_repeat (reinforce_ada)
    batch = RolloutBatch(prompt_ids=ids, rewards=pool.rewards(ids, step, columns), step=step)  # not timed: backend work
    t2 = _clock()
    sel.observe(batch)
    t3 = _clock()
    decision = sel.select_update(batch, step, rng1)
    t4 = _clock()
    return _spans(((t0, t1), (t2, t3), (t3, t4))), batch, decision


def next_call(sel, pool: Pool, step: int, batch, decision) -> tuple[np.ndarray, np.ndarray, int]:
    """The same step's next round of a selector that extends groups (speed, reinforce_ada), timed like
    `one_step`: the groups `decision` held on `batch`, each with the further rollouts it asked for (drawn
    untimed, as the backend generates them), observed and decided; no fresh prompts (their screening is a
    first call's work) and no select_rollout (0 ms)."""
    from lze_bench.selectors.base import step_rng

    nxt = extended_batch(pool, step, batch, decision)
    t0 = _clock()
    sel.observe(nxt)
    t1 = _clock()
    sel.select_update(nxt, step, step_rng(pool.seed, step, 1, 1))  # (the backend's rng of round 1)
    t2 = _clock()
    spans = _spans(((t0, t0), (t0, t1), (t1, t2)))
    return spans[:, 0], spans[:, 1], nxt.num_groups


def extended_batch(pool: Pool, step: int, batch, decision):
    """The held groups of a full-width `batch` (every row complete: a first call's) with each one's
    `decision.extension` rollouts appended, as `lze_bench.ragged.append_rollouts` joins them (vectorized:
    a padded [held, width] batch with a `valid` mask when the extensions differ)."""
    from lze_bench.selectors.base import RolloutBatch

    if batch.valid is not None:
        raise LzeBenchError("bench selectors: the next call is built from a first call's full-width batch")
    rows = np.flatnonzero(decision.held)
    extra = decision.extension.take(rows).astype(np.int64)
    ids, first = batch.prompt_ids.take(rows), batch.group_size
    more = int(extra.max()) if rows.size else 0
    rewards = np.zeros((rows.size, first + more), dtype=np.float32)
    rewards[:, :first] = batch.rewards[rows]
    valid = np.arange(first + more) < (first + extra)[:, None]
    rewards[:, first:] = pool.rewards(ids, step, more, draw=98) * valid[:, first:]
    if valid.all():
        return RolloutBatch(prompt_ids=ids, rewards=rewards, step=step)
    return RolloutBatch(prompt_ids=ids, rewards=rewards, step=step, valid=valid,
                        rollout_step=np.full(rewards.shape, step, dtype=np.int32))


def _spans(pairs) -> np.ndarray:
    return np.array([[b[0] - a[0], b[1] - a[1]] for a, b in pairs])


def observe_all(sel, pool: Pool, step: int) -> None:
    """`history=full`: one untimed observation of every prompt of the pool, as after a pass over the data, so a
    selector whose cost grows with the prompts it has seen (mopps: one Beta draw per seen candidate instead of
    a uniform) is timed in its most expensive state."""
    from lze_bench.selectors.base import RolloutBatch

    ids = np.arange(pool.size, dtype=np.int64)
    if hasattr(sel, "begin_update"):
        sel.begin_update()
    sel.observe(RolloutBatch(prompt_ids=ids, rewards=pool.rewards(ids, step), step=step))
    if hasattr(sel, "finish_update"):
        sel.finish_update()


def bench_one(name: str, pool: Pool, warmup: int, repeats: int, history: str = "warm") -> list[dict]:
    from lze_bench.selectors.base import step_rng

    sel = make_selector(name, pool.size, pool.seed)
    sel.group_size = pool.samples  # trainer.n_samples, as the harness sets it before each step
    for step in range(warmup):
        one_step(sel, pool, step)
    if history == "full":
        observe_all(sel, pool, warmup)
    sel.begin_epoch(1, step_rng(pool.seed, warmup, 2))
    kinds = {"": []} if name != "astral" else {":start": [], ":mid": []}  # round start / mid round
    if sel.extends_groups:
        kinds[":next"] = []  # the same step's next round, on the groups the first one held
    step = warmup + (warmup % 2 if name == "astral" else 0)
    while min(len(v) for v in kinds.values()) < repeats:
        label = "" if name != "astral" else (":start" if step % sel.config.mu == 0 else ":mid")
        spans, batch, decision = first_call(sel, pool, step)
        kinds[label].append((spans[:, 0], spans[:, 1], batch.num_groups))
        if sel.extends_groups:
            kinds[":next"].append(next_call(sel, pool, step, batch, decision))
        if hasattr(sel, "finish_update"):  # greso, hive: one round is the whole step here (not timed)
            sel.finish_update()
        step += 1
    rows = []
    for label, times in kinds.items():
        cpu = np.array([t[0] for t in times]) * 1e3  # ms[repeats, 3]
        total = cpu.sum(axis=1)
        best = int(np.argmin(total))
        rows.append({
            "selector": name + label, "prompts": pool.size, "batch": times[best][2],
            "rollout": float(cpu[best, 0]), "observe": float(cpu[best, 1]),
            "update": float(cpu[best, 2]), "step": float(total[best]),
            "median": float(np.median(total)), "wall": float(times[best][1].sum() * 1e3),
            "ns/prompt": float(total[best] * 1e6 / pool.size),
        })
    return rows


@BENCH_COMMANDS.add("selectors")
def bench_selectors(options: dict[str, str]) -> BenchResult:
    from rich.progress import Progress

    import lze_bench.selectors  # noqa: F401  (registers every selector)

    sizes = _ints(options.get("sizes", "10000,100000,1000000"), "sizes")
    repeats = max(1, int(options.get("repeats", "3")))
    warmup = max(0, int(options.get("warmup", "2")))
    samples = max(1, int(options.get("samples", "8")))
    embed_dim = max(1, int(options.get("embed_dim", "64")))
    seed = int(options.get("seed", "0"))
    history = options.get("history", "warm")
    if history not in HISTORIES:
        raise LzeBenchError(f"bench selectors: history={history!r} is unknown; use one of {', '.join(HISTORIES)}")
    names = [n for n in options.get("selectors", ",".join(sorted(SELECTORS))).split(",") if n]
    for name in names:
        SELECTORS[name]  # unknown names fail here, in one line
    rows = []
    with Progress(transient=True) as progress:
        task = progress.add_task("selectors", total=len(sizes) * len(names))
        for size in sizes:
            pool = Pool(size, samples, embed_dim, seed)
            for name in names:
                progress.update(task, description=f"{name} @ {size:,} prompts")
                rows += bench_one(name, pool, warmup, repeats, history)
                progress.advance(task)
    sort_ms = sort_reference_ms()
    for row in rows:  # the goal applies at 10^6 prompts to selectors scoring recorded statistics
        row["<50ms"] = "-" if row["prompts"] < 10**6 or row["selector"] == "astral:start" else (
            "yes" if row["step"] < GOAL_MS else "no")
        # the same step in units of np.sort(10^6) on this machine (the goal: <= SORT_GOAL of them at 10^6)
        row["x sort"] = float(row["step"] / sort_ms) if sort_ms > 0 else float("nan")
    notes = [
        "times in ms of process CPU time (time.process_time: the cost on one core, robust to a shared "
        "machine's time slicing); 'median' over repeats; 'wall' is the best step's wall-clock time",
        f"one step = select_rollout + observe + select_update; best of {repeats} after {warmup} warm-up steps "
        f"(epoch 1: LZE's top-k path){' then one observation of every prompt (history=full)' if history == 'full' else ''}"
        f"; {samples} samples per prompt; candidates = the whole pool; "
        "batch = prompts rolled out (hive and astral roll out half: their budget is N/2)",
        "not timed: building the RolloutBatch and computing features (backend work); astral's predictor "
        "diagnostics (step_metrics, computed when the backend reads them for the ledger)",
        f"astral:start = a round-start step (re-predicts all N prompts, O(N * ref_size * d), ref_size=256, "
        f"d={embed_dim}); astral:mid = the other steps of a round",
        "single-threaded NumPy for all but astral's similarity matmul (BLAS may use every core)",
        f"'x sort' = step / the CPU time of np.sort of 10^6 random float64 ({sort_ms:.1f} ms here, best of 5); "
        f"goal <= {SORT_GOAL:g} at 10^6 prompts",
        "speed and reinforce_ada: a step's first call (n_init = 4 and round_repeat = 2 x samples rollouts per "
        "prompt: their screening / first round); :next = the same step's next call, on the groups the first held "
        "with the rollouts each asked for (speed: n_continue = 20 more; drawn untimed), no fresh prompts",
        "mopps, adarft and sec roll out N/16 (mopps: a pool of 16 B, the authors' ts_ratio; adarft and sec choose "
        "B of all N; sec's arms are 5 levels, each must hold B prompts); their columns are a level 1-5 and a "
        "difficulty 0-100 per prompt",
    ]
    return BenchResult(title="selector time per step (best of repeats)", rows=rows, notes=notes)
