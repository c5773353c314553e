"""Test-side pieces of the CPU e2e run: a tiny HF policy, a prompt set, a private Ray cluster.

* `save_tiny_policy(path, prompts)`: a 2-layer Llama with a character tokenizer
  plus two answer tokens `\\boxed{0}` / `\\boxed{1}`, warm-started for a few
  steps so that after a prompt it answers with one of them about half of the
  time, then EOS. Rewards from our real grader then vary within a group, so
  every selector has something to decide.
* `write_prompts(root, n)`: a GSM8K-format file (`root/gsm8k/train.jsonl`,
  gold `#### 0|1`), loaded by lze-bench's own `task=gsm8k`.
* `RayCluster`: `python -m ray.scripts.scripts start --head --block` with free
  ports and its own temp dir, with fake GPU resources (OpenRLHF's placement
  groups ask for GPUs; the stand-ins never touch one); stopped by terminating
  that one process (Ray's own shutdown hook kills the cluster's processes), so
  a neighbour's Ray on the same machine is never touched.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ANSWERS = ("\\boxed{0}", "\\boxed{1}")
CHARS = ["\n"] + [chr(c) for c in range(32, 127)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_prompts(root: Path, count: int, gold=lambda i: i % 2) -> Path:
    """`gold(i)`: prompt i's answer (the tiny policy answers 0 or 1; any other gold makes every reward 0)."""
    path = root / "gsm8k" / "train.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    # level and difficulty: the per-prompt columns adarft and sec read (lze_bench.metadata), two levels
    rows = [{"question": f"Is {i} odd? Reply 1 for yes, 0 for no.", "answer": f"#### {gold(i)}", "level": 1 + i % 2,
             "difficulty": 100.0 * (i % 2)} for i in range(count)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def save_tiny_policy(path: Path, prompts: list[str], steps: int = 30, hidden_size: int = 32) -> Path:
    """hidden_size 32 (head_dim 16) by default; 64 (head_dim 32) for vLLM's CPU attention, which refuses 16."""
    import torch
    from tokenizers import Tokenizer, decoders, models
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    vocab = {token: i for i, token in enumerate(specials + CHARS + list(ANSWERS))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                        unk_token="<unk>")
    torch.manual_seed(0)
    torch.set_num_threads(1)  # a few ms per step on one core; more threads only contend on 2 shared cores
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=hidden_size, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model = LlamaForCausalLM(config)
    # warm start: prompt -> one answer token (both, equally often) -> EOS; one batch per prompt length
    batches: dict = {}
    for prompt in prompts:
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        for answer in ANSWERS:
            batches.setdefault(len(ids), []).append(ids + [vocab[answer], 2])
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        optimizer.zero_grad()
        for length, rows in batches.items():
            sequences = torch.tensor(rows)
            labels = sequences.clone()
            labels[:, :length] = -100
            (model(sequences, labels=labels).loss * len(rows) / len(prompts) / 2).backward()
        optimizer.step()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


class RayCluster:
    """A private single-node Ray cluster for one test module."""

    def __init__(self, env: dict, num_cpus: int = 2, num_gpus: int = 1):
        self.port = free_port()
        self.temp_dir = tempfile.mkdtemp(prefix="lzeray")
        ports = {name: free_port() for name in ("dashboard-agent-listen-port",
                                                "dashboard-agent-grpc-port", "metrics-export-port",
                                                "runtime-env-agent-port", "node-manager-port",
                                                "object-manager-port")}
        command = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
                   "--node-ip-address=127.0.0.1", f"--port={self.port}", f"--num-cpus={num_cpus}",
                   f"--num-gpus={num_gpus}", "--include-dashboard=false", "--disable-usage-stats",
                   f"--temp-dir={self.temp_dir}", *(f"--{k}={v}" for k, v in ports.items())]
        self.log = open(Path(self.temp_dir) / "head.log", "w")
        self.process = subprocess.Popen(command, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        self.address = f"127.0.0.1:{self.port}"
        self._wait()

    def _wait(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"ray head exited: {(Path(self.temp_dir) / 'head.log').read_text()[-2000:]}")
            if "This command will now block" in (Path(self.temp_dir) / "head.log").read_text():
                return
            time.sleep(1)
        raise RuntimeError("ray head did not come up within 120 s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()


class _Parsed(Exception):
    def __init__(self, args):
        super().__init__("parsed")
        self.parsed = args


def openrlhf_args(flags: list[str]):
    """OpenRLHF 0.11.2's own argparse and validation on `flags` (its CLI module, stopped at get_strategy)."""
    import runpy

    import openrlhf.utils
    import ray

    def stop(args):
        raise _Parsed(args)

    saved = openrlhf.utils.get_strategy, ray.is_initialized, sys.argv
    openrlhf.utils.get_strategy, ray.is_initialized = stop, (lambda: True)  # parsing only, no Ray init
    sys.argv = ["train_ppo_ray", *flags]
    try:
        runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__")
    except _Parsed as parsed:
        return parsed.parsed
    finally:
        openrlhf.utils.get_strategy, ray.is_initialized, sys.argv = saved
    raise RuntimeError("OpenRLHF's CLI returned before building its strategy")
