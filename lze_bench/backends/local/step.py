"""One training step of the local backend, in the order of design.md "One training step".

`[begin_epoch]` -> `[probe -> roll out -> observe_probe]` -> round r = 0, 1, ...:
candidates -> `select_rollout` -> roll out n samples + grade -> `observe` ->
`select_update` (-> more rounds while `more > 0` and `backend.max_gen_rounds`
allows) -> GRPO update on the kept groups + replayed groups -> one ledger row
and one rollout-log row per rolled-out prompt. Selector randomness:
`step_rng(seed, step, TAG, round)` (selectors.md §0). Sampling randomness: a
torch generator seeded from (seed, step, kind, round), so a resumed run draws
what an unbroken one would.

Choices where the specs are silent:
- the first round offers `data.candidates_per_step`, else the selector's
  `candidates_per_step(B)`, with budget `rollout_budget(B)`; a later round
  offers the next `round_candidates(more)` ids of the stream (`more`, HIVE:
  `pool_factor x more`) with budget `more`;
- a round in which the selector rolls out nothing ends the step (no observe /
  select_update on an empty batch), except for selectors that sample in
  rounds (`samples_in_rounds`: greso, hive), whose skip rules can empty a
  round: they see the empty batch and say how many more to examine; a step
  that keeps nothing makes no update but still gets its ledger row;
- when the backend cap (`max_gen_rounds`) stops a selector that still wants
  more, the step updates on what it kept and the row's `partial` is true;
- probe rollouts count in `prompts_probed`, `samples`, the token columns and
  `flops_rollout`, not in `reward_mean` / `zero_variance_frac` (fresh groups
  only), and are not written to the rollout log (they are not candidates);
- replay keys are resolved before this step's groups enter the store, so a
  prompt rolled out again this step can still replay its older group;
- `selector.align_minibatch=true` (lze): the kept groups' responses are cut
  to the selector's `align_mask` after the advantages (authors' trainer,
  selectors.md §5); `groups_kept` stays the selector's choice,
  `responses_kept` / `responses_trained` and the trained tokens and FLOPs
  book what was trained.
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
from lze_bench.selectors import RolloutBatch, UpdateDecision, step_rng
from lze_bench.selectors.base import (STEP_METRICS, TAG_BEGIN_EPOCH, TAG_PROBE, TAG_SELECT_ROLLOUT,
                                     TAG_SELECT_UPDATE)

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
                 features, store, prompts, answers, device, begun_epoch: int = -1):
        self.cfg, self.selector, self.stream = cfg, selector, stream
        self.model, self.tokenizer, self.optimizer, self.ref_model = model, tokenizer, optimizer, ref_model
        self.grader, self.flop_model, self.features, self.store = grader, flop_model, features, store
        self.prompts, self.answers, self.device = prompts, answers, device
        self.begun_epoch = begun_epoch
        self.seed, self.trainer = int(cfg.seed), cfg.trainer
        batch = self.trainer.batch_size
        self.first_count = cfg.data.candidates_per_step or selector.candidates_per_step(batch)
        self.first_budget = selector.rollout_budget(batch)

    # --- rollouts ----------------------------------------------------------------
    def _generator(self, step: int, kind: int, round_index: int):
        import torch

        seed = int(np.random.default_rng([self.seed, step, 100 + kind, round_index]).integers(2**62))
        generator = torch.Generator(device=self.device)
        generator.manual_seed(seed)
        return generator

    def rollout(self, ids: np.ndarray, step: int, kind: int, round_index: int, counters: StepCounters):
        n = self.trainer.n_samples
        flat = np.repeat(ids, n)
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
        rewards = np.array([1.0 if g.correct else 0.0 for g in grades], dtype=np.float32).reshape(len(ids), n)
        groups = [
            Group(int(pid), step, self.prompts[pid], gen.response_ids[g * n:(g + 1) * n],
                  gen.logprobs[g * n:(g + 1) * n], rewards[g])
            for g, pid in enumerate(ids)
        ]
        batch = RolloutBatch(prompt_ids=ids, rewards=rewards, step=step,
                             response_tokens=response_tokens.reshape(len(ids), n),
                             prompt_tokens=gen.prompt_tokens.reshape(len(ids), n)[:, 0],
                             response_entropy=gen.entropy.reshape(len(ids), n))
        return groups, batch

    # --- selector calls (timed) ---------------------------------------------------
    def _timed(self, counters: StepCounters, fn, *args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            counters.time_select_s += time.perf_counter() - start

    def _begin(self, step: int, counters: StepCounters) -> int:
        full = self.selector.candidate_mode == "full"
        epoch = self.stream.prepare(0 if full else self.first_count)
        if epoch != self.begun_epoch:
            self._timed(counters, self.selector.begin_epoch, epoch, step_rng(self.seed, step, TAG_BEGIN_EPOCH))
            self.begun_epoch = epoch
        probe_ids = self._timed(counters, self.selector.probe, step, step_rng(self.seed, step, TAG_PROBE))
        if probe_ids is not None and len(probe_ids):
            probe_ids = np.asarray(probe_ids, dtype=np.int64)
            _, batch = self.rollout(probe_ids, step, KIND_PROBE, 0, counters)
            counters.probed += len(probe_ids)
            self._timed(counters, self.selector.observe_probe, batch)
        return epoch

    def _candidates(self, count: int) -> np.ndarray:
        if self.selector.candidate_mode == "full":
            return np.arange(self.stream.num_prompts, dtype=np.int64)
        return self.stream.take(count)

    def _select(self, candidates, budget, step, round_index, counters) -> np.ndarray:
        rng = step_rng(self.seed, step, TAG_SELECT_ROLLOUT, round_index)
        ids = self._timed(counters, self.selector.select_rollout, candidates, budget, step, rng, self.features)
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size > budget or not np.isin(ids, candidates).all() or np.unique(ids).size != ids.size:
            raise LzeBenchError(f"selector {self.selector.name!r} returned ids that are not distinct candidates "
                                f"within budget {budget} at step {step}")
        if self.selector.candidate_mode == "full":
            self.stream.advance(ids.size)
        return ids

    def _align(self, kept: list, step: int, rolled_out: int) -> list:
        """The kept groups with the responses an `align_mask` selector (lze) leaves for training."""
        align = getattr(self.selector, "align_mask", None)
        n = self.trainer.n_samples
        mask = None if align is None else align(len(kept), n, rolled_out * n,
                                                step_rng(self.seed, step, TAG_SELECT_UPDATE, ALIGN_ROUND))
        if mask is None:
            return kept
        return [dataclasses.replace(group, train_mask=row) for group, row in zip(kept, mask) if row.any()]

    def _empty_batch(self, step: int) -> RolloutBatch:
        n = self.trainer.n_samples
        return RolloutBatch(prompt_ids=np.zeros(0, dtype=np.int64), rewards=np.zeros((0, n), dtype=np.float32),
                            step=step, response_tokens=np.zeros((0, n), dtype=np.int32),
                            prompt_tokens=np.zeros(0, dtype=np.int32), response_entropy=np.zeros((0, n)))

    # --- the step ------------------------------------------------------------------
    def run(self, step: int):
        start = time.perf_counter()
        counters = StepCounters()
        epoch = self._begin(step, counters)
        fresh, log_rows, replay_keys, partial = [], [], [], False
        count, budget, round_index = self.first_count, self.first_budget, 0
        while True:
            candidates = self._candidates(count)
            counters.considered += candidates.size
            ids = self._select(candidates, budget, step, round_index, counters)
            if ids.size == 0 and not self.selector.samples_in_rounds:
                break
            groups, batch = (self.rollout(ids, step, KIND_TRAIN, round_index, counters) if ids.size
                             else ([], self._empty_batch(step)))
            counters.rolled_out += ids.size
            counters.rewards.append(batch.rewards)
            self._timed(counters, self.selector.observe, batch)
            rng = step_rng(self.seed, step, TAG_SELECT_UPDATE, round_index)
            decision: UpdateDecision = self._timed(counters, self.selector.select_update, batch, step, rng)
            if decision.keep.size != ids.size:
                raise LzeBenchError(f"selector {self.selector.name!r}: keep mask has {decision.keep.size} entries "
                                    f"for {ids.size} groups")
            partial |= decision.partial
            replay_keys.extend(map(tuple, decision.replay.tolist()))
            for group, keep, tokens, entropy in zip(groups, decision.keep, batch.response_tokens, batch.response_entropy):
                fresh.append((group, bool(keep)))
                log_rows.append({"step": step, "prompt_id": group.prompt_id, "rewards": group.rewards.tolist(),
                                 "response_tokens": tokens.tolist(), "kept": bool(keep), "epoch": epoch,
                                 "round": round_index, "response_entropy": entropy.tolist()})
            if decision.more <= 0:
                break
            if round_index + 1 >= self.cfg.backend.max_gen_rounds:
                partial = True
                break
            budget = int(decision.more)
            count = self.selector.round_candidates(budget)
            round_index += 1
        replayed = [self.store.get(pid, gen_step) for pid, gen_step in dict.fromkeys(replay_keys)]
        for group, _ in fresh:
            self.store.put(group)
        selected = [group for group, keep in fresh if keep]
        kept = self._align(selected, step, counters.rolled_out)
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
        rewards = np.concatenate(counters.rewards) if counters.rewards else np.zeros((0, self.trainer.n_samples))
        zero_var = lambda r: bool(r.max() <= r.min())  # noqa: E731
        row = {
            "step": step, "epoch": epoch, "prompts_considered": counters.considered,
            "prompts_rolled_out": counters.rolled_out, "prompts_probed": counters.probed,
            "groups_kept": len(selected), "groups_replayed": len(replayed), "gen_rounds": round_index + 1,
            "samples": counters.samples, "prompt_tokens": counters.prompt_tokens,
            "generated_tokens": counters.generated_tokens, "trained_tokens": stats.trained_tokens,
            "flops_rollout": counters.flops_rollout, "flops_logprob": stats.flops_logprob,
            "flops_train": stats.flops_train, "flops_select": flops_select,
            "time_rollout_s": counters.time_rollout_s, "time_grade_s": counters.time_grade_s,
            "time_select_s": counters.time_select_s, "time_update_s": time_update,
            "reward_mean": float(rewards.mean()) if rewards.size else float("nan"),
            "zero_variance_frac": zero_variance_fraction(rewards),
            "kept_zero_variance": sum(zero_var(g.rewards) for g in train_groups),
            "partial": bool(partial),
            **{name: float("nan") for name in STEP_METRICS}, **self.selector.step_metrics(),
            "responses_kept": len(selected) * self.trainer.n_samples,
            "responses_trained": sum(self.trainer.n_samples if g.train_mask is None else int(g.train_mask.sum())
                                     for g in kept),
            # extras (not in LEDGER_COLUMNS): diagnostics of the update
            "lr": self.optimizer.param_groups[0]["lr"], "loss": stats.loss, "kl": stats.kl, "clip_frac": stats.clip_frac, "grad_norm": stats.grad_norm,
            "seq_len_mean": float(np.mean(stats.lengths)) if stats.lengths else float("nan"),
            "_elapsed_s": time.perf_counter() - start,
        }
        return row, log_rows
