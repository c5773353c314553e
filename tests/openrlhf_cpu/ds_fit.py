"""`python ds_fit.py CONFIG.json`: our policy actor's `fit` on a real DeepSpeed engine, steps of changing size (tests only).

Run by tests/test_openrlhf_deepspeed.py in a subprocess (its own Ray driver, so
the pytest process never imports the vLLM stub or joins a cluster). The config
names the Ray address, the tiny model, the ZeRO stage, the OpenRLHF flags
(from lze-bench's own `openrlhf_flags`) and the micro-batches per rank of each
training step. What runs is OpenRLHF's: `get_strategy`, `RayActorGroup` with
two ranks of `make_policy_actor(DeepSpeedCpuPolicyActor)` (lze_bench's actor on
OpenRLHF's `PolicyModelActor`), `forward` for the old log-probs, `append`,
and the controller's sleep sequence `reload_states -> fit -> offload_states`.

Each step gets fresh samples (prompt + response tokens of varying lengths,
GRPO-style per-sample advantages), dealt to the two ranks as the trainer deals
them. The reference update is computed in this process on exactly that step's
samples, from the engine's initial weights, in float32 with OpenRLHF's own
`Actor` log-probs, `PolicyLoss` (token-mean over the whole step: one window,
one clip, one normaliser), OpenRLHF's parameter groups, gradient clipping at
`actor.max_norm` and `torch.optim.AdamW` with the run's lr, betas, eps and
weight decay (DeepSpeed's FusedAdam in AdamW mode follows the same rule).

Writes a torch file: per step the engine weights of each rank, the reference
weights, and each rank's probe records (DeepSpeed `global_steps` after every
micro-batch).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def make_step(generator, ranks: int, per_rank: int, vocab: int):
    """Per rank: (sequences, attention_mask, action_mask, advantages), right-padded, `per_rank` samples."""
    import torch

    from openrlhf.utils.utils import zero_pad_sequences

    out = []
    for _ in range(ranks):
        seqs, attention, actions, advantages = [], [], [], []
        for _ in range(per_rank):
            prompt = int(torch.randint(3, 7, (1,), generator=generator))
            length = prompt + int(torch.randint(2, 10, (1,), generator=generator))
            seqs.append(torch.randint(4, vocab, (length,), generator=generator))
            attention.append(torch.ones(length, dtype=torch.long))
            mask = torch.zeros(length - 1, dtype=torch.long)
            mask[prompt - 1:] = 1  # logits at j predict token j + 1: the response tokens
            actions.append(mask)
            advantages.append(torch.full((length - 1,), float(torch.randn(1, generator=generator))))
        out.append(tuple(zero_pad_sequences(x, "right", stack=True) for x in (seqs, attention, actions, advantages)))
    return out


def reference(args, model_path: str, starts: list[dict], steps: list, old_logps: list) -> list[dict]:
    """Float32 weights after each step of the reference update, each step from the engine's weights before it.

    Mixed precision as DeepSpeed's bf16 mode: bf16 weights for the forward and
    backward, float32 master weights, gradients and AdamW state. The master
    weights restart from the engine's (bf16) weights at every step, so a step's
    error is that step's alone; the AdamW moments are the reference's own,
    carried across steps (they follow the same gradients).
    """
    import torch
    from transformers import AutoModelForCausalLM

    from openrlhf.models import Actor
    from openrlhf.models.loss import PolicyLoss
    from openrlhf.utils.deepspeed.deepspeed_utils import get_optimizer_grouped_parameters
    from openrlhf.utils.utils import zero_pad_sequences

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.bfloat16)
    master = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    actor = Actor(model, packing_samples=False, temperature=args.rollout.temperature)
    actor.packing_samples = False
    adam = args.actor.adam
    optimizer = torch.optim.AdamW(get_optimizer_grouped_parameters(master, adam.weight_decay), lr=adam.lr,
                                  betas=tuple(adam.betas), eps=adam.eps)
    loss_fn = PolicyLoss(clip_eps_low=args.actor.eps_clip_low_high[0], clip_eps_high=args.actor.eps_clip_low_high[1],
                         token_level_loss=args.actor.loss_agg_mode == "token-mean")
    low, high = dict(model.named_parameters()), dict(master.named_parameters())
    out = []
    for start, ranks, olds in zip(starts, steps, old_logps):
        with torch.no_grad():
            for name, param in high.items():
                param.copy_(start[name])
        rows = [(seq[i], att[i], act[i], adv[i], old[i]) for (seq, att, act, adv), old in zip(ranks, olds)
                for i in range(seq.shape[0])]
        seq, att, act, adv, old = (zero_pad_sequences([r[k] for r in rows], "right", stack=True) for k in range(5))
        total = act.sum().float()
        for _ in range(int(args.train.max_epochs)):
            with torch.no_grad():
                for name, param in low.items():
                    param.copy_(high[name])
            model.zero_grad()
            logps = actor(seq, act, attention_mask=att)
            loss, *_ = loss_fn(logps, old, adv, action_mask=act, dp_size=1, batch_num_tokens=total)
            loss.backward()
            for name, param in high.items():
                param.grad = low[name].grad.float()
            if args.actor.max_norm > 0:
                torch.nn.utils.clip_grad_norm_(master.parameters(), args.actor.max_norm)
            optimizer.step()
            optimizer.zero_grad()
        out.append({k: v.detach().clone() for k, v in high.items()})
    return out


def main(config_path: str) -> None:
    import ray
    import torch

    config = json.loads(Path(config_path).read_text())
    from lze_cpu_standins.fixtures import openrlhf_args

    args = openrlhf_args(config["flags"])
    ray.init(address=config["ray_address"], log_to_driver=True)
    from openrlhf.trainer.ray.launcher import RayActorGroup
    from openrlhf.utils import get_strategy

    from lze_bench.backends.openrlhf.actor import make_policy_actor
    from lze_cpu_standins.ds_policy import DeepSpeedCpuPolicyActor

    ranks = 2
    group = RayActorGroup(1, ranks, make_policy_actor(DeepSpeedCpuPolicyActor), num_gpus_per_actor=1)
    ray.get(group.async_init_model_from_pretrained(get_strategy(args), config["model"], len(config["micro_batches"])))
    initial = ray.get(group.async_run_method("lze_test_state"))
    features = _features(group, config, Path(config["out"]).parent) if config.get("features") else None
    generator = torch.Generator().manual_seed(1234)
    micro = int(args.train.micro_batch_size)
    vocab = int(config["vocab"])
    engine, steps, olds = [], [], []
    for count in config["micro_batches"]:
        data = make_step(generator, ranks, count * micro, vocab)
        # old log-probs: OpenRLHF's forward on the (offloaded, as in make_experience) actors
        logps = ray.get(group.async_run_method_batch("forward", sequences=[d[0] for d in data],
                                                      action_mask=[d[2] for d in data],
                                                      attention_mask=[d[1] for d in data]))
        logps = [item for chunk in logps for item in chunk]
        experiences = [_experience(d, old) for d, old in zip(data, logps)]
        ray.get(group.async_run_method_batch("append", experience=experiences))
        ray.get(group.async_run_method("reload_states"))
        ray.get(group.async_run_method("fit"))
        ray.get(group.async_run_method("offload_states"))
        engine.append(ray.get(group.async_run_method("lze_test_state")))
        steps.append(data)
        olds.append(logps)
    probes = ray.get(group.async_run_method("lze_test_probe"))
    expected = reference(args, config["model"], [initial[0]] + [e[0] for e in engine[:-1]], steps, olds)
    torch.save({"initial": initial, "engine": engine, "reference": expected, "probes": probes,
                "micro_batches": config["micro_batches"], "features": features}, config["out"])
    ray.shutdown()


def _features(group, config: dict, run_dir: Path) -> dict:
    """hive's and astral's features from the ranks, through the controller's own code (features.ActorFeatures
    over dispatch.call_ranks), on the initial weights with the DeepSpeed states offloaded (as after init)."""
    import numpy as np

    from lze_bench.backends.openrlhf.dispatch import call_ranks
    from lze_bench.backends.openrlhf.features import ActorFeatures
    from lze_bench.flops import FlopModel
    from transformers import AutoConfig

    asked = config["features"]
    prompts = asked["prompts"]
    feats = ActorFeatures(lambda method, **lists: call_ranks(group, method, 1, **lists),
                          lambda ids: [prompts[int(i)] for i in ids],
                          FlopModel.from_hf_config(AutoConfig.from_pretrained(config["model"])),
                          asked["temperature"], run_dir, len(prompts), dp_size=2, micro_batch_size=2)
    ids = np.arange(len(prompts))
    responses = asked["responses"]
    # astral's learned head: a frozen encoder (here a fresh copy of the initial weights) loaded on the ZeRO-3
    # ranks for the call, in chunks of 2 questions dealt over both ranks (head.ClusterEncoder)
    from lze_bench.backends.openrlhf.head import ClusterEncoder

    encoder = ClusterEncoder(config["model"], lambda method, **lists: call_ranks(group, method, 1, **lists), 2,
                             chunk=2)
    return {"prompt_entropy": feats("prompt_entropy", ids), "prompt_embedding": feats("prompt_embedding", ids),
            "response_entropy": feats.response_entropy(responses["sequences"], responses["starts"],
                                                       responses["ends"]),
            "encoder": encoder.embed(asked["questions"])}


def _experience(data, old_logps):
    from openrlhf.trainer.ppo_utils.experience import Experience

    sequences, attention, actions, advantages = data
    return Experience(sequences=sequences, attention_mask=attention, action_mask=actions.bool(),
                      action_log_probs=old_logps, advantages=advantages, info={})


if __name__ == "__main__":
    main(sys.argv[1])
