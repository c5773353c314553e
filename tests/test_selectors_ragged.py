"""Selectors that extend groups (speed, reinforce_ada): their decisions through the harness's rounds
(lze_bench.step_rounds.run_selection, which both backends call) against a line-by-line reading of each
author's loop (methods.md §2.2, §2.4), on recorded reward streams.

Each prompt has a fixed stream of 0/1 rewards; the k-th rollout ever generated for it takes the k-th reward.
A decision that differs from the authors' (which rollouts train, when, and the pool the advantage uses)
shows up as different stream indices.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import pytest

from lze_bench.data_order import DataOrder
from lze_bench.registry import SELECTORS
from lze_bench.selectors import RolloutBatch, build_selector
from lze_bench.step_rounds import run_selection


@dataclass
class FakeGroup:
    prompt_id: int
    gen_step: int
    indices: list = field(default_factory=list)  # stream positions of its rollouts, in generation order


class Streams:
    """Per-prompt reward streams; `draw(pid, k)` hands out the prompt's next k positions."""

    def __init__(self, seed: int, length: int = 400):
        self.seed, self.length, self.used = seed, length, defaultdict(int)

    def reward(self, pid: int, index: int) -> float:
        rng = np.random.default_rng([self.seed, pid])
        rate = [0.0, 1.0, 0.1, 0.5, 0.8, 0.3][pid % 6]
        return float((rng.random(self.length) < rate)[index])

    def draw(self, pid: int, k: int) -> list:
        start = self.used[pid]
        self.used[pid] += k
        return list(range(start, start + k))


def rollout_fn(streams: Streams, step: int, n: int):
    def rollout(ids, round_index, probe, counts=None):
        counts = np.full(len(ids), n) if counts is None else np.asarray(counts)
        groups = [FakeGroup(int(pid), step, streams.draw(int(pid), int(k))) for pid, k in zip(ids, counts)]
        width = int(counts.max())
        rewards = np.zeros((len(ids), width), dtype=np.float32)
        valid = np.arange(width)[None, :] < counts[:, None]
        for row, group in enumerate(groups):
            rewards[row, :len(group.indices)] = [streams.reward(group.prompt_id, i) for i in group.indices]
        batch = RolloutBatch(prompt_ids=np.asarray(ids), rewards=rewards, step=step,
                             valid=None if valid.all() else valid)
        return groups, batch

    return rollout


def merge(old: FakeGroup, new: FakeGroup) -> FakeGroup:
    return FakeGroup(old.prompt_id, old.gen_step, old.indices + new.indices)


def run_steps(selector, streams, *, steps: int, batch: int, n: int, num_prompts: int, max_rounds: int = 50):
    """[(fresh ids per round, {pid: (all indices, kept indices)} trained, Selection)] per step."""
    order, pending, begun, out = DataOrder(num_prompts, seed=4), [], -1, []
    for step in range(steps):
        selection, begun = run_selection(selector, order, seed=9, step=step, batch_size=batch,
                                         candidates_per_step=None, max_rounds=max_rounds, group_size=n,
                                         rollout=rollout_fn(streams, step, n), begun_epoch=begun,
                                         pending=pending, merge=merge)
        pending = selection.pending
        trained = {}
        for round_ in selection.rounds:
            mask = round_.decision.rollout_mask(round_.batch.group_size, round_.batch.valid)
            for g in np.flatnonzero(round_.decision.keep):
                group = round_.groups[g]
                kept = [i for i, flag in zip(group.indices, mask[g]) if flag]
                trained[group.prompt_id] = (list(group.indices), kept)
        out.append(([r.ids.tolist() for r in selection.rounds], trained, selection))
    return out


# --- Reinforce-Ada -------------------------------------------------------------------------------------------

def authors_reinforce_ada(streams: Streams, uids, n, round_repeat, max_rounds, threshold, choice):
    """RLHFlow/Reinforce-Ada @ 05be6058 ray_trainer.py:929-1185, read line by line (stream positions for
    DataProto rows): {uid: (pool positions, kept positions)}. What a prompt keeps of its caches is
    `authors_counts` (the same lines; a finished prompt's caches stop growing when it finishes)."""
    finished = {uid: False for uid in uids}
    pos_cache, neg_cache, pool = defaultdict(list), defaultdict(list), defaultdict(list)
    active = list(uids)
    for _ in range(max_rounds):
        if not active:
            break
        draws = {uid: streams.draw(uid, round_repeat) for uid in active}
        for uid in active:
            for j in draws[uid]:
                pool[uid].append(j)
                (pos_cache if streams.reward(uid, j) > threshold else neg_cache)[uid].append(j)
            if choice == "balanced":
                finished[uid] = len(pos_cache[uid]) >= n // 2 and len(neg_cache[uid]) >= n - n // 2
            else:
                finished[uid] = len(pos_cache[uid]) >= 1
        active = [uid for uid in active if not finished[uid]]
    kept = {}
    for uid in uids:
        keep_pos, keep_neg = authors_counts(len(pos_cache[uid]), len(neg_cache[uid]), n, choice)
        kept[uid] = (pool[uid], pos_cache[uid][:keep_pos] + neg_cache[uid][:keep_neg])
    return kept


@pytest.mark.parametrize("choice,n,repeat,rounds,threshold", [
    ("balanced", 4, None, 4, 0.7),  # the authors' script (n = 4, round_repeat 8)
    ("balanced", 5, 3, 3, 0.7),  # odd n: 2 positives, 3 negatives
    ("balanced", 5, 8, 2, 0.7),  # finished with more of each than it keeps
    ("positive_focused", 4, 2, 4, 0.7),
    ("positive_focused", 6, 4, 2, 0.5),
])
def test_reinforce_ada_keeps_what_the_authors_loop_keeps(choice, n, repeat, rounds, threshold):
    config = SELECTORS["reinforce_ada"].Config(choice=choice, round_repeat=repeat, max_rounds=rounds,
                                               positive_threshold=threshold)
    selector = build_selector(config, num_prompts=60, batch_size=12)
    ours, theirs = Streams(1), Streams(1)
    for ids, trained, selection in run_steps(selector, ours, steps=4, batch=12, n=n, num_prompts=60):
        reference = authors_reinforce_ada(theirs, ids[0], n, repeat or 2 * n, rounds, threshold, choice)
        assert sorted(trained) == sorted(ids[0])  # every prompt of the batch trains (unfinished ones too)
        for pid in ids[0]:
            pool, kept = trained[pid]
            assert pool == reference[pid][0], f"prompt {pid}: generated rollouts differ"
            assert sorted(kept) == sorted(reference[pid][1]), f"prompt {pid}: kept rollouts differ"
        assert all(r.decision.advantage_stats == "generated" for r in selection.rounds)
        assert selection.gen_rounds <= rounds and not selection.pending


def authors_counts(pos: int, neg: int, n: int, choice: str) -> tuple:
    """(positives, negatives) kept, as RT:1069-1108 and RT:1139-1185 write it for one prompt's caches."""
    finished = (pos >= n // 2 and neg >= n - n // 2) if choice == "balanced" else pos >= 1
    if finished:  # downsample_cache(n)
        target_pos = min(n // 2, pos)
        target_neg = min(n - target_pos, neg)
        if target_pos + target_neg < n:
            if pos > target_pos:
                target_pos += min(pos - target_pos, n - (target_pos + target_neg))
            elif neg > target_neg:
                target_neg += min(neg - target_neg, n - (target_pos + target_neg))
        return target_pos, target_neg
    take = min(n, pos + neg)
    target_pos, target_neg = n // 2, n - n // 2  # the round loop's last assignment (balanced)
    if choice == "positive_focused":
        ratio = pos / (pos + neg) if pos + neg else 0.0
        target_pos = max(min(math.ceil(ratio * n), take - 1), 1)
        target_neg = take - target_pos
    actual_pos, actual_neg = min(pos, target_pos), min(neg, target_neg)
    if actual_pos + actual_neg < take:
        if pos > actual_pos:
            actual_pos += min(pos - actual_pos, take - actual_pos - actual_neg)
        elif neg > actual_neg:
            actual_neg += min(neg - actual_neg, take - actual_pos - actual_neg)
    return actual_pos, actual_neg


@pytest.mark.parametrize("choice", ["balanced", "positive_focused"])
def test_reinforce_ada_keep_counts_equal_the_authors_branches_everywhere(choice):
    """Every (P, Q) up to 14 rollouts and n up to 9, one group each, at the last round (so every prompt keeps)."""
    cases = [(p, q, n) for n in range(1, 10) for p in range(15) for q in range(15) if 0 < p + q <= 14]
    width = 14
    for n in range(1, 10):
        rows = [(p, q) for p, q, m in cases if m == n]
        rewards = np.zeros((len(rows), width), dtype=np.float32)
        valid = np.zeros((len(rows), width), dtype=bool)
        for r, (p, q) in enumerate(rows):
            rewards[r, :p] = 1.0
            valid[r, :p + q] = True
        config = SELECTORS["reinforce_ada"].Config(choice=choice, round_repeat=1, max_rounds=1)
        selector = build_selector(config, num_prompts=len(rows), batch_size=len(rows))
        selector.group_size = n
        batch = RolloutBatch(prompt_ids=np.arange(len(rows)), rewards=rewards, step=0, valid=valid)
        decision = selector.select_update(batch, 0, np.random.default_rng(0))
        assert decision.keep.all()
        kept = decision.keep_rollouts
        for r, (p, q) in enumerate(rows):
            ours = (int((kept[r] & (rewards[r] == 1)).sum()), int((kept[r] & valid[r] & (rewards[r] == 0)).sum()))
            assert ours == authors_counts(p, q, n, choice), f"n={n} P={p} Q={q}"
            assert kept[r, :p].tolist() == [True] * ours[0] + [False] * (p - ours[0])  # the first of each class
        # before the last round only the finished keep; the others go on with round_repeat more
        config = SELECTORS["reinforce_ada"].Config(choice=choice, round_repeat=1, max_rounds=99)
        selector = build_selector(config, num_prompts=len(rows), batch_size=len(rows))
        selector.group_size = n
        decision = selector.select_update(batch, 0, np.random.default_rng(0))
        finished = [(p >= n // 2 and q >= n - n // 2) if choice == "balanced" else p >= 1 for p, q in rows]
        assert decision.keep.tolist() == finished and decision.hold.tolist() == [not f for f in finished]
        assert decision.extend.tolist() == [0 if f else 1 for f in finished]


def test_reinforce_ada_counts_a_reward_at_the_threshold_as_negative():
    """RT:1059: positive iff reward > positive_threshold (rewards need not be 0/1)."""
    selector = build_selector(SELECTORS["reinforce_ada"].Config(round_repeat=4), num_prompts=3, batch_size=3)
    selector.group_size = 2
    rewards = np.array([[0.7, 0.7, 1.0, 0.2], [0.7, 0.71, 0.1, 0.0], [0.7, 0.7, 0.7, 0.7]], dtype=np.float32)
    decision = selector.select_update(RolloutBatch(prompt_ids=np.arange(3), rewards=rewards, step=0), 0, None)
    assert decision.keep.tolist() == [True, True, False]  # the last has no positive: one more round
    assert decision.keep_rollouts[:2].tolist() == [[True, False, True, False], [True, True, False, False]]


def test_reinforce_ada_exercises_every_branch():
    """The recorded streams reach early exits, the last-round fallback and all-wrong groups that still train."""
    selector = build_selector(SELECTORS["reinforce_ada"].Config(), num_prompts=60, batch_size=12)
    (ids, trained, selection), = run_steps(selector, Streams(1), steps=1, batch=12, n=4, num_prompts=60)
    pools = [len(pool) for pool, _ in trained.values()]
    assert min(pools) == 8 and max(pools) == 32  # finished in round 1; went to the last round
    assert any(len(kept) == 4 for _, kept in trained.values())
    streams = Streams(1)
    assert any(all(streams.reward(pid, i) == 0 for i in kept) for pid, (_, kept) in trained.items())


# --- SPEED ---------------------------------------------------------------------------------------------------

class AuthorsSpeed:
    """Zanette-Labs/speed-rl @ 80e47b5f data_controller.py + fast_dapo_ray_trainer.py:126-216, read line by line
    (uids are prompt ids, DataProto rows stream positions); the fresh batches are those the harness offered."""

    def __init__(self, streams, *, n_init, n_cont, n_gpus, batch):
        self.streams, self.n_init, self.n_cont, self.n_gpus, self.batch = streams, n_init, n_cont, n_gpus, batch
        self.queue, self.training, self.ready = [], [], 0  # training: [(uid, position)] in arrival order

    def call(self, fresh: list) -> None:
        """get_generation_inputs + generate + update_prompts."""
        usable = len(self.queue) - len(self.queue) % self.n_gpus
        second, self.queue = self.queue[:usable], self.queue[usable:]
        rows = [(uid, j) for uid in fresh for j in self.streams.draw(uid, self.n_init)]
        rows += [(uid, j) for uid in second for _ in range(self.n_cont // self.n_init)
                 for j in self.streams.draw(uid, self.n_init)]
        by_uid = defaultdict(list)
        for uid, j in rows:
            by_uid[uid].append(j)
        first_phase = [u for u, js in by_uid.items() if len(js) == self.n_init]
        second_phase = [u for u, js in by_uid.items() if len(js) == self.n_cont]
        kept = [u for u in first_phase if np.std([self.streams.reward(u, j) for j in by_uid[u]]) > 0]
        self.queue += kept
        self.training += [(u, j) for u, j in rows if u in kept]
        self.training += [(u, j) for u, j in rows if u in second_phase]
        self.ready += len(set(second_phase))

    def train(self) -> dict:
        """get_training_data: the first `batch` uids (arrival order) with all n_init + n_cont rows."""
        order = list(dict.fromkeys(u for u, _ in self.training))
        rows = defaultdict(list)
        for u, j in self.training:
            rows[u].append(j)
        chosen = [u for u in order if len(rows[u]) == self.n_init + self.n_cont][:self.batch]
        self.training = [(u, j) for u, j in self.training if u not in chosen]
        self.ready -= self.batch
        return {u: rows[u] for u in chosen}


@pytest.mark.parametrize("n_init,n_cont,n_gpus,gen,batch", [(4, 20, 1, None, 4), (2, 6, 2, 10, 4), (4, 8, 3, 7, 4),
                                                              (2, 4, 1, 3, 1)])
def test_speed_trains_what_the_authors_loop_trains(n_init, n_cont, n_gpus, gen, batch):
    config = SELECTORS["speed"].Config(n_init=n_init, n_continue=n_cont, n_gpus=n_gpus, gen_batch_size=gen)
    selector = build_selector(config, num_prompts=3000, batch_size=batch)
    authors = AuthorsSpeed(Streams(2), n_init=n_init, n_cont=n_cont, n_gpus=n_gpus, batch=batch)
    steps = run_steps(selector, Streams(2), steps=8, batch=batch, n=8, num_prompts=3000)
    # the fresh batches the harness offered, in order; the authors' loop decides itself when to make a call
    offered = [fresh for rounds, _, _ in steps for fresh in rounds if fresh]
    assert all(len(fresh) == (gen or 4 * batch) for fresh in offered)  # gen_batch_size, null = 4 B
    stale = idle = 0
    for step, (fresh_rounds, trained, selection) in enumerate(steps):
        while authors.ready < batch:  # FT:133: generate until enough groups are complete
            authors.call(offered.pop(0))
        reference = authors.train()
        assert sorted(trained) == sorted(reference), f"step {step}: other prompts trained"
        for pid, (pool, kept) in trained.items():
            assert pool == kept == reference[pid], f"step {step} prompt {pid}: other rollouts trained"
        waiting = defaultdict(list)  # the authors' buffer after the update: queued screenings, complete groups
        for uid, j in authors.training:
            waiting[uid].append(j)
        assert {h.prompt_id: h.group.indices for h in selection.pending} == dict(waiting), f"step {step}: queue"
        stale += sum(g.gen_step < step for r in selection.rounds for g, k in zip(r.groups, r.decision.keep) if k)
        idle += not any(fresh_rounds)
        assert not selection.partial
    assert not offered  # no call the authors' loop would not make
    assert stale > 0  # groups generated at an earlier step trained later (the cross-step queue was exercised)
    if n_cont >= 4 * n_init:
        assert idle > 0  # a step that started with B complete groups generated nothing


def test_speed_with_a_full_queue_takes_no_candidates_and_offers_every_prompt_of_the_pass():
    """Steps that start with B complete groups make no call: the data order's prompts wait for the next call,
    so the pass's first 160 fresh prompts are all 160 (160 = 10 calls of 16, no short remainder dropped)."""
    config = SELECTORS["speed"].Config(n_init=4, n_continue=20)  # gen_batch_size null = 4 B = 16
    selector = build_selector(config, num_prompts=160, batch_size=4)
    steps = run_steps(selector, Streams(2), steps=40, batch=4, n=8, num_prompts=160)
    fresh = [pid for rounds, _, _ in steps for ids in rounds for pid in ids]
    idle = sum(not any(rounds) for rounds, _, _ in steps)
    assert idle > 0 and len(fresh) >= 160  # the queue was full at some steps; a whole pass was offered
    assert sorted(fresh[:160]) == list(range(160))
    considered = [selection.considered for _, _, selection in steps]
    assert all(c == 0 for c, (rounds, _, _) in zip(considered, steps) if not any(rounds))


@pytest.mark.parametrize("cap", [2, 3, 4])
def test_speed_at_its_call_cap_trains_the_complete_groups_it_has(cap):
    """max_num_gen_batches - 1 calls without B complete groups (the authors raise before the max-th call): the
    step trains what is complete, flagged partial."""
    config = SELECTORS["speed"].Config(n_init=2, n_continue=2, gen_batch_size=4, max_num_gen_batches=cap)
    selector = build_selector(config, num_prompts=3000, batch_size=8)
    (rounds, trained, selection), = run_steps(selector, Streams(2), steps=1, batch=8, n=8, num_prompts=3000)
    assert selection.gen_rounds == cap - 1 and selection.partial
    complete = [g for g in selection.rounds[-1].groups if len(g.indices) == 4]
    assert sorted(trained) == sorted(g.prompt_id for g in complete)
    assert all(len(pool) == 4 for pool, _ in trained.values())
    if cap > 2:
        assert trained  # survivors of the first call completed in the second


def test_speed_refuses_a_call_cap_that_allows_no_call():
    from lze_bench.errors import LzeBenchError

    with pytest.raises(LzeBenchError, match="selector.max_num_gen_batches: must be >= 2"):
        SELECTORS["speed"].Config(max_num_gen_batches=1)


def test_speed_screens_out_groups_whose_first_rollouts_agree():
    selector = build_selector(SELECTORS["speed"].Config(), num_prompts=3000, batch_size=4)
    streams = Streams(2)
    for _, trained, selection in run_steps(selector, streams, steps=4, batch=4, n=8, num_prompts=3000):
        assert len(trained) == 4
        for pid, (pool, _) in trained.items():
            screening = [streams.reward(pid, i) for i in pool[:4]]
            assert 0 < sum(screening) < 4 and len(pool) == 24
        dropped = [g for r in selection.rounds for g, k, h in zip(r.groups, r.decision.keep, r.decision.held)
                   if not k and not h]
        assert all(len(set(streams.reward(g.prompt_id, i) for i in g.indices)) == 1 for g in dropped)


def test_update_decision_refuses_extensions_it_cannot_carry_out():
    """`extend` is one count >= 0 per group, > 0 only for held groups; anything else is one ValueError."""
    from lze_bench.selectors.base import UpdateDecision

    keep, hold = np.array([False, False, True]), np.array([True, True, False])
    assert UpdateDecision(keep=keep, hold=hold, extend=np.array([2, 0, 0])).extend.tolist() == [2, 0, 0]
    for extend in ([2, 0], [-1, 3, 0], [0, 0, 1]):  # wrong size, a negative count, more for a kept group
        with pytest.raises(ValueError, match="extend must be int"):
            UpdateDecision(keep=keep, hold=hold, extend=np.array(extend))


@pytest.mark.parametrize("backend", ["local", "openrlhf"])
def test_reinforce_ada_with_fewer_backend_rounds_than_its_own_is_refused_in_one_line(tmp_path, backend):
    """The authors finish each prompt within its step: a backend cap below selector.max_rounds would carry
    unfinished prompts into the next step (which then trains more than B groups): refused before any work."""
    from pathlib import Path

    import yaml
    from typer.testing import CliRunner

    from lze_bench.cli import app
    from tiny_run import TINY_TRAIN

    common = ["selector=reinforce_ada", "selector.max_rounds=3", "backend.max_gen_rounds=2", f"run_dir={tmp_path / 'r'}"]
    if backend == "local":
        args = ["train", *TINY_TRAIN, f"backend.cache_dir={tmp_path / 'cache'}", *common]
    else:
        spec = yaml.safe_load((Path(__file__).parent.parent / "sweeps" / "qwen25_math_1p5b.yaml").read_text())
        args = ["train", *spec["overrides"], *common, "--dry-run"]
    result = CliRunner().invoke(app, args)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "backend.max_gen_rounds" in lines[0] and "selector.max_rounds=3" in lines[0], lines[0]
    assert not (tmp_path / "r" / "ledger.parquet").exists()
