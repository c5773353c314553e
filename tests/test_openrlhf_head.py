"""ASTRAL's learned head on backend=openrlhf, `selector.predictor=trained` (lze_bench/backends/openrlhf/head_build.py):
the sweep's head step builds a head in the authors' format from labelling models (the engine samples, the one grader
grades) and a frozen encoder; the runs load it as a checkpoint, on the policy ranks, with the build's cost booked.

Fast: tiny HF labellers and encoder on CPU, labelled through the `hf` generation engine (the scale recipe's vLLM is
the same interface), no Ray: the ranks' encoder pass is the actor's own `lze_encode` on stand-in actors.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from lze_bench.cli import app

STANDINS = Path(__file__).resolve().parent / "openrlhf_cpu"
sys.path.insert(0, str(STANDINS))
from lze_cpu_standins.fixtures import save_tiny_policy, write_prompts  # noqa: E402

PROMPTS = 12


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Two labellers of different strength (warm-start steps), an encoder of another width, a GSM8K-format pool."""
    root = tmp_path_factory.mktemp("head")
    data = write_prompts(root / "data", PROMPTS)
    questions = [json.loads(line)["question"] for line in (data / "gsm8k" / "train.jsonl").read_text().splitlines()]
    weak = save_tiny_policy(root / "weak", questions, steps=2)
    strong = save_tiny_policy(root / "strong", questions, steps=30)
    encoder = save_tiny_policy(root / "encoder", questions[:1], steps=1, hidden_size=24)
    return {"root": root, "data": data, "labelers": [str(weak), str(strong)], "encoder": str(encoder),
            "questions": questions}


def head_overrides(tiny, tmp_path, *extra) -> list[str]:
    return ["backend=openrlhf", "model=Qwen/Qwen2.5-Math-1.5B", "backend.gpus_per_node=1", "selector=astral",
            "selector.predictor=trained", f"selector.predictor_encoder={tiny['encoder']}", "task=gsm8k",
            f"data.root={tiny['data']}", "device=cpu", f"run_dir={tmp_path / 'run'}", "trainer.max_new_tokens=4",
            "trainer.temperature=1.0", "backend.apply_chat_template=false",
            f"backend.predictor.labelers=[{','.join(tiny['labelers'])}]", "backend.predictor.generation=hf",
            "backend.predictor.samples=4", "backend.predictor.ref_candidates=6", "backend.predictor.val_fraction=0.2",
            "backend.predictor.epochs=3", "backend.predictor.batch_size=4", "backend.predictor.ref_size=4",
            "backend.predictor.hidden_size=8", f"backend.predictor.cache_dir={tmp_path / 'cache'}", *extra]


def invoke(*args):
    return CliRunner().invoke(app, list(args))


def one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


class StandinRank:
    """A policy actor as far as `lze_encode` reads it: the rank's model (for its device) and the mixin's method."""

    def __init__(self, model):
        self.model = model

    def _lze_model(self):
        return self.model

    def lze_encode(self, **kwargs):
        from lze_bench.backends.openrlhf.actor_features import FeatureActorMixin

        return FeatureActorMixin.lze_encode(self, **kwargs)


def test_trained_head_is_built_once_in_the_authors_format_and_served_as_the_local_backend_serves_it(tiny, tmp_path):
    import torch

    from lze_bench.backends.openrlhf.head import QUESTIONS_FILE, head_features, write_questions
    from lze_bench.backends.openrlhf.head_build import HEAD_FILE, head_dir, read_info
    from lze_bench.config import compose
    from lze_bench.predictor.checkpoint import load_head
    from lze_bench.predictor.encoder import Encoder
    from lze_bench.predictor.features import serve_head
    from lze_bench.selectors.astral_predict import head_predict

    overrides = head_overrides(tiny, tmp_path)
    dry = invoke("train", *overrides, "--dry-run")  # before the build: the step is printed, nothing refused
    assert dry.exit_code == 0, dry.output
    assert "[to build before the runs]" in dry.output and f"questions: {PROMPTS} = the train pool" in dry.output
    refused = one_error_line(invoke("train", *overrides))  # a run never builds it
    assert "ASTRAL's head for this recipe is not built" in refused and "lze-bench head" in refused

    built = invoke("head", *overrides)
    assert built.exit_code == 0, built.output
    cfg = compose("train", overrides)
    directory = head_dir(cfg)
    assert f"ASTRAL head: {directory}" in built.output
    stamp = (directory / HEAD_FILE).stat().st_mtime_ns
    assert invoke("head", *overrides).exit_code == 0 and (directory / HEAD_FILE).stat().st_mtime_ns == stamp
    again = invoke("train", *overrides, "--dry-run")
    assert again.exit_code == 0 and "[built (reused)]" in again.output

    # the authors' format: `regressor.*` weights and the encoder in config["model_name"], checked on load
    body = torch.load(directory / HEAD_FILE, weights_only=True)
    assert body["config"]["model_name"] == tiny["encoder"]
    assert body["config"]["lze_bench"]["labelers"] == tiny["labelers"]
    assert all(k.startswith("regressor.") for k in body["model_state_dict"])
    load_head(directory / HEAD_FILE, encoder=tiny["encoder"], embedding_dim=24)
    info = read_info(directory)
    assert info["questions"] == PROMPTS and info["labelers"] == tiny["labelers"]
    assert all(info["flops"][k] > 0 for k in ("labeling", "encoder", "training"))
    # labels are pass rates measured by the grader on `samples` responses each: multiples of 1/samples
    assert len(info["label_means"]) == 2 and all(0.0 <= m <= 1.0 for m in info["label_means"])
    correct = [m * PROMPTS * 4 for m in info["label_means"]]  # correct responses of 12 questions x 4 samples
    np.testing.assert_allclose(correct, np.round(correct), atol=1e-4)

    # a run: the prompts embedded on two ranks by the actor's own pass, the head projected, the cost booked
    run = tmp_path / "run"
    (run / "openrlhf").mkdir(parents=True)
    rows = [{"problem": q} for q in tiny["questions"]]
    write_questions(rows, run / "openrlhf" / QUESTIONS_FILE)
    ranks = [StandinRank(torch.nn.Linear(1, 1)) for _ in range(2)]

    def call_actors(method, **lists):
        return [getattr(rank, method)(**{k: v[r] for k, v in lists.items()}) for r, rank in enumerate(ranks)]

    cfg_run = compose("train", overrides)
    served = head_features(cfg_run, None, call_actors, dp_size=2, num_prompts=PROMPTS)
    served.serve()
    torch.set_num_threads(1)
    local = serve_head(directory / HEAD_FILE, Encoder.load(tiny["encoder"], tiny["encoder"]), tiny["questions"], None,
                       tmp_path / "local", "trained", info)
    ids = np.arange(PROMPTS)
    ref = ids[::3]
    y_ref = np.linspace(0.1, 0.9, ref.size)
    predictions = []
    for features in (served, local):
        query, key, calibration = (features("head_query", ids), features("head_key", ids),
                                   features("head_calibration", ids[:0]))
        predictions.append(head_predict(query, key[ref], y_ref, calibration, query[ref])[1])
    assert np.isfinite(predictions[0]).all()
    np.testing.assert_allclose(predictions[0], predictions[1], rtol=0, atol=1e-6)
    record = json.loads((run / "offline_flops.json").read_text())
    assert record["predictor"] == "trained" and record["head"] == str(directory / HEAD_FILE)
    assert record["flops"] == json.loads((tmp_path / "local" / "offline_flops.json").read_text())["flops"]
    assert record["flops"]["labeling"] == info["flops"]["labeling"]
    assert record["flops"]["training"] == info["flops"]["training"]
    assert record["flops"]["encoder"] > info["flops"]["encoder"]  # the build's passes plus this run's


def test_trained_head_refusals_are_one_line(tiny, tmp_path):
    overrides = head_overrides(tiny, tmp_path)
    line = one_error_line(invoke("train", *overrides, "backend.predictor.labelers=[]", "--dry-run"))
    assert "backend.predictor.labelers is empty" in line
    no_encoder = [o for o in overrides if not o.startswith("selector.predictor_encoder=")]
    line = one_error_line(invoke("train", *no_encoder, "--dry-run"))
    assert "selector.predictor_encoder is unset" in line
    line = one_error_line(invoke("train", *overrides, "backend.predictor.labelers=[Qwen/Qwen2.5-Math-1.5B]",
                                 "model=Qwen/Qwen2.5-Math-1.5B", "--dry-run"))
    assert "names the policy" in line
    line = one_error_line(invoke("head", *[o for o in overrides if o != "selector.predictor=trained"]))
    assert "lze-bench head builds ASTRAL's head" in line


def test_a_built_head_of_another_encoder_is_refused_in_one_line(tiny, tmp_path):
    """A head in the cache whose file names another encoder than the run's (a hand-placed or stale file)."""
    from lze_bench.backends.openrlhf.head_build import HEAD_FILE, head_dir
    from lze_bench.config import compose
    from lze_bench.predictor.checkpoint import save_head
    from lze_bench.predictor.head import DifficultyHead

    overrides = head_overrides(tiny, tmp_path)
    directory = head_dir(compose("train", overrides))
    save_head(DifficultyHead(24, 8, 3), directory / HEAD_FILE, encoder="another-encoder")
    line = one_error_line(invoke("train", *overrides, "--dry-run"))
    assert "trained on embeddings of 'another-encoder'" in line and f"not {tiny['encoder']!r}" in line


def test_a_sweep_builds_one_head_before_its_runs_and_shares_it(tiny, tmp_path):
    """Jobs that differ only in seed need one head: the sweep's head step builds it once, before any run."""
    from lze_bench.backends.openrlhf.head_build import built, head_dir
    from lze_bench.config import compose
    from lze_bench.sweep import SweepSpec
    from lze_bench.sweep.grid import plan_jobs
    from lze_bench.sweep.heads import head_steps, run_steps

    overrides = [o for o in head_overrides(tiny, tmp_path) if not o.startswith(("run_dir=", "selector"))]
    astral = [o for o in head_overrides(tiny, tmp_path) if o.startswith("selector.")]
    spec = SweepSpec(grid={"selector": ["uniform", "astral"], "seed": [0, 1]}, overrides=overrides,
                     selector_overrides={"astral": astral})
    plan = plan_jobs(spec, ["launcher=local"], tmp_path / "sweep", name="heads")
    steps = head_steps(plan)
    assert len(steps) == 1 and sorted(steps[0].jobs) == ["astral-s0", "astral-s1"]
    cfg = compose("train", steps[0].overrides)
    assert not built(cfg)
    run_steps(plan, steps)
    assert built(cfg)
    assert head_dir(cfg) == head_dir(compose("train", [*overrides, "selector=astral", *astral, "seed=1"]))


def test_the_head_build_has_one_owner_and_the_sweep_only_schedules_it():
    """head_build.py builds the head (labelling, encoder, training); sweep/heads.py schedules the step and hands
    in the labelling engine, through head_build's public names only."""
    import ast

    import lze_bench.backends.openrlhf.head_build as head_build
    import lze_bench.sweep.heads as heads

    tree = ast.parse(Path(heads.__file__).read_text())
    imported = [(node.module, alias.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                for alias in node.names if (node.module or "").startswith("lze_bench")]
    assert not [name for _, name in imported if name.startswith("_")], imported
    defined = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    assert not defined & {"label", "_build"} and {"label", "build_head"} <= set(vars(head_build))
