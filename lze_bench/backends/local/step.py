"""One training step of the local backend, in the order of design.md "One training step".

`[begin_epoch]` -> `[probe -> roll out -> observe_probe]` -> round r = 0, 1, ...:
candidates -> `select_rollout` -> roll out n samples + grade -> `observe` ->
`select_update` (-> more rounds while `more > 0` and `backend.max_gen_rounds`
allows) -> GRPO update on the kept groups + replayed groups -> one ledger row
and one rollout-log row per rolled-out prompt. Selector randomness:
`step_rng(seed, step, TAG, round)` (selectors.md §0). Sampling randomness: a
torch generator seeded from (seed, step, kind, round), so a resumed run draws
what an unbroken one would.

The selector calls and their order are lze_bench.step_rounds.run_selection,
shared with backend=openrlhf (its docstring has the choices about rounds,
epochs and caps). Choices of this backend:
- a step that keeps nothing makes no update but still gets its ledger row;
- probe rollouts count in `prompts_probed`, `samples`, the token columns and
  `flops_rollout`, not in `reward_mean` / `zero_variance_frac` (fresh groups
  only), and are not written to the rollout log (they are not candidates);
- replay keys are resolved before this step's groups enter the store, so a
  prompt rolled out again this step can still replay its older group;
- `selector.align_minibatch=true` (lze): the kept groups' responses are cut
  to the selector's `align_mask` after the advantages (authors' trainer,
  selectors.md §5); `groups_kept` stays the selector's choice,
  `responses_kept` / `responses_trained` and the trained tokens and FLOPs
  book what was trained;
- a selector that keeps a subset of a group's rollouts (`keep_rollouts`, PODS):
  every generated rollout is booked in `samples`, the token columns and
  `flops_rollout`; only the kept ones reach the update, so log-prob, reference
  and training passes (`flops_logprob`, `flops_train`, `trained_tokens`) are
  theirs; `responses_kept` counts them, and the rollout log's `kept_rollouts`
  (one flag per rollout, beside `rewards`) says which they were (`kept` keeps
  its meaning: the group reached the update). The store keeps the group as
  generated;
- rewards (lze_bench/reward_shape.py): the selectors' `RolloutBatch.rewards`,
  `reward_mean` and the rollout log's `rewards` are the verdicts (0/1); a
  group's `Group.rewards`, which the advantages, `kept_zero_variance`, held
  groups and the replay store read, are `trainer.reward_shape` of them (the
  same numbers under the default `binary`).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np

from lze_bench.backends.local.grpo import Group, grpo_update
from lze_bench.backends.local.rollout import generate
from lze_bench.errors import LzeBenchError
from lze_bench.ledger import zero_variance_fraction
from lze_bench.reward_shape import shaped_rewards
from lze_bench.selectors import RolloutBatch, step_rng
from lze_bench.selectors.base import STEP_METRICS, TAG_SELECT_UPDATE
from lze_bench.step_rounds import run_selection

KIND_TRAIN, KIND_PROBE = 0, 1
ALIGN_ROUND = 99  # rng [seed, step, 1, 99] of LZE's mini-batch alignment (selectors.md §5)


@dataclass
class StepCounters:
    considered: int = 0
    rolled_out: int = 0
    probed: int = 0
    samples: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    flops_rollout: int = 0
    time_rollout_s: float = 0.0
    time_grade_s: float = 0.0
    time_select_s: float = 0.0
    rewards: list = field(default_factory=list)  # float32[G, n] per fresh batch


class StepRunner:
    """Holds what every step needs; `run(step)` returns (ledger row, rollout rows)."""

    def __init__(self, *, cfg, selector, stream, model, tokenizer, optimizer, ref_model, grader, flop_model,
                 features, store, prompts, answers, device, begun_epoch: int = -1, pending: list | None = None):
        self.cfg, self.selector, self.stream = cfg, selector, stream
        self.model, self.tokenizer, self.optimizer, self.ref_model = model, tokenizer, optimizer, ref_model
        self.grader, self.flop_model, self.features, self.store = grader, flop_model, features, store
        self.prompts, self.answers, self.device = prompts, answers, device
        self.begun_epoch = begun_epoch
        self.pending = list(pending or [])  # groups a selector held for the next step (SPEED), checkpointed
        self.seed, self.trainer = int(cfg.seed), cfg.trainer

    # --- rollouts ----------------------------------------------------------------
    def _generator(self, step: int, kind: int, round_index: int):
        import torch

        seed = int(np.random.default_rng([self.seed, step, 100 + kind, round_index]).integers(2**62))
        generator = torch.Generator(device=self.device)
        generator.manual_seed(seed)
        return generator

    def rollout(self, ids: np.ndarray, step: int, kind: int, round_index: int, counters: StepCounters,
                counts: np.ndarray | None = None):
        """Roll out `counts[i]` samples of prompt `ids[i]` (all `trainer.n_samples` without counts) and grade them."""
        n = self.trainer.n_samples
        counts = np.full(len(ids), n, dtype=np.int64) if counts is None else np.asarray(counts, dtype=np.int64)
        flat = np.repeat(ids, counts)
        start = time.perf_counter()
        gen = generate(self.model, self.tokenizer, [self.prompts[i] for i in flat],
                       max_new_tokens=self.trainer.max_new_tokens, temperature=self.trainer.temperature,
                       top_p=self.trainer.top_p, generator=self._generator(step, kind, round_index),
                       chunk_size=self.cfg.backend.gen_chunk_size)
        counters.time_rollout_s += time.perf_counter() - start
        start = time.perf_counter()
        grades = self.grader.grade(gen.texts, [self.answers[i] for i in flat])
        counters.time_grade_s += time.perf_counter() - start
        response_tokens = gen.response_tokens
        counters.samples += len(flat)
        counters.prompt_tokens += int(gen.prompt_tokens.sum())
        counters.generated_tokens += int(response_tokens.sum())
        counters.flops_rollout += self.flop_model.generation(gen.prompt_tokens, response_tokens)
        flat_rewards = np.array([1.0 if g.correct else 0.0 for g in grades], dtype=np.float32)  # the verdicts
        # what the update trains on (trainer.reward_shape); the selectors read the verdicts
        trained_rewards = shaped_rewards([g.correct for g in grades], [g.status != "no_answer" for g in grades],
                                         self.trainer.reward_shape)
        starts = np.concatenate([[0], np.cumsum(counts)])
        groups = [
            Group(int(pid), step, self.prompts[pid], gen.response_ids[starts[g]:starts[g + 1]],
                  gen.logprobs[starts[g]:starts[g + 1]], trained_rewards[starts[g]:starts[g + 1]].copy())
            for g, pid in enumerate(ids)
        ]
        width = int(counts.max()) if counts.size else n
        valid = np.arange(width)[None, :] < counts[:, None]
        batch = RolloutBatch(prompt_ids=ids, rewards=_rows(flat_rewards, valid), step=step,
                             response_tokens=_rows(response_tokens, valid),
                             prompt_tokens=gen.prompt_tokens[starts[:-1]] if len(ids) else gen.prompt_tokens,
                             response_entropy=_rows(gen.entropy, valid),
                             valid=None if valid.all() else valid)
        return groups, batch

    @staticmethod
    def _merge(old: Group, new: Group) -> Group:
        """A held group with the rollouts just generated for it appended (SPEED, Reinforce-Ada)."""
        return dataclasses.replace(old, responses=list(old.responses) + list(new.responses),
                                   behaviour_logprobs=list(old.behaviour_logprobs) + list(new.behaviour_logprobs),
                                   rewards=np.concatenate([old.rewards, new.rewards]))

    def _responses(self, groups: list[Group]) -> int:
        """Rollouts of these groups that reach the update: a group's train_mask, else all n."""
        return sum(len(g.responses) if g.train_mask is None else int(g.train_mask.sum()) for g in groups)

    @staticmethod
    def _subset(group: Group, decision, row: np.ndarray) -> Group:
        """The group as the update sees it: with a selector's kept rollouts (PODS) when it chose some."""
        if decision.keep_rollouts is None:
            return group
        row = row[:len(group.responses)]  # a ragged batch's row: its rollouts first, then padding
        stats = row if decision.advantage_stats == "kept" else None
        eps = group.adv_eps if decision.advantage_eps is None else float(decision.advantage_eps)
        return dataclasses.replace(group, train_mask=row.copy(), stats_mask=stats, adv_eps=eps)

    def _align(self, kept: list, step: int, rolled_out: int) -> list:
        """The kept groups with the responses an `align_mask` selector (lze) leaves for training."""
        align = getattr(self.selector, "align_mask", None)
        n = self.trainer.n_samples
        mask = None if align is None else align(len(kept), n, rolled_out * n,
                                                step_rng(self.seed, step, TAG_SELECT_UPDATE, ALIGN_ROUND))
        if mask is None:
            return kept
        trained = [row if g.train_mask is None else row & g.train_mask for g, row in zip(kept, mask)]
        return [dataclasses.replace(group, train_mask=row) for group, row in zip(kept, trained) if row.any()]

    # --- the step ------------------------------------------------------------------
    def run(self, step: int):
        start = time.perf_counter()
        counters = StepCounters()

        def rollout(ids, round_index, probe, counts=None):
            extra = () if counts is None else (counts,)  # fixed groups: the call every backend test double knows
            groups, batch = self.rollout(ids, step, KIND_PROBE if probe else KIND_TRAIN, round_index, counters, *extra)
            if probe:
                counters.probed += len(ids)
            return groups, batch

        selection, self.begun_epoch = run_selection(
            self.selector, self.stream, seed=self.seed, step=step, batch_size=self.trainer.batch_size,
            candidates_per_step=self.cfg.data.candidates_per_step, max_rounds=self.cfg.backend.max_gen_rounds,
            group_size=self.trainer.n_samples, rollout=rollout, features=self.features, begun_epoch=self.begun_epoch,
            pending=self.pending, merge=self._merge)
        self.pending = selection.pending
        counters.considered, counters.rolled_out = selection.considered, selection.rolled_out
        counters.time_select_s = selection.time_select_s
        epoch, partial, replay_keys = selection.epoch, selection.partial, selection.replay_keys()
        fresh, log_rows = [], []
        for round_ in selection.rounds:
            batch, decision = round_.batch, round_.decision
            final = ~decision.held
            rollouts, counts = decision.rollout_mask(batch.group_size, batch.valid), batch.counts
            if batch.valid is None and final.all():
                counters.rewards.append(batch.rewards)
            else:  # ragged or held rows: each decided group's own rollouts
                counters.rewards.extend(batch.rewards[g:g + 1, :counts[g]] for g in np.flatnonzero(final))
            for g in np.flatnonzero(final):
                group, keep, k = round_.groups[g], bool(decision.keep[g]), int(counts[g])
                fresh.append((group, keep, self._subset(group, decision, rollouts[g])))
                log_row = {"step": step, "prompt_id": group.prompt_id, "rewards": batch.rewards[g, :k].tolist(),
                           "response_tokens": batch.response_tokens[g, :k].tolist(), "kept": keep, "epoch": epoch,
                           "round": round_.index, "response_entropy": batch.response_entropy[g, :k].tolist(),
                           "kept_rollouts": rollouts[g, :k].tolist()}
                if self.selector.extends_groups:  # how stale each rollout is (methods.md §4.3)
                    steps = batch.rollout_step[g, :k] if batch.rollout_step is not None else np.full(k, step)
                    log_row["rollout_steps"] = steps.tolist()
                log_rows.append(log_row)
        replayed = [self.store.get(pid, gen_step) for pid, gen_step in dict.fromkeys(replay_keys)]
        for group, _, _ in fresh:
            self.store.put(group)  # as generated: a replay (ASTRAL) gets every rollout
        selected = [trained for _, keep, trained in fresh if keep]
        # a kept group none of whose rollouts was kept trains nothing (and has no advantage statistics)
        kept = self._align([g for g in selected if g.train_mask is None or g.train_mask.any()], step,
                           counters.rolled_out)
        train_groups = kept + [Group(g.prompt_id, g.gen_step, g.prompt, g.responses, g.behaviour_logprobs,
                                     g.rewards, replayed=True) for g in replayed]
        warmup = self.cfg.backend.lr_warmup_steps
        for param_group in self.optimizer.param_groups:  # a function of the step: resume-safe
            param_group["lr"] = self.trainer.lr * (min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0)
        update_start = time.perf_counter()
        stats = grpo_update(self.model, self.optimizer, train_groups, self.trainer, self.flop_model,
                            self.tokenizer.pad_token_id, self.ref_model)
        time_update = time.perf_counter() - update_start
        flops_select, _ = self.features.take_costs()
        reward_mean, zero_variance_frac = _reward_summary(counters.rewards, self.trainer.n_samples)
        # zero advantage: the rewards the advantage statistics are taken over are all equal
        zero_var = lambda g: bool(np.ptp(g.rewards if g.stats_mask is None else g.rewards[g.stats_mask]) == 0)  # noqa: E731
        row = {
            "step": step, "epoch": epoch, "prompts_considered": counters.considered,
            "prompts_rolled_out": counters.rolled_out, "prompts_probed": counters.probed,
            "prompts_dropped": selection.dropped,
            "groups_kept": len(selected), "groups_replayed": len(replayed), "gen_rounds": selection.gen_rounds,
            "samples": counters.samples, "prompt_tokens": counters.prompt_tokens,
            "generated_tokens": counters.generated_tokens, "trained_tokens": stats.trained_tokens,
            "flops_rollout": counters.flops_rollout, "flops_logprob": stats.flops_logprob,
            "flops_train": stats.flops_train, "flops_select": flops_select,
            "time_rollout_s": counters.time_rollout_s, "time_grade_s": counters.time_grade_s,
            "time_select_s": counters.time_select_s, "time_update_s": time_update,
            "reward_mean": reward_mean, "zero_variance_frac": zero_variance_frac,
            "kept_zero_variance": sum(zero_var(g) for g in train_groups),
            "partial": bool(partial),
            **{name: float("nan") for name in STEP_METRICS}, **self.selector.step_metrics(),
            "responses_kept": self._responses(selected),
            "responses_trained": self._responses(kept),
            # extras (not in LEDGER_COLUMNS): diagnostics of the update
            "time_logprob_s": stats.time_logprob_s,  # within time_update_s
            "lr": self.optimizer.param_groups[0]["lr"], "loss": stats.loss, "kl": stats.kl, "clip_frac": stats.clip_frac, "grad_norm": stats.grad_norm,
            "seq_len_mean": float(np.mean(stats.lengths)) if stats.lengths else float("nan"),
            "_elapsed_s": time.perf_counter() - start,
        }
        return row, log_rows


def _rows(flat: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Per-rollout values in generation order as [G, width] rows, zero where `valid` is False."""
    out = np.zeros(valid.shape, dtype=flat.dtype)
    out[valid] = flat
    return out


def _reward_summary(parts: list, n: int) -> tuple[float, float]:
    """(reward_mean, zero_variance_frac) over the rollouts of the groups decided this step.

    `parts` are [G, n] matrices, or [1, k] rows of groups of k rollouts (ragged, held); equal widths take
    the matrix path every fixed-group selector always took, so their ledgers keep their values bit for bit."""
    if not parts:
        parts = [np.zeros((0, n), dtype=np.float32)]
    if len({p.shape[1] for p in parts}) == 1:
        rewards = np.concatenate(parts)
        return (float(rewards.mean()) if rewards.size else float("nan")), zero_variance_fraction(rewards)
    total = sum(float(p.sum(dtype=np.float64)) for p in parts)
    count = sum(p.size for p in parts)
    flat_groups = [row for p in parts for row in p]
    return total / count, float(np.mean([np.ptp(row) == 0 for row in flat_groups]))
