"""The selection hook inside OpenRLHF's rollout: `LzeSamplesGenerator._generate_vllm` (openrlhf.md §9).

OpenRLHF 0.11.2's `SamplesGenerator._generate_vllm(dataloader_iter, num_prompts,
dynamic_filtering, **kw) -> (experiences, prompts_consumed, exhausted)` is where
it does its own DAPO filtering; we override it for the training iterator and
leave evaluation (`generate_eval_samples`, another iterator) to OpenRLHF.

For a training call we ignore OpenRLHF's shuffled prompt iterator: candidates
come from lze-bench's seeded data order (lze_bench.data_order.DataOrder), the same for
every selector, and prompts are fetched by id from OpenRLHF's own
`PromptDataset` (row i = prompt id i, checked at start-up). Each round
dispatches only the ids `select_rollout` chose with OpenRLHF's
`_dispatch_prompts_to_vllm`, turns each response into an `Experience` with
`_process_response_into_experience`, and hands the groups to the selector
(selection.StepDriver, the same selector calls as the local backend). The call
returns the samples of the step's update groups (kept, then replayed; n
consecutive samples each, at most `rollout.batch_size` groups), so
`generate_samples`' buffer, vLLM sleep/wake and the experience maker stay
OpenRLHF's. The trainer (context.plan_update) has already decided which of
their responses train (trim.py); a step where none does is handed to the
trainer's `on_untrained` (its ledger row, its checkpoint when due) and the
next step runs in the same call (OpenRLHF's fit would otherwise skip it
without a ledger hook). After `trainer.steps` steps it returns
`([], 0, True)`, which ends OpenRLHF's `fit` loop.

Seeded rollouts. OpenRLHF sends every request with one unseeded `SamplingParams`
(one request per sample: `generate_responses` runs `num_samples` agent calls
with the same params), so vLLM samples from a generator whose draws depend on
what else was batched: two identical runs, or a crashed run and its resume,
roll out different responses. Here every sample is its own request, seeded with
`rollout_seed(seed, step, prompt id, sample index, round)`: all of them are
recorded by the run (the ledger's step, the data order's ids, the generation
round of a fill selector), so a resumed run asks for exactly what the unbroken
run asked for. The dispatch itself stays OpenRLHF's (`_dispatch_prompts_to_vllm`:
its SamplingParams, its least-loaded engine choice); only the handles it calls
record the request (`_RecordedEngine`), which is then sent once per sample with
the seed set. A selector that asks for a number of rollouts per prompt
(`rollout(ids, counts)`: SPEED's screening and continuation, Reinforce-Ada's
rounds) gets `counts[i]` such requests for prompt i, sample indices 0..counts[i]-1;
a prompt extended twice in one step is extended in different rounds, and the
round is part of the seed, so no two requests of a run share one. What this
guarantees where: docs/cluster.md, "Reproducible rollouts". The tokenizer
OpenRLHF passes with every request goes to each engine once instead
(engine_tokenizer.py): Ray pickles a call's arguments anew for every call, and
one request per sample would otherwise pickle it n times per prompt.
"""

from __future__ import annotations

import copy
import hashlib

import numpy as np
import ray
from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

from lze_bench.backends.openrlhf.data import check_dataset_ids
from lze_bench.backends.openrlhf.engine_tokenizer import EngineTokenizers
from lze_bench.backends.openrlhf.selection import Group
from lze_bench.errors import LzeBenchError


def group_from_experiences(prompt_id: int, experiences: list) -> Group:
    """A Group from the n single-sample Experiences of one prompt (one vLLM ref)."""
    rewards, scores, response, total, grade_s = [], [], [], [], 0.0
    for e in experiences:
        if e.rewards is None:
            raise LzeBenchError(
                f"prompt {prompt_id}: OpenRLHF got no reward (see '[SingleTurnExecutor] Failed to fetch reward' in "
                "the vLLM actor logs; lze_bench must be importable there)"
            )
        rewards.append(float(e.rewards.reshape(-1)[0]))
        # reward_func.py's verdict (1/0) when it sent one; `rewards` is then trainer.reward_shape of it
        scores.append(None if getattr(e, "scores", None) is None else float(e.scores.reshape(-1)[0]))
        response.append(int(e.response_length.reshape(-1)[0]))
        total.append(int(e.total_length.reshape(-1)[0]))
        if "grade_time_s" in e.info:
            grade_s += float(e.info["grade_time_s"].reshape(-1)[0])
    return Group(
        prompt_id=int(prompt_id),
        rewards=np.asarray(rewards, dtype=np.float32),
        verdicts=None if None in scores or scores == rewards else np.asarray(scores, dtype=np.float32),
        response_tokens=np.asarray(response, dtype=np.int64),
        seq_lengths=np.asarray(total, dtype=np.int64),
        payload=list(experiences),
        grade_time_s=grade_s,
    )


def rollout_seed(seed: int, step: int, prompt_id: int, sample: int, round_: int) -> int:
    """The vLLM sampling seed of one response: a hash of what the run records, below 2**31."""
    key = f"{int(seed)}:{int(step)}:{int(prompt_id)}:{int(sample)}:{int(round_)}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") % (2**31 - 1)


def with_seed(params, seed: int):
    """A copy of OpenRLHF's SamplingParams with `seed` set (vLLM's `clone()` where it has one)."""
    clone = params.clone() if callable(getattr(params, "clone", None)) else copy.copy(params)
    clone.seed = int(seed)
    return clone


class _RecordedEngine:
    """Stands in for one rollout engine handle while OpenRLHF's `_dispatch_prompts_to_vllm` runs: the load query
    goes to the engine, the `generate_responses` request is recorded (engine, kwargs) instead of sent."""

    def __init__(self, engine, requests: list):
        self.get_num_unfinished_requests = engine.get_num_unfinished_requests
        self.generate_responses = self
        self._engine, self._requests = engine, requests

    def remote(self, **kwargs):
        self._requests.append((self._engine, kwargs))
        return len(self._requests) - 1


class LzeSamplesGenerator(SamplesGenerator):
    """OpenRLHF's generator with the selector deciding rollouts and kept groups."""

    def __init__(self, *args, context, on_untrained, **kwargs):
        super().__init__(*args, **kwargs)
        self.context = context
        self.on_untrained = on_untrained  # record -> None: the trainer books a step that trains nothing
        dataset = self.prompts_dataloader.dataset
        check_dataset_ids(list(dataset.labels))
        self._dataset = dataset
        self.records: list = []  # StepRecords of finished steps, taken by the trainer's ledger hook
        self._round = 0  # generation rounds of the current step so far (a rollout seed's `round`)
        self._engine_tokenizers = EngineTokenizers(self.tokenizer)  # each engine gets it once, not per request

    def generate_samples(self, **generate_kwargs):
        """OpenRLHF's, with the whole step in one update: it serves at most `rollout.batch_size x n` samples
        and keeps the rest in its buffer for the next call, but a selector that trains groups of another size
        (SPEED: n_init + n_continue per prompt) hands over more; the rest belongs to this step's update."""
        samples, pass_rate, consumed, exhausted = super().generate_samples(**generate_kwargs)
        if getattr(self, "_sample_buffer", None):
            samples, self._sample_buffer = list(samples) + list(self._sample_buffer), []
            exhausted = self._dataloader_iter is None
        return samples, pass_rate, consumed, exhausted

    def _generate_vllm(self, dataloader_iter, num_prompts: int, dynamic_filtering, **generate_kwargs):
        if dataloader_iter is not getattr(self, "_dataloader_iter", None):  # evaluation: OpenRLHF's own path
            return super()._generate_vllm(dataloader_iter, num_prompts, dynamic_filtering, **generate_kwargs)
        if dynamic_filtering:
            raise LzeBenchError("--algo.dynamic_filtering_enable is refused with lze-bench: the selector filters")
        if self.context.finished:
            return [], 0, True
        driver = self.context.driver
        if num_prompts != driver.batch_size:
            raise LzeBenchError(
                f"OpenRLHF asked for {num_prompts} prompts, the selector's batch is {driver.batch_size}; "
                "do not pass --rollout.vllm_generate_batch_size"
            )
        considered = 0
        while not self.context.finished:
            self.context.begin_step()
            self._round = 0
            record = driver.run_step(lambda ids, *counts: self._rollout(ids, *counts, **generate_kwargs))
            considered += record.prompts_considered
            if self.context.plan_update(record):
                self.records.append(record)
                return record.update_samples(), considered, False
            self.on_untrained(record)  # nothing trains this step: its row (and checkpoint) now, no optimizer step
        return [], considered, True

    def _rollout(self, ids: np.ndarray, counts: np.ndarray | None = None, **generate_kwargs) -> list:
        """Generate and grade `counts[i]` responses for id i (n without counts); one Group per id, in order."""
        prompts = [self._dataset.prompts[i] for i in ids]
        labels = [self._dataset.labels[i] for i in ids]
        images = [self._dataset.images[i] for i in ids]
        refs = self._dispatch_seeded(ids, prompts, labels, images, counts, **generate_kwargs)
        flat = ray.get([ref for prompt_refs in refs for ref in prompt_refs])  # one list of 1 response per ref
        responses, position = [], 0
        for prompt_refs in refs:
            responses.append([r for chunk in flat[position : position + len(prompt_refs)] for r in chunk])
            position += len(prompt_refs)
        groups = []
        for prompt_id, samples in zip(ids, responses):
            experiences = [self._process_response_into_experience(r, **generate_kwargs) for r in samples]
            groups.append(group_from_experiences(int(prompt_id), experiences))
        self.context.add_response_features(groups)
        return groups

    def _dispatch_seeded(self, ids, prompts, labels, images, counts=None, **generate_kwargs) -> list[list]:
        """OpenRLHF's dispatch, then one request per sample with its rollout seed: per prompt, its n refs
        (`counts[i]` refs for a selector that sets rollouts per prompt: speed, reinforce_ada)."""
        requests: list = []
        engines = self.vllm_engines
        self.vllm_engines = [_RecordedEngine(engine, requests) for engine in engines]
        try:
            self._dispatch_prompts_to_vllm(prompts, labels, images=images, **generate_kwargs)
        finally:
            self.vllm_engines = engines
        if len(requests) != len(ids):
            raise LzeBenchError(f"OpenRLHF's dispatch made {len(requests)} requests for {len(ids)} prompts")
        step, round_ = self.context.driver.step, self._round
        self._round += 1
        refs = []
        for i, (prompt_id, (engine, kwargs)) in enumerate(zip(ids, requests)):
            params = kwargs["sampling_params"]
            kwargs = {**kwargs, "hf_tokenizer": self._engine_tokenizers.key_for(engine)}
            n = int(kwargs.get("num_samples", 1)) if counts is None else int(counts[i])
            refs.append([engine.generate_responses.remote(
                **{**kwargs, "num_samples": 1, "sampling_params": with_seed(
                    params, rollout_seed(self.context.cfg.seed, step, int(prompt_id), sample, round_))})
                for sample in range(n)])
        return refs

    def pending_record(self):
        """The record of the step whose samples the experience maker is processing."""
        if not self.records:
            raise LzeBenchError("OpenRLHF made experiences for a step the selector did not produce")
        return self.records[0]

    def take_record(self):
        """The record of the step just trained (called once per OpenRLHF step)."""
        if not self.records:
            raise LzeBenchError("OpenRLHF trained a step the selector did not produce")
        return self.records.pop(0)
