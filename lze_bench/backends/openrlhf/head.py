"""ASTRAL's learned head on backend=openrlhf (`selector.predictor=checkpoint|trained`; selectors.md §3).

The head and what it serves are the local backend's (lze_bench.predictor): the
same file format and checks (`checkpoint.load_head`), the same embeddings
(`encoder.Encoder.embed`: mean last hidden state over the raw question), the
same projections and the same `offline_flops.json` (`features.serve_head`).
Only where the encoder runs differs:

* the frozen encoder runs on the policy ranks (`actor_features.lze_encode`):
  loaded there for the call, in eval mode under no_grad, and dropped, so it
  never trains and its memory is free again before the first rollout; its FLOPs (one
  forward per question, counted on the ranks) and the head's two projections
  are offline compute, recorded in `offline_flops.json` like the local
  backend's, never in a ledger row;
* the questions are cut into the encoder's chunks of `encoder.CHUNK` consecutive
  prompts, chunk `c` going to rank `c mod dp`, so every forward pads exactly as
  the local backend's does and the embeddings are the same numbers;
* the raw questions (not OpenRLHF's chat-templated prompts) travel in
  `openrlhf/questions.json`, written by `launch.prepare`;
* it runs once per start, at the start of OpenRLHF's `fit` (the trainer's
  `init_checkpoint_states`, after the models are loaded and before the first
  step), so no step's time includes it. The head file is read on the controller.

Launch checks (`check_head`, from command.check, so `--dry-run` reports them
too): the head file exists and is an ASTRAL head in the authors' format, and
the encoder it records is `selector.predictor_encoder`; where the encoder's
config is readable on the launching machine, its width is checked as well
(else the trainer checks it when it loads the head). `predictor=trained`: the
head is built once per sweep by the sweep's head step (head_build.py) and
then loaded here as a checkpoint is; the launch check refuses a recipe with
no labellers or no encoder, checks a head already built as above, and a run
(not a dry run) refuses to start before the head exists.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np

from lze_bench.errors import LzeBenchError
from lze_bench.rundir import atomic_write_text

from lze_bench.selectors.astral import HEAD_FEATURES

QUESTIONS_FILE = "questions.json"  # in the run's openrlhf/ folder: raw question texts, by prompt id


def uses_head(cfg) -> bool:
    """The run's selector reads ASTRAL's learned head (astral with a predictor other than the kernel)."""
    return str(cfg.selector.name) == "astral" and str(cfg.selector.get("predictor", "kernel")) != "kernel"


def check_head(cfg) -> None:
    """Launch-time refusals for a learned-head astral run, one line each (see the module docstring)."""
    if not uses_head(cfg):
        return
    if str(cfg.selector.predictor) == "trained":
        from lze_bench.backends.openrlhf.head_build import HEAD_FILE, check_recipe, head_dir

        check_recipe(cfg)  # labellers and encoder named; the head itself may not be built yet (a dry run)
        built = head_dir(cfg) / HEAD_FILE
        if not built.exists():
            return
        path = str(built)
    else:
        path = str(cfg.selector.predictor_path)
    from lze_bench.predictor.checkpoint import load_head, read_head

    encoder = str(cfg.selector.predictor_encoder)
    _, config = read_head(path)
    recorded = config.get("model_name")
    if recorded is not None and str(recorded) != encoder:
        raise LzeBenchError(f"{path}: this head was trained on embeddings of {recorded!r}, not {encoder!r}; "
                            f"set selector.predictor_encoder={recorded} (or train a head for {encoder!r})")
    width = _local_width(encoder)
    if width is not None:
        load_head(path, encoder=encoder, embedding_dim=width)


def _local_width(encoder: str) -> int | None:
    """The encoder's hidden size from a config readable here (a local directory or the HF cache), else None."""
    try:
        from transformers import AutoConfig

        return int(AutoConfig.from_pretrained(encoder, local_files_only=True).hidden_size)
    except Exception:  # not here: the cluster loads it, and the trainer checks the width then
        return None


def write_questions(rows: list[dict], path: str | Path) -> None:
    atomic_write_text(path, json.dumps([str(r["problem"]) for r in rows], ensure_ascii=False))


def read_questions(path: str | Path, count: int) -> list[str]:
    path = Path(path)
    try:
        questions = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise LzeBenchError(f"{path}: cannot read the raw questions ASTRAL's encoder embeds ({exc}); "
                            "rerun `lze-bench train` with the same overrides to write it") from exc
    if not isinstance(questions, list) or len(questions) != int(count):
        raise LzeBenchError(f"{path} does not hold one question per train prompt ({count}); delete it and rerun "
                            "`lze-bench train` with the same overrides")
    return [str(q) for q in questions]


class ClusterEncoder:
    """The frozen encoder as `serve_head` uses it (`name`, `width`, `embed`), run on the policy ranks.

    `call_actors(method, **lists)`: one result per list item, in order (the trainer's `_call_actors`);
    `dp_size`: data-parallel ranks, so item r (of dp_size items) runs on rank r.
    """

    def __init__(self, name: str, call_actors: Callable, dp_size: int, width: int | None = None,
                 chunk: int | None = None):
        from lze_bench.predictor.encoder import CHUNK

        self.name = str(name)
        self.call_actors = call_actors
        self.dp_size = max(1, int(dp_size))
        self.chunk = int(chunk or CHUNK)
        self._width = width

    @property
    def width(self) -> int:
        if self._width is None:
            from transformers import AutoConfig

            try:
                self._width = int(AutoConfig.from_pretrained(self.name).hidden_size)
            except OSError as exc:
                raise LzeBenchError(f"selector.predictor_encoder={self.name}: cannot read its config ({exc})") from exc
        return self._width

    def embed(self, questions: list[str]) -> tuple[np.ndarray, int]:
        """(float32[m, d], FLOPs) of the questions, as `Encoder.embed` gives them on one machine."""
        questions = [str(q) for q in questions]
        chunks = [list(range(a, min(a + self.chunk, len(questions)))) for a in range(0, len(questions), self.chunk)]
        # rank r: chunks r, r + dp, ...; all chunks but the last are full, so a rank's chunks joined and cut
        # again every `chunk` questions (what Encoder.embed does) are the same chunks
        shares = [[i for c in chunks[r::self.dp_size] for i in c] for r in range(self.dp_size)]
        results = list(self.call_actors("lze_encode", encoder=[self.name] * self.dp_size,
                                        questions=[[questions[i] for i in s] for s in shares],
                                        chunk=[self.chunk] * self.dp_size))
        if len(results) != self.dp_size:
            raise LzeBenchError(f"lze_encode: {len(results)} results from {self.dp_size} ranks")
        out = np.zeros((len(questions), self.width), dtype=np.float32)
        flops = 0
        for share, (rows, spent) in zip(shares, results):
            rows = np.asarray(rows, dtype=np.float32)
            if share and rows.shape != (len(share), self.width):
                raise LzeBenchError(f"lze_encode: a rank returned embeddings of shape {rows.shape} for "
                                    f"{len(share)} questions of width {self.width}")
            if share:
                out[share] = rows
            flops += int(spent)
        return out, flops


class LazyHeadFeatures:
    """The backend's FeatureFn plus the head's arrays once `serve()` has run (at the start of `fit`).

    Anything that is not a head array (and every attribute: take_costs, begin_step, ...) is the inner
    FeatureFn's, as with `lze_bench.predictor.features.HeadFeatures`.
    """

    def __init__(self, inner, build: Callable):
        self.__dict__.update(inner=inner, build=build, served=None)

    def serve(self) -> None:
        if self.__dict__["served"] is None:
            self.__dict__["served"] = self.__dict__["build"]()

    def __call__(self, name, ids):
        if name in HEAD_FEATURES:
            self.serve()
            return self.__dict__["served"](name, ids)
        return self.__dict__["inner"](name, ids)

    def __getattr__(self, name):
        return getattr(self.__dict__["inner"], name)

    def __setattr__(self, name, value):
        setattr(self.__dict__["inner"], name, value)


def head_features(cfg, inner, call_actors: Callable, dp_size: int, num_prompts: int) -> LazyHeadFeatures:
    """The FeatureFn of a learned-head astral run: `inner` plus the head, served by `serve()`.

    `predictor=trained`: the sweep's head step built the file (head_build.py); it is served exactly as a
    checkpoint is, with the build's labelling, encoder and training FLOPs booked in `offline_flops.json`."""
    run_dir = Path(cfg.run_dir)

    def build():
        from lze_bench.predictor.features import serve_head

        questions = read_questions(run_dir / "openrlhf" / QUESTIONS_FILE, num_prompts)
        encoder = ClusterEncoder(str(cfg.selector.predictor_encoder), call_actors, dp_size)
        if str(cfg.selector.predictor) == "trained":
            from lze_bench.backends.openrlhf.head_build import HEAD_FILE, read_info, require_built

            directory = require_built(cfg)
            return serve_head(str(directory / HEAD_FILE), encoder, questions, inner, run_dir, "trained",
                              read_info(directory))
        return serve_head(str(cfg.selector.predictor_path), encoder, questions, inner, run_dir, "checkpoint", {})

    return LazyHeadFeatures(inner, build)
