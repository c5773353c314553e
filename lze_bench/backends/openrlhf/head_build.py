"""ASTRAL's learned head built once per sweep on backend=openrlhf (`selector.predictor=trained`; selectors.md §3).

The smallest honest design: a sweep-level *head step* writes one head in the authors' released format
(lze_bench.predictor.checkpoint.save_head) plus `info.json` (what it cost), and every astral run of the
sweep then loads it through the same path as `predictor=checkpoint` (head.py: the frozen encoder embeds
the run's prompts on the policy ranks, `serve_head` projects them and writes `offline_flops.json`, here
with the build's labelling, encoder and training FLOPs filled in, as on the local backend).

The build (`build_head`, this module; the labelling engine, lze_bench.evaluation's generators, is handed
in by the caller because evaluation stands beside the backends: `lze_bench.sweep.heads` schedules the
build and passes it), each step's cost counted as offline compute:
1. questions: the run's train pool (the rows `launch.prepare` writes; the same task, data root and
   order), so the reference set the head is trained on is the set the runs select from;
2. labels: every model of `backend.predictor.labelers` (public HF checkpoints standing in for the
   paper's labelling models, App. C.1; their training is not ours to count) samples `samples` responses
   per question with the *inference engine* (`lze_bench.evaluation.generation`: vLLM on the scale path,
   `generation=hf` for the CPU tests), on the exact prompt the policy trains on (`backend.prompt`, the
   chat template as `backend.apply_chat_template`), at the trainer's temperature / top_p /
   max_new_tokens; each response is graded by the one grading function; the label is the mean reward
   (the authors' `data_train.pkl`). FLOPs: F(prompt + response) per sample (lze_bench.flops, from each
   labeller's config)                                                           -> "labeling"
3. embeddings: the frozen encoder `selector.predictor_encoder` (the paper's Qwen2.5-Math-1.5B-Instruct)
   on every raw question, with the local backend's code (`predictor.encoder.Encoder`: eval mode,
   no_grad, the same chunks)                                                  -> "encoder"
4. the head: the authors' recipe (`predictor.train`), with the local backend's split of reference
   candidates and held-out questions (`backends.local.predictor.split_questions`); held-out check
   against the cosine kernel (`train.evaluate`)                                 -> "training"

Why the encoder runs here on one process, not on the policy ranks: the build happens before any run
(no policy actors exist yet), the encoder is frozen and small next to the labelling, and the same
`Encoder.embed` makes the same numbers as the ranks' `lze_encode` (both are that function). Each run
still embeds its own prompts on its ranks (head.py), counted again in its `offline_flops.json`.

Where the head lives: `<backend.predictor.cache_dir or $LZE_BENCH_CACHE or ~/.cache/lze-bench>/
predictor_openrlhf/<key>/` (`head.pt`, `info.json`), `key` hashing everything that shapes it (labellers,
encoder, recipe, task, data root, prompt rendering, sampling); on a cluster the cache must be on the
shared filesystem. A file lock makes concurrent builders build it once. `lze-bench sweep` runs the step
before submitting its runs (`sweep/heads.py`); a lone `lze-bench train` refuses to start until it exists.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional

import numpy as np

from lze_bench import env
from lze_bench.config.schema import require
from lze_bench.errors import LzeBenchError
from lze_bench.predictor import AuthorsTraining
from lze_bench.predictor.build import INFO_FILE

log = logging.getLogger(__name__)

HEAD_FILE = "head.pt"  # INFO_FILE (lze_bench.predictor.build) is written last
BUILD_FORMAT = 1  # bump when the build changes, so old heads are not reused

# Shapes (config.json of each hub model, read by hand) used only for `--dry-run`'s FLOP estimate when a
# labeller's or the encoder's config is not readable on the launching machine; the build itself counts
# FLOPs from the config of the model it loads. Qwen2.5 1.5B models share one shape.
_QWEN25_1P5B = dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                    num_key_value_heads=2, vocab_size=151936)
PUBLIC_SHAPES = {
    "Qwen/Qwen2.5-Math-1.5B": _QWEN25_1P5B,
    "Qwen/Qwen2.5-Math-1.5B-Instruct": _QWEN25_1P5B,
    "Qwen/Qwen2.5-1.5B-Instruct": _QWEN25_1P5B,
    "Qwen/Qwen2.5-1.5B": _QWEN25_1P5B,
}

# Train-pool sizes the task docstrings give (lze_bench/tasks/datasets.py), for `--dry-run`'s estimate on a
# machine without the data; with the data here the rows are counted.
POOL_SIZES = {"math": 7500, "dapo_math_17k": 17917, "gsm8k": 7473}


@dataclass
class HeadBuildConfig(AuthorsTraining):
    """`backend.predictor` on backend=openrlhf: how the sweep's head step builds ASTRAL's head (module docstring).

    The training knobs are the authors' (run_train.sh, as `predictor.train.TrainRecipe`); the labelling
    knobs are ours: the paper labels with several public models, so `labelers` is a list of HF ids or
    directories, none of them the policy being trained.
    """

    labelers: List[str] = field(default_factory=list)  # HF ids / directories of the labelling models
    samples: int = 8  # responses per question per labeller (the trainer's n is the usual 8)
    ref_candidates: int = 256  # labelled questions that serve as references (>= the authors' ref_size)
    val_fraction: float = 0.1  # labelled questions held out to compare trained head vs kernel
    generation: str = "vllm"  # the engine that labels: vllm (scale path) or hf (CPU tests)
    dtype: str = "auto"  # the labellers' dtype (bf16 on CUDA, float32 on CPU)
    gen_batch_size: int = 8  # hf only: prompts per generate() call (vLLM batches itself)
    cache_dir: Optional[str] = None  # where heads live (default $LZE_BENCH_CACHE or ~/.cache/lze-bench)

    def __post_init__(self):
        for key in ("samples", "epochs", "batch_size", "ref_size", "hidden_size", "num_layers", "ref_candidates",
                    "gen_batch_size"):
            require(getattr(self, key) > 0, f"backend.predictor.{key}", f"must be > 0, got {getattr(self, key)}")
        require(0 <= self.val_fraction < 1, "backend.predictor.val_fraction", "must be in [0, 1)")
        require(self.lr > 0, "backend.predictor.lr", f"must be > 0, got {self.lr}")
        require(self.generation in ("vllm", "hf"), "backend.predictor.generation",
                f"use vllm or hf, got {self.generation!r}")


def uses_trained_head(cfg) -> bool:
    return (str(cfg.backend.name) == "openrlhf" and str(cfg.selector.name) == "astral"
            and str(cfg.selector.get("predictor", "kernel")) == "trained")


def check_recipe(cfg) -> None:
    """One-line refusals for a `predictor=trained` run whose head step could not be built."""
    labelers = list(cfg.backend.predictor.labelers or [])
    if not labelers:
        raise LzeBenchError("backend.predictor.labelers is empty: selector.predictor=trained on backend=openrlhf "
                            "labels the questions with other models; pass backend.predictor.labelers=[MODEL,...] "
                            "(HF ids or directories), or use selector.predictor=checkpoint|kernel")
    if not cfg.selector.get("predictor_encoder"):
        raise LzeBenchError("selector.predictor_encoder is unset: selector.predictor=trained on backend=openrlhf "
                            "needs the frozen encoder the head embeds with, e.g. "
                            "selector.predictor_encoder=Qwen/Qwen2.5-Math-1.5B-Instruct")
    if str(cfg.model.get("name", "")) in labelers or str(cfg.model.get("path", "") or "") in labelers:
        raise LzeBenchError(f"backend.predictor.labelers names the policy {cfg.model.name!r}: its labels would "
                            "be the run's own pass rates; label with other models")


def head_key(cfg) -> str:
    """What shapes the head, machine-free (the engine's numerics are not in it: a head built on another
    machine is the same recipe; `info.json` records where it was built)."""
    from lze_bench.config import config_dict, env_data_root

    recipe = {k: v for k, v in config_dict(cfg.backend.predictor).items() if k not in ("cache_dir", "gen_batch_size")}

    blob = json.dumps({
        "format": BUILD_FORMAT, "recipe": recipe, "encoder": str(cfg.selector.predictor_encoder),
        "task": config_dict(cfg.task), "data_root": env_data_root(cfg.data.root),
        "prompt": [str(cfg.backend.prompt), bool(cfg.backend.apply_chat_template)],
        "sampling": {k: cfg.trainer[k] for k in ("max_new_tokens", "temperature", "top_p")},
    }, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def head_dir(cfg) -> Path:
    root = cfg.backend.predictor.cache_dir or env.cache_dir()
    return Path(root).expanduser() / "predictor_openrlhf" / head_key(cfg)


def built(cfg) -> bool:
    return (head_dir(cfg) / INFO_FILE).exists()


def read_info(directory: Path) -> dict:
    return json.loads((Path(directory) / INFO_FILE).read_text())


def require_built(cfg) -> Path:
    """The built head's directory, or one line saying how to build it."""
    directory = head_dir(cfg)
    if not (directory / INFO_FILE).exists():
        raise LzeBenchError(f"selector.predictor=trained: ASTRAL's head for this recipe is not built ({directory} "
                            "has no info.json); `lze-bench sweep` builds it before its runs, or build it alone "
                            "with `lze-bench head` and the same overrides")
    return directory


def flop_model(name: str, fallback_ok: bool = False):
    """lze_bench.flops.FlopModel of an HF model from its config (the hub cache or a directory)."""
    from types import SimpleNamespace

    from transformers import AutoConfig

    from lze_bench.flops import FlopModel

    try:
        return FlopModel.from_hf_config(AutoConfig.from_pretrained(name, local_files_only=fallback_ok))
    except Exception as exc:
        if fallback_ok and name in PUBLIC_SHAPES:
            return FlopModel.from_hf_config(SimpleNamespace(**PUBLIC_SHAPES[name]))
        if fallback_ok:
            return None
        raise LzeBenchError(f"{name}: cannot read its config to count FLOPs ({str(exc).splitlines()[0]})") from exc


def _rows(cfg) -> list[dict]:
    from lze_bench.config import env_data_root
    from lze_bench.registry import TASKS

    return TASKS[cfg.task.name].load(cfg.task, env_data_root(cfg.data.root))


def estimate(cfg, questions: int | None) -> dict:
    """Upper-bound FLOPs of the build from configs alone (`--dry-run`): every labelling sequence at
    backend.max_len tokens (prompt + response), every question at backend.max_len - trainer.max_new_tokens
    tokens for the encoder (the prompt budget), the head's training exact (it depends only on counts)."""
    from lze_bench.predictor.build import split_questions
    from lze_bench.predictor.head import DifficultyHead
    from lze_bench.predictor.train import batch_flops

    recipe = cfg.backend.predictor
    out = {"labeling": None, "encoder": None, "training": None, "unknown": []}
    if questions is None:
        return out
    seq, prompt = int(cfg.backend.max_len), max(1, int(cfg.backend.max_len) - int(cfg.trainer.max_new_tokens))
    labeling = 0
    for model in recipe.labelers:
        model_flops = flop_model(str(model), fallback_ok=True)
        if model_flops is None:
            out["unknown"].append(str(model))
            labeling = None
        elif labeling is not None:
            labeling += model_flops.forward([seq] * (questions * int(recipe.samples)))
    out["labeling"] = labeling
    encoder = flop_model(str(cfg.selector.predictor_encoder), fallback_ok=True)
    if encoder is None:
        out["unknown"].append(str(cfg.selector.predictor_encoder))
    else:
        out["encoder"] = encoder.forward([prompt] * questions)
    refs, val = (ids.size for ids in split_questions(questions, recipe))  # the build's own split, by count
    pairs = len(recipe.labelers) * (questions - val)
    d = _encoder_width(str(cfg.selector.predictor_encoder))
    if d is not None:
        head = DifficultyHead(d, int(recipe.hidden_size), int(recipe.num_layers))
        ref_size = min(int(recipe.ref_size), refs)
        full, last = divmod(pairs, int(recipe.batch_size))
        per_epoch = full * batch_flops(head, int(recipe.batch_size), ref_size) + (
            batch_flops(head, last, ref_size) if last else 0)
        out["training"] = 3 * per_epoch * int(recipe.epochs)
    return out


def _encoder_width(name: str) -> int | None:
    try:
        from transformers import AutoConfig

        return int(AutoConfig.from_pretrained(name, local_files_only=True).hidden_size)
    except Exception:
        shape = PUBLIC_SHAPES.get(name)
        return int(shape["hidden_size"]) if shape else None


def describe(cfg, jobs: list[str]) -> list[str]:
    """`--dry-run`'s lines for the head step of these jobs: what it builds, with what, and its cost estimate."""
    recipe, trainer = cfg.backend.predictor, cfg.trainer
    directory = head_dir(cfg)
    state = "built (reused)" if (directory / INFO_FILE).exists() else "to build before the runs"
    from lze_bench.config import env_data_root

    try:  # counted from a local data root only: a dry run never downloads a dataset
        if not env_data_root(cfg.data.root):
            raise LzeBenchError("no data.root")
        questions, source = len(_rows(cfg)), f"the train pool of task={cfg.task.name}"
    except Exception:  # the data is not on this machine: the task's documented size, said so
        questions = POOL_SIZES.get(str(cfg.task.name))
        if questions is not None and cfg.task.get("limit"):
            questions = min(questions, int(cfg.task.limit))
        source = f"task={cfg.task.name}'s train pool ({'its documented size; ' if questions else ''}not readable here)"
    lines = [
        f"head step (selector.predictor=trained, one head shared by {', '.join(jobs)}): {directory} [{state}]",
        f"  labellers ({recipe.generation}, {recipe.samples} samples per question, temperature {trainer.temperature}, "
        f"top_p {trainer.top_p}, max_new_tokens {trainer.max_new_tokens}, the policy's prompt): "
        f"{', '.join(str(m) for m in recipe.labelers) or '(none: backend.predictor.labelers is empty)'}",
        f"  frozen encoder: {cfg.selector.predictor_encoder}; questions: "
        f"{'' if questions is None else f'{questions:,} = '}{source}; references {recipe.ref_candidates}, "
        f"held out {recipe.val_fraction}; head: the authors' recipe ({recipe.epochs} epochs, batch "
        f"{recipe.batch_size}, ref_size {recipe.ref_size}, lr {recipe.lr}, hidden {recipe.hidden_size}, "
        f"{recipe.num_layers} layers)",
    ]
    cost = estimate(cfg, questions)
    parts = [f"{k} {'?' if cost[k] is None else f'{cost[k]:.3g}'}" for k in ("labeling", "encoder", "training")]
    known = [cost[k] for k in ("labeling", "encoder", "training")]
    total = "?" if any(v is None for v in known) else f"{sum(known):.3g}"
    missing = f" (no config here for {', '.join(cost['unknown'])})" if cost["unknown"] else ""
    lines.append(f"  estimated offline FLOPs (upper bound: labelling sequences at "
                 f"backend.max_len={cfg.backend.max_len} "
                 f"tokens, encoder inputs at the prompt budget): {', '.join(parts)}, total {total}{missing}; "
                 "charged to every astral run in its offline_flops.json, never in a ledger")
    return lines


# --- the build ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LabelEngine:
    """The inference engine the labellers sample with: `load_generator` and `Sampling` of
    lze_bench.evaluation.generation. Handed in by the caller (the sweep's head step, `lze-bench head`:
    sweep.heads.engine) because evaluation stands on the backends' floor and this module cannot import it."""

    load_generator: Callable
    sampling: Callable


def build_head(cfg, engine: LabelEngine) -> Path:
    """The head directory for this config (`head.pt` + `info.json`), built first if missing (file-locked)."""
    from lze_bench.predictor.build import build_once

    check_recipe(cfg)
    return build_once(head_dir(cfg), lambda out: _build(cfg, out, engine))


def label(cfg, model: str, rows: list[dict], grader, seed: int, engine: LabelEngine) -> tuple[np.ndarray, int]:
    """(pass rate float32[Q], generation FLOPs) of `model` on the rows, sampled by the engine."""
    from lze_bench.backends.openrlhf.data import prompt_input

    recipe, trainer = cfg.backend.predictor, cfg.trainer
    generator = engine.load_generator(str(model), backend=str(recipe.generation), device=str(cfg.device),
                                      dtype=str(recipe.dtype), batch_size=int(recipe.gen_batch_size),
                                      use_chat_template=bool(cfg.backend.apply_chat_template), seed=seed)
    try:
        results = generator.generate([prompt_input(r["problem"], str(cfg.backend.prompt)) for r in rows],
                                     engine.sampling(n=int(recipe.samples), temperature=float(trainer.temperature),
                                                     top_p=float(trainer.top_p),
                                                     max_new_tokens=int(trainer.max_new_tokens), seed=seed))
    finally:
        generator.close()
    texts, golds, prompt_tokens, response_tokens = [], [], [], []
    for row, result in zip(rows, results):
        if len(result.completions) != int(recipe.samples):
            raise LzeBenchError(f"labeller {model}: {len(result.completions)} responses for a question, "
                                f"expected backend.predictor.samples={recipe.samples}")
        for completion in result.completions:
            texts.append(completion.text)
            golds.append(str(row["answer"]))
            prompt_tokens.append(result.prompt_tokens)
            response_tokens.append(completion.tokens)
    correct = np.array([1.0 if g.correct else 0.0 for g in grader.grade(texts, golds)], dtype=np.float32)
    rates = correct.reshape(len(rows), int(recipe.samples)).mean(axis=1)
    return rates, int(flop_model(str(model)).generation(prompt_tokens, response_tokens))


def _build(cfg, out: Path, engine: LabelEngine) -> dict:
    from lze_bench.config import config_dict
    from lze_bench.grading import Grader
    from lze_bench.predictor.build import train_and_save
    from lze_bench.predictor.encoder import Encoder

    recipe = cfg.backend.predictor
    rows = _rows(cfg)
    times, flops, rates = {}, {"labeling": 0}, []
    start = time.perf_counter()
    grader = Grader(timeout_s=float(cfg.backend.grade_timeout_s), workers=int(cfg.backend.grade_workers))
    try:
        for index, model in enumerate(recipe.labelers):
            rate, spent = label(cfg, str(model), rows, grader, seed=int(recipe.seed) + index, engine=engine)
            rates.append(rate)
            flops["labeling"] += spent
            log.info("labeller %s: mean pass rate %.3f over %d questions", model, rate.mean(), len(rows))
    finally:
        grader.close()
    times["labeling"] = time.perf_counter() - start
    start = time.perf_counter()
    name = str(cfg.selector.predictor_encoder)
    device = "cuda" if str(cfg.device) in ("cuda", "auto") and _cuda() else "cpu"
    encoder = Encoder.load(name, name, device)
    embeddings, flops["encoder"] = encoder.embed([r["problem"] for r in rows])
    del encoder.model  # frozen and done: free its memory before training the head
    times["encoder"] = time.perf_counter() - start
    built = train_and_save(embeddings, rates, recipe, out / HEAD_FILE, encoder=name,
                           labelers=[str(m) for m in recipe.labelers], flops=flops, times=times)
    return {
        "encoder": {"name": name, "path": name, "width": int(embeddings.shape[1])}, **built,
        "samples": int(recipe.samples), "generation": str(recipe.generation), "recipe": config_dict(recipe),
    }


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()
