"""`CpuPolicyActor`: OpenRLHF's policy actor without DeepSpeed, for CPU runs (tests only).

The methods OpenRLHF's controller calls on `PolicyModelActor` (0.11.2,
trainer/ray/ppo_actor.py): `init_model_from_pretrained`, `forward` (old
log-probs in the experience maker), `append`, `fit`, `broadcast_to_vllm`,
`reload_states`/`offload_states`, `save_checkpoint`, `get_checkpoint_states`,
`save_model`, `empty_cache`, plus `execute_batch` from OpenRLHF's
`BaseModelActor`. The model math is OpenRLHF's: `openrlhf.models.Actor`
computes log-probs, `NaiveReplayBuffer` cuts micro-batches, `PolicyLoss` is
the clipped policy loss; one torch Adam step per PPO epoch over the whole
buffer (train.batch_size = all samples of the step, as lze-bench configures).

Checkpoints mimic DeepSpeed's layout so lze-bench's resume logic sees what it
sees on a GPU: `{ckpt.path}/_actor/<tag>/state.pt` then the `latest` file
(written last, as `engine.save_checkpoint` does), at most `ckpt.max_num` tags;
the HF copy in `{ckpt.path}/<tag>_hf`. No `latest` -> nothing is loaded and
`get_checkpoint_states()` is `{}` (what `DeepspeedStrategy.load_ckpt` returns).

What it trained is appended to `policy_log.jsonl` beside `ckpt.path`, one line
per update: samples, micro-batch sizes, tokens (attention-mask sums) per epoch,
epochs. The test checks the ledger against it (what OpenRLHF really delivered).

Crash injection: a file `crash_at_update` holding K beside `ckpt.path` (the
run's `openrlhf/` folder) makes `fit` raise before update K+1 (K = updates
already done), i.e. a crash after step K. A file, not an env var: Ray actors
get their environment from the cluster, not from the driver.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import ray
import torch
from openrlhf.models import Actor
from openrlhf.models.loss import PolicyLoss
from openrlhf.trainer.ppo_utils.replay_buffer import NaiveReplayBuffer
from openrlhf.trainer.ray.launcher import BaseModelActor
from torch.utils.data import DataLoader

CRASH_FILE = "crash_at_update"
POLICY_LOG = "policy_log.jsonl"


def _cpu_replay_buffer(micro_batch_size: int) -> NaiveReplayBuffer:
    """OpenRLHF's buffer; its __init__ asks CUDA for a device, which a CPU build refuses: answer cpu."""
    from unittest import mock

    with mock.patch.object(torch.cuda, "current_device", lambda: 0):
        buffer = NaiveReplayBuffer(micro_batch_size, 0, True, False, False)
    buffer.target_device = torch.device("cpu")
    return buffer


class _CpuPolicyActor(BaseModelActor):
    def init_model_from_pretrained(self, strategy, pretrain, max_steps=None, vllm_engines=None):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(1)
        self.strategy = strategy
        args = self.args = strategy.args
        torch.manual_seed(args.train.seed)
        model = AutoModelForCausalLM.from_pretrained(pretrain, dtype=torch.float32)
        self.actor = Actor(model, packing_samples=False, temperature=args.rollout.temperature)
        self.actor.packing_samples = False  # Actor sets it only when it loads the model itself
        self.tokenizer = AutoTokenizer.from_pretrained(pretrain)
        self.vllm_engines = vllm_engines
        adam = args.actor.adam
        self.optimizer = torch.optim.Adam(self.actor.parameters(), lr=adam.lr, betas=tuple(adam.betas),
                                          weight_decay=adam.weight_decay)
        advantage = args.algo.advantage  # the IS correction astral's replay uses, as OpenRLHF's ActorPPOTrainer
        self.loss_fn = PolicyLoss(
            clip_eps_low=args.actor.eps_clip_low_high[0],
            clip_eps_high=args.actor.eps_clip_low_high[1],
            token_level_loss=args.actor.loss_agg_mode == "token-mean",
            is_correction_level=advantage.is_correction_level,
            is_correction_mode=advantage.is_correction_mode,
            is_correction_gating=advantage.is_correction_gating,
            is_correction_threshold=advantage.is_correction_threshold,
        )
        self.buffer = _cpu_replay_buffer(args.train.micro_batch_size)
        self.updates = 0
        self.checkpoint_states = {}
        ckpt = Path(args.ckpt.path) / "_actor"
        if args.ckpt.load_enable and ckpt.exists():
            latest = ckpt / "latest"
            if latest.is_file():
                state = torch.load(ckpt / latest.read_text().strip() / "state.pt", weights_only=False)
                self.actor.model.load_state_dict(state["model"])
                self.optimizer.load_state_dict(state["optimizer"])
                self.updates = int(state["updates"])
                self.checkpoint_states = state["client_states"]

    def forward(self, sequences, action_mask=None, attention_mask=None, packed_seq_lens=None,
                mm_train_inputs_list=None):
        self.actor.eval()
        with torch.no_grad():
            log_probs = self.actor(sequences, action_mask, attention_mask)
        self.actor.train()
        return log_probs.to("cpu")

    def append(self, experience):
        self.buffer.append(experience)

    def fit(self, kl_ctl: float = 0):
        crash = Path(self.args.ckpt.path).parent / CRASH_FILE
        if crash.is_file() and self.updates == int(crash.read_text()):
            raise RuntimeError(f"injected crash before update {self.updates + 1} ({crash})")
        if len(self.buffer) % self.buffer.sample_batch_size:
            raise RuntimeError(f"{len(self.buffer)} samples do not make whole micro-batches of "
                               f"{self.buffer.sample_batch_size}")
        loader = DataLoader(self.buffer, batch_size=self.buffer.sample_batch_size, shuffle=False, drop_last=True,
                            collate_fn=self.buffer.collate_fn)
        losses, sizes, seen_tokens = [], [], 0
        samples = len(self.buffer)
        for _ in range(self.args.train.max_epochs):
            batches = list(loader)
            tokens = float(sum(b.action_mask.sum().item() for b in batches))
            seen_tokens += int(sum(b.attention_mask.sum().item() for b in batches))
            self.optimizer.zero_grad()
            for batch in batches:
                sizes.append(int(batch.sequences.shape[0]))
                log_probs = self.actor(batch.sequences, batch.action_mask, attention_mask=batch.attention_mask)
                loss, *_ = self.loss_fn(log_probs, batch.action_log_probs, batch.advantages,
                                        action_mask=batch.action_mask, rollout_log_probs=batch.rollout_log_probs,
                                        batch_num_tokens=tokens)
                loss.backward()
                losses.append(float(loss))
            if self.args.actor.max_norm > 0:
                torch.nn.utils.clip_grad_norm_(self.actor.parameters(), self.args.actor.max_norm)
            self.optimizer.step()
        recentred = bool(samples) and self.buffer.items[0].rollout_log_probs is not None
        self.buffer.clear()
        self.updates += 1
        line = {"update": self.updates, "samples": samples, "micro_batches": sizes, "tokens": seen_tokens,
                "epochs": int(self.args.train.max_epochs),
                "recentred": recentred}
        with open(Path(self.args.ckpt.path).parent / POLICY_LOG, "a") as handle:
            handle.write(json.dumps(line) + "\n")
        return {"policy_loss": sum(losses), "actor_lr": self.optimizer.param_groups[0]["lr"]}

    def broadcast_to_vllm(self):
        state = {k: v.detach().clone() for k, v in self.actor.model.state_dict().items()}
        ray.get([engine.load_weights.remote(state) for engine in self.vllm_engines or []])

    def reload_states(self):
        pass

    def offload_states(self):
        pass

    def empty_cache(self):
        pass

    def get_checkpoint_states(self):
        return self.checkpoint_states

    def save_checkpoint(self, tag, client_states=None, metric_value=None, metric_key=None):
        args = self.args
        root = Path(args.ckpt.path) / "_actor"
        root.mkdir(parents=True, exist_ok=True)
        tags = sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
        for old in tags[: max(0, len(tags) - args.ckpt.max_num + 1)]:
            shutil.rmtree(old)
        (root / tag).mkdir(exist_ok=True)
        torch.save({"model": self.actor.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                    "updates": self.updates, "client_states": dict(client_states or {})}, root / tag / "state.pt")
        (root / "latest").write_text(tag)
        if args.ckpt.save_hf:
            self._save_hf(Path(args.ckpt.path) / f"{tag}_hf")

    def save_model(self):
        self._save_hf(Path(self.args.ckpt.output_dir))

    def _save_hf(self, path: Path):
        path.mkdir(parents=True, exist_ok=True)
        self.actor.model.save_pretrained(str(path))
        self.tokenizer.save_pretrained(str(path))


CpuPolicyActor = ray.remote(num_gpus=1)(_CpuPolicyActor)
