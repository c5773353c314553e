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
  generated.
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
                 features, store, prompts, answers, device, begun_epoch: int = -1):
        self.cfg, self.selector, self.stream = cfg, selector, stream
        self.model, self.tokenizer, self.optimizer, self.ref_model = model, tokenizer, optimizer, ref_model
        self.grader, self.flop_model, self.features, self.store = grader, flop_model, features, store
        self.prompts, self.answers, self.device = prompts, answers, device
        self.begun_epoch = begun_epoch
        self.seed, self.trainer = int(cfg.seed), cfg.trainer

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

    def _responses(self, groups: list[Group]) -> int:
        """Rollouts of these groups that reach the update: a group's train_mask, else all n."""
        return sum(self.trainer.n_samples if g.train_mask is None else int(g.train_mask.sum()) for g in groups)

    @staticmethod
    def _subset(group: Group, decision, row: np.ndarray) -> Group:
        """The group as the update sees it: with a selector's kept rollouts (PODS) when it chose some."""
        if decision.keep_rollouts is None:
            return group
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

        def rollout(ids, round_index, probe):
            groups, batch = self.rollout(ids, step, KIND_PROBE if probe else KIND_TRAIN, round_index, counters)
            if probe:
                counters.probed += len(ids)
            return groups, batch

        selection, self.begun_epoch = run_selection(
            self.selector, self.stream, seed=self.seed, step=step, batch_size=self.trainer.batch_size,
            candidates_per_step=self.cfg.data.candidates_per_step, max_rounds=self.cfg.backend.max_gen_rounds,
            group_size=self.trainer.n_samples, rollout=rollout, features=self.features, begun_epoch=self.begun_epoch)
        counters.considered, counters.rolled_out = selection.considered, selection.rolled_out
        counters.time_select_s = selection.time_select_s
        epoch, partial, replay_keys = selection.epoch, selection.partial, selection.replay_keys()
        fresh, log_rows = [], []
        for round_ in selection.rounds:
            batch, decision = round_.batch, round_.decision
            counters.rewards.append(batch.rewards)
            rollouts = decision.rollout_mask(batch.group_size)
            for group, keep, row, tokens, entropy in zip(round_.groups, decision.keep, rollouts,
                                                         batch.response_tokens, batch.response_entropy):
                fresh.append((group, bool(keep), self._subset(group, decision, row)))
                log_rows.append({"step": step, "prompt_id": group.prompt_id, "rewards": group.rewards.tolist(),
                                 "response_tokens": tokens.tolist(), "kept": bool(keep), "epoch": epoch,
                                 "round": round_.index, "response_entropy": entropy.tolist(),
                                 "kept_rollouts": row.tolist()})
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
        rewards = np.concatenate(counters.rewards) if counters.rewards else np.zeros((0, self.trainer.n_samples))
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
            "reward_mean": float(rewards.mean()) if rewards.size else float("nan"),
            "zero_variance_frac": zero_variance_fraction(rewards),
            "kept_zero_variance": sum(zero_var(g) for g in train_groups),
            "partial": bool(partial),
            **{name: float("nan") for name in STEP_METRICS}, **self.selector.step_metrics(),
            "responses_kept": self._responses(selected),
            "responses_trained": self._responses(kept),
            # extras (not in LEDGER_COLUMNS): diagnostics of the update
            "lr": self.optimizer.param_groups[0]["lr"], "loss": stats.loss, "kl": stats.kl, "clip_frac": stats.clip_frac, "grad_norm": stats.grad_norm,
            "seq_len_mean": float(np.mean(stats.lengths)) if stats.lengths else float("nan"),
            "_elapsed_s": time.perf_counter() - start,
        }
        return row, log_rows
