"""`lze-bench check selector NAME_OR_PATH`: the properties every selector owes the harness, one line each.

The selector runs through `lze_bench.step_rounds.run_selection` (the step both backends run) on a small
synthetic pool: a seeded data order over 37 prompts (not a multiple of the batch of 6, so a pass ends
short), 4 rollouts a group, 0/1 rewards drawn from each prompt's fixed pass rate by a stream that
depends on (step, round) only, never on the selector; each step offers at least twice the batch as
candidates (`data.candidates_per_step`), so that the selector has a choice to make. Properties:

* deterministic   two runs with one seed make the same decisions (ids, keep, more, replay, holds);
* state           `state_dict` survives `save_state`/`load_state` exactly, and a selector restored from
                  it mid-run (with the data order and held groups the backend checkpoints) decides the
                  rest of the run as the unbroken one does;
* decisions       well-formed decisions for every kind of batch: mixed rewards, ragged groups (one
                  with a single valid rollout; a selector that extends groups gets the rollouts it asks
                  for, and its held groups make its batches ragged), all-equal rewards (all solved; all
                  failed, where filtering selectors keep nothing), passes that end short; ids are
                  distinct candidates within the budget, keep flags one per group, rollout flags / holds
                  only from selectors that declare them, a step that ends within 64 rounds when some
                  groups have mixed rewards (with all-equal rewards a dynamic-sampling selector may ask
                  for more until the backend's cap, `backend.max_gen_rounds`, ends the step as partial);
* booked          the extra work it asks for is work the ledger books: feature passes only for the
                  extras it `requires` (the backend charges those as flops_select), replayed groups
                  only ones that were generated (their generation was booked at that step), and every
                  extra round through the harness's rollouts (counted in `gen_rounds`).

Information, not pass/fail: the time of one step's selector calls at 10^4 and 10^6 prompts.
"""

from __future__ import annotations

import copy
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lze_bench.data_order import DataOrder
from lze_bench.selectors.base import RolloutBatch, load_state, save_state
from lze_bench.step_rounds import run_selection

NUM_PROMPTS, BATCH, GROUP, SEED = 37, 6, 4, 3
MAX_ROUNDS = 64
STEPS, SPLIT = 14, 7  # steps per run; where the state round trip cuts it
EMBED_DIM = 5
SCENARIOS = ("mixed", "ragged", "all solved", "all failed")
LEARNABLE = ("mixed", "ragged")  # scenarios in which a step must end by itself


@dataclass
class Finding:
    prop: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'PASS' if self.ok else 'FAIL'} {self.prop}: {self.detail}"


@dataclass
class FakeGroup:
    prompt_id: int
    step: int
    rewards: np.ndarray


class Pool:
    """Per-prompt pass rates, features and metadata columns of a synthetic pool of `size` prompts."""

    def __init__(self, size: int, seed: int = 7):
        rng = np.random.default_rng(seed)
        self.size = size
        self.rate = rng.random(size)
        self.entropy = rng.random(size).astype(np.float32)
        self.embedding = rng.normal(size=(size, EMBED_DIM)).astype(np.float32)

    def metadata(self, names) -> dict:
        """Columns a selector reads (`metadata_columns`): `level` 1-3, any other one a score in [0, 100]."""
        out = {}
        for name in names:
            if name == "level":
                out[name] = np.arange(self.size) % 3 + 1
            else:
                out[name] = np.random.default_rng([11, len(name)]).random(self.size) * 100
        return out


class Simulation:
    """Steps of one selector over a pool; records every decision and what the booking check needs."""

    def __init__(self, selector, pool: Pool, scenario: str = "mixed", seed: int = SEED, batch_size: int = BATCH):
        self.sel, self.pool, self.scenario, self.seed, self.batch_size = selector, pool, scenario, seed, batch_size
        self.order = DataOrder(pool.size, seed)
        self.begun, self.pending = -1, []
        self.log: list = []
        self.generated: set = set()  # (prompt_id, step) of every group rolled out
        self.problems: list[str] = []  # booking problems seen
        self.last = None  # the last step's Selection
        # twice the budget at least (`data.candidates_per_step`), so a selector's choice among candidates is
        # exercised: by default most selectors are offered exactly the B prompts they roll out
        self.candidates = max(int(selector.candidates_per_step(batch_size)), 2 * batch_size)

    def features(self, name, ids):
        if name not in self.sel.requires:
            self.problems.append(f"asked the backend for {name!r}, which it does not list in `requires` "
                                 "(the backend neither computes nor charges it)")
        table = {"prompt_entropy": self.pool.entropy, "prompt_embedding": self.pool.embedding}
        return table[name][np.asarray(ids, dtype=np.int64)] if name in table else None

    def rollout_fn(self, step: int):
        def rollout(ids, round_index, probe, counts=None):
            ids = np.asarray(ids, dtype=np.int64)
            counts = np.full(ids.size, GROUP, dtype=np.int64) if counts is None else np.asarray(counts, np.int64)
            width = int(counts.max()) if ids.size else GROUP
            draws = np.random.default_rng([99, step, round_index, int(probe)]).random((self.pool.size, width))
            rewards = (draws[ids] < self.pool.rate[ids, None]).astype(np.float32)
            if self.scenario == "all solved":
                rewards[:] = 1.0
            elif self.scenario == "all failed":
                rewards[:] = 0.0
            valid = np.arange(width)[None, :] < counts[:, None]
            if self.scenario == "ragged" and not self.sel.extends_groups and ids.size:
                short = np.random.default_rng([98, step, round_index]).integers(1, width + 1, ids.size)
                short[0] = 1  # a group with one valid rollout
                valid &= np.arange(width)[None, :] < short[:, None]
            rewards[~valid] = 0.0
            for pid in ids.tolist():
                self.generated.add((pid, step))
            groups = [FakeGroup(int(p), step, rewards[row, valid[row]]) for row, p in enumerate(ids.tolist())]
            batch = RolloutBatch(prompt_ids=ids, rewards=rewards, step=step, valid=None if valid.all() else valid,
                                 prompt_tokens=np.full(ids.size, 8, dtype=np.int32),
                                 response_tokens=np.full(rewards.shape, 16, dtype=np.int32),
                                 response_entropy=np.full(rewards.shape, 0.5, dtype=np.float32))
            return groups, batch

        return rollout

    @staticmethod
    def merge(old: FakeGroup, new: FakeGroup) -> FakeGroup:
        return FakeGroup(old.prompt_id, old.step, np.concatenate([old.rewards, new.rewards]))

    def step(self, step: int) -> None:
        selection, self.begun = run_selection(
            self.sel, self.order, seed=self.seed, step=step, batch_size=self.batch_size,
            candidates_per_step=self.candidates,
            max_rounds=MAX_ROUNDS, group_size=GROUP, rollout=self.rollout_fn(step), features=self.features,
            begun_epoch=self.begun, pending=self.pending, merge=self.merge)
        self.pending, self.last = selection.pending, selection
        for r in selection.rounds:
            d = r.decision
            self.log.append((step, r.index, r.ids.tolist(), d.keep.tolist(), _listed(d.keep_rollouts), d.more,
                             d.replay.tolist(), _listed(d.hold), _listed(d.extend), bool(d.defer), bool(d.partial),
                             d.advantage_stats, d.advantage_eps))

    def run(self, steps: range) -> "Simulation":
        for step in steps:
            self.step(step)
        return self

    def resumed(self, selector) -> "Simulation":
        """A twin that continues from here with `selector`: the data order and held groups as checkpointed."""
        twin = Simulation(selector, self.pool, self.scenario, self.seed, self.batch_size)
        twin.order.load_state_dict(self.order.state_dict())
        twin.begun, twin.pending = self.begun, copy.deepcopy(self.pending)
        twin.generated = set(self.generated)
        return twin


def _listed(value):
    return None if value is None else np.asarray(value).tolist()


def build(cls, pool: Pool, batch_size: int = BATCH):
    from lze_bench.selectors import build_selector

    config = cls.Config()
    return build_selector(config, num_prompts=pool.size, batch_size=batch_size,
                          metadata=pool.metadata(cls.metadata_columns(config)))


def _guard(prop: str, fn) -> Finding:
    """Run one property check; an exception from the selector fails it with its first line."""
    try:
        return fn()
    except Exception as exc:  # the selector's own error is the finding
        text = str(exc).strip().splitlines()
        return Finding(prop, False, f"{type(exc).__name__}: {text[0] if text else ''}")


def check_deterministic(cls) -> Finding:
    pool = Pool(NUM_PROMPTS)
    first = Simulation(build(cls, pool), pool).run(range(STEPS)).log
    second = Simulation(build(cls, pool), pool).run(range(STEPS)).log
    if first != second:
        at = next(i for i, (a, b) in enumerate(zip(first, second)) if a != b) if len(first) == len(second) else None
        where = f"step {first[at][0]} round {first[at][1]}" if at is not None else "the number of rounds"
        return Finding("deterministic", False, f"two runs with seed {SEED} differ at {where}")
    return Finding("deterministic", True, f"two runs of {STEPS} steps with seed {SEED} made the same {len(first)} "
                                          "decisions")


def _states_differ(left: dict, right: dict) -> str | None:
    if sorted(left) != sorted(right):
        return f"keys {sorted(left)} came back as {sorted(right)}"
    for key in left:
        a, b = np.asarray(left[key]), np.asarray(right[key])
        if a.dtype != b.dtype or a.shape != b.shape or not np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"):
            return f"state[{key!r}] did not come back the same"
    return None


def check_state(cls) -> Finding:
    pool = Pool(NUM_PROMPTS)
    whole = Simulation(build(cls, pool), pool).run(range(SPLIT))
    state = whole.sel.state_dict()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "selector.npz"
        save_state(path, state)
        restored = build(cls, pool)
        restored.load_state_dict(load_state(path))
    differ = _states_differ(state, restored.state_dict())
    if differ:
        return Finding("state", False, f"after save_state/load_state, {differ}")
    twin = whole.resumed(restored)
    tail = len(whole.log)
    whole.run(range(SPLIT, STEPS))
    twin.run(range(SPLIT, STEPS))
    if twin.log != whole.log[tail:]:
        return Finding("state", False, f"killed after step {SPLIT - 1} and resumed from its state_dict, it decides "
                                       "otherwise than the unbroken run (state_dict misses some of its state?)")
    return Finding("state", True, f"{len(state)} state entries round-trip exactly; resumed after step {SPLIT - 1} it decides "
                                  "as the unbroken run")


def _decision_problem(sel, rnd, step: int, num_prompts: int) -> str | None:
    d, batch = rnd.decision, rnd.batch
    groups = batch.num_groups
    if d.keep.dtype != bool or d.keep.shape != (groups,):
        return f"keep is {d.keep.dtype}{list(d.keep.shape)}, not bool[{groups}]"
    if d.keep_rollouts is not None:
        if not sel.keeps_rollouts:
            return "keep_rollouts set by a selector whose class does not declare keeps_rollouts = True"
        if d.keep_rollouts.shape != batch.rewards.shape:
            return f"keep_rollouts has shape {list(d.keep_rollouts.shape)}, the batch {list(batch.rewards.shape)}"
        trained = d.rollout_mask(batch.group_size, batch.valid)[d.keep]
        if trained.size and not trained.any(axis=1).all():
            return "a kept group has no rollout left to train"
    if (d.held.any() or d.extension.any()) and not sel.extends_groups:
        return "hold/extend set by a selector whose class does not declare extends_groups = True"
    if d.replay.size and not ((d.replay[:, 0] >= 0) & (d.replay[:, 0] < num_prompts)).all():
        return "a replay key names a prompt id outside 0..N-1"
    if d.advantage_eps is not None and not (np.isfinite(d.advantage_eps) and d.advantage_eps > 0):
        return f"advantage_eps {d.advantage_eps!r} is not a finite number > 0"
    return None


def check_decisions(cls) -> Finding:
    decisions, kept_none = 0, 0
    for scenario in SCENARIOS:
        pool = Pool(NUM_PROMPTS)
        sim = Simulation(build(cls, pool), pool, scenario)
        for step in range(STEPS):
            try:
                sim.step(step)
            except Exception as exc:
                text = str(exc).strip().splitlines()
                return Finding("decisions", False, f"{scenario} batches, step {step}: {type(exc).__name__}: "
                                                   f"{text[0] if text else ''}")
            selection = sim.last
            for rnd in selection.rounds:
                problem = _decision_problem(sim.sel, rnd, step, NUM_PROMPTS)
                if problem:
                    return Finding("decisions", False, f"{scenario} batches, step {step} round {rnd.index}: {problem}")
                decisions += 1
            endless = selection.gen_rounds >= MAX_ROUNDS and selection.rounds and selection.rounds[-1].decision.more > 0
            if endless and scenario in LEARNABLE:  # all-equal rewards may rightly sample until the backend's cap
                return Finding("decisions", False, f"{scenario} batches, step {step}: still asks for more prompts "
                                                   f"after {MAX_ROUNDS} rounds (a step must end)")
            kept_none += not any(keep for _, keep, _ in selection.fresh())
    return Finding("decisions", True, f"{decisions} decisions well-formed over {len(SCENARIOS)} kinds of batch "
                                      f"({', '.join(SCENARIOS)}; ragged, one-rollout groups, short pass ends); "
                                      f"{kept_none} steps kept nothing")


def check_booked(cls) -> Finding:
    pool = Pool(NUM_PROMPTS)
    sim = Simulation(build(cls, pool), pool)
    rounds = 0
    for step in range(STEPS):
        sim.step(step)
        rounds += sim.last.gen_rounds
        for rnd in sim.last.rounds:
            unknown = [key for key in rnd.decision.replay.tolist() if tuple(key) not in sim.generated]
            if unknown:
                sim.problems.append(f"step {step} replays group {tuple(unknown[0])}, which was never generated "
                                    "(its rollouts were never booked)")
    if sim.problems:
        return Finding("booked", False, sim.problems[0])
    asked = f"feature passes for {', '.join(cls.requires)} (charged as flops_select)" if cls.requires else \
        "no feature passes"
    return Finding("booked", True, f"{rounds} generation rounds in {STEPS} steps (ledger gen_rounds), replays only of "
                                   f"generated groups; {asked}")


def timing_batch(size: int) -> int:
    """The batch (prompts per update) of a timed step at `size` prompts."""
    return max(1, min(1024, size // 16))


def time_step(cls, size: int, repeats: int = 2) -> float:
    """Seconds of one step's selector calls (select_rollout, observe, select_update...) at `size` prompts:
    the median over `repeats` steps after a first, untimed one; rollouts and grading are not timed."""
    pool = Pool(size)
    batch = timing_batch(size)
    sim = Simulation(build(cls, pool, batch), pool, batch_size=batch)
    times = []
    for step in range(repeats + 1):
        sim.step(step)
        times.append(sim.last.time_select_s)
        sim.generated.clear()
    return float(np.median(times[1:]))


@dataclass
class Report:
    name: str
    findings: list = field(default_factory=list)
    timings: list = field(default_factory=list)  # (prompts, seconds)

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.findings)


CHECKS = (("deterministic", check_deterministic), ("state", check_state), ("decisions", check_decisions),
          ("booked", check_booked))


def resolve(target: str):
    """(name, class) of a registered selector name or a `MODULE:CLASS` import path."""
    from lze_bench.plugins import is_import_path, load_entry_points, load_import_path
    from lze_bench.registry import SELECTORS

    import lze_bench.selectors  # noqa: F401  (registers the built-ins)

    load_entry_points()
    name = load_import_path(target) if is_import_path(target) else target
    return name, SELECTORS[name]


def check_selector(target: str, sizes=(10**4, 10**6)) -> Report:
    name, cls = resolve(target)
    report = Report(name)
    for prop, fn in CHECKS:
        report.findings.append(_guard(prop, lambda fn=fn: fn(cls)))
    for size in sizes:
        try:
            report.timings.append((size, time_step(cls, size)))
        except Exception as exc:  # information only: say why there is no figure
            report.timings.append((size, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"))
    return report
