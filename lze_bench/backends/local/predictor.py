"""ASTRAL's learned head on the local backend: labelling models -> labels -> embeddings -> head (cached).

`head_features(...)` is what the trainer calls for `selector=astral` with `predictor=trained|checkpoint`:
`trained` builds (or finds) the head here, `checkpoint` takes `selector.predictor_path`; both are then
served by lze_bench.predictor.features.serve_head. The build (`ensure_head`), in order, each step's cost
counted as offline compute (`info.json` "flops"):
1. labelling models: snapshots of a tiny warm start with its own init seed (`HeadRecipe.labeler_seed`,
   never the policy's `backend.init_seed`) after `labeler_steps` supervised steps (warmstart.py; its
   own training is not counted: the labellers stand in for the public models the authors label with,
   which cost them nothing to train);
2. questions: the run's train pool plus `sft_questions` of the sft split (never the held-out test split);
   a seeded `ref_candidates` of them are the references, a seeded `val_fraction` of the rest is held out;
3. labels (`measure`): every labeller rolls out `samples` responses per question at the training
   temperature, graded by the one grading function; the label is the mean reward (the authors'
   `data_train.pkl` / `data_ref.pkl`: per model, questions and mean rewards)       -> flops "labeling"
4. embeddings: the frozen encoder (the last labeller snapshot, named by its directory, as an HF
   encoder is by its hub id) on every question (lze_bench.predictor.encoder)        -> flops "encoder"
5. the head, with the authors' recipe (lze_bench.predictor.train), saved in their format -> "training"
6. held-out check: trained head vs the cosine kernel on the held-out questions (train.evaluate).

The result lives in `<cache>/predictor/<key>/` (`head.pt`, `info.json`), `key` hashing everything that
shapes it (the labellers' warm-start key, the recipe, the task, the sampling knobs). Like the warm start,
every run of a sweep shares one build; a file lock makes concurrent jobs build it once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from pathlib import Path

import numpy as np

from lze_bench.predictor.build import INFO_FILE

log = logging.getLogger(__name__)

HEAD_FILE = "head.pt"  # INFO_FILE (lze_bench.predictor.build) is written last
BUILD_FORMAT = 1  # bump when the build changes, so old heads are not reused


def _plain(value):
    from lze_bench.backends.local.warmstart import _plain as plain

    return plain(value)


def measure(model_dir, rows: list[dict], *, samples: int, max_new_tokens: int, temperature: float, top_p: float,
            grader, device, chunk_size: int, seed: int) -> tuple[np.ndarray, int]:
    """(pass rate float32[Q], generation FLOPs) of the model in `model_dir` on the question rows."""
    import torch

    from lze_bench.backends.local.heldout import encode_prompts
    from lze_bench.backends.local.model import load_policy
    from lze_bench.backends.local.rollout import generate
    from lze_bench.flops import FlopModel

    model, tokenizer = load_policy(model_dir, device)
    prompts = encode_prompts(tokenizer, [r["problem"] for r in rows])
    flat = np.repeat(np.arange(len(rows)), samples)
    generator = torch.Generator(device=device)
    generator.manual_seed(int(np.random.default_rng([seed, 31]).integers(2**62)))
    gen = generate(model, tokenizer, [prompts[i] for i in flat], max_new_tokens=max_new_tokens,
                   temperature=temperature, top_p=top_p, generator=generator, chunk_size=chunk_size)
    grades = grader.grade(gen.texts, [rows[i]["answer"] for i in flat])
    correct = np.array([1.0 if g.correct else 0.0 for g in grades], dtype=np.float32).reshape(len(rows), samples)
    flops = FlopModel.from_torch_model(model).generation(gen.prompt_tokens, gen.response_tokens)
    return correct.mean(axis=1), int(flops)


def head_features(cfg, questions: list[str], inner, run_dir, device, grader):
    """The FeatureFn of a learned-head ASTRAL run (lze_bench.predictor.features.HeadFeatures); writes the run's
    `offline_flops.json`."""
    from lze_bench.predictor.encoder import Encoder
    from lze_bench.predictor.features import serve_head

    selector = cfg.selector
    if selector.predictor == "trained":
        directory = ensure_head(cfg, device, grader)
        info = read_info(directory)
        # the encoder is the last labeller snapshot, loaded from where this checkout has it: the path recorded at the
        # build is where the package was then (a cache outlives a moved clone; a shipped snapshot moves with the
        # package). Its recorded name stays its identity, which the head file was trained on.
        encoder_dir = str(labeler_dirs(cfg, device, grader)[0][-1])
        encoder = Encoder.load(info["encoder"]["name"], encoder_dir, device)
        return serve_head(directory / HEAD_FILE, encoder, questions, inner, run_dir, "trained", info)
    encoder = Encoder.load(str(selector.predictor_encoder), str(selector.predictor_encoder), device)
    return serve_head(selector.predictor_path, encoder, questions, inner, run_dir, "checkpoint", {})


def head_key(recipe, labeler_key: str, task_cfg, trainer_cfg, numerics: dict) -> str:
    """`numerics`: the machine's (warmstart.build_numerics): labelling rollouts and training on another thread
    count or processor give another head, so it is built and cached apart."""
    sampling = {k: getattr(trainer_cfg, k) for k in ("max_new_tokens", "temperature", "top_p")}
    blob = json.dumps({"format": BUILD_FORMAT, "recipe": _plain(recipe), "labelers": labeler_key,
                       "task": _plain(task_cfg), "sampling": sampling, "numerics": numerics},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def labeler_dirs(cfg, device, grader) -> tuple[list[Path], str]:
    """The labelling models' directories (snapshots) and their warm start's key."""
    from lze_bench.backends.local.warmstart import ensure_warmstart, snapshot_dir

    recipe = cfg.backend.predictor
    steps = sorted(int(s) for s in recipe.labeler_steps)
    backend = dataclasses.replace(cfg.backend, init_seed=recipe.labeler_seed, warmstart_steps=steps[-1])
    directory = ensure_warmstart(cfg.model, cfg.task, backend, device, grader, snapshots=steps)
    # the key of the build that made these weights (shipped or built here) names them, whichever machine built it
    return [snapshot_dir(directory, s) for s in steps], str(read_warmstart(directory)["key"])


def ensure_head(cfg, device, grader) -> Path:
    """The cached head directory for this config (`head.pt` + `info.json`), built first if missing."""
    from lze_bench.backends.local.warmstart import build_numerics, cache_root
    from lze_bench.predictor.build import build_once

    dirs, labeler_key = labeler_dirs(cfg, device, grader)  # the labellers' warm start: built first if missing
    key = head_key(cfg.backend.predictor, labeler_key, cfg.task, cfg.trainer, build_numerics(device.type))
    return build_once(cache_root(cfg.backend) / "predictor" / key,
                      lambda out: _build(cfg, dirs, labeler_key, device, grader, out))


def _build(cfg, dirs: list[Path], labeler_key: str, device, grader, out: Path) -> dict:
    from lze_bench.predictor.build import train_and_save
    from lze_bench.predictor.encoder import Encoder
    from lze_bench.tasks.synthetic import load_split

    recipe, trainer = cfg.backend.predictor, cfg.trainer
    rows = load_split("train", cfg.task) + load_split("sft", cfg.task)[:recipe.sft_questions]
    times, flops = {}, {}
    start = time.perf_counter()
    rates = []
    for index, directory in enumerate(dirs):
        rate, spent = measure(directory, rows, samples=recipe.samples, max_new_tokens=trainer.max_new_tokens,
                              temperature=trainer.temperature, top_p=trainer.top_p, grader=grader, device=device,
                              chunk_size=cfg.backend.gen_chunk_size, seed=recipe.seed + index)
        rates.append(rate)
        flops["labeling"] = flops.get("labeling", 0) + spent
        log.info("labeller %s: mean pass rate %.3f over %d questions", directory.name, rate.mean(), len(rows))
    times["labeling"] = time.perf_counter() - start
    start = time.perf_counter()
    encoder_name = str(dirs[-1])  # recorded as the id it loads from, as an HF hub id would be
    encoder = Encoder.load(encoder_name, encoder_name, device)
    embeddings, flops["encoder"] = encoder.embed([r["problem"] for r in rows])
    times["encoder"] = time.perf_counter() - start
    built = train_and_save(embeddings, rates, recipe, out / HEAD_FILE, encoder=encoder_name,
                           labelers=[str(d) for d in dirs], flops=flops, times=times)
    return {
        "encoder": {"name": encoder_name, "path": str(dirs[-1]), "width": encoder.width}, **built,
        "samples": recipe.samples, "recipe": _plain(recipe),
        "labeler_warmstart": {k: v for k, v in read_warmstart(dirs[-1].parent.parent).items()
                              if k in ("key", "steps", "time_s", "flops", "heldout_accuracy")},
    }


def read_warmstart(directory: Path) -> dict:
    from lze_bench.backends.local.warmstart import read_info as read

    return read(directory)


def read_info(directory: Path) -> dict:
    return json.loads((Path(directory) / INFO_FILE).read_text())
