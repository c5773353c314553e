"""What the local backend and `generation.backend=hf` promise on a CUDA device (marker `gpu`, deselected by default).

Run on a machine with a GPU: `python3 -m pytest -q -m gpu tests/test_gpu.py`. CI has no GPU, so these tests
skip there (and are deselected anyway); they were last run on the machine named in docs/design.md's GPU note.

- Two `lze-bench train device=cuda` runs of one config end with the same ledger (time columns aside), the same
  rollout log and the same weights. The local backend does not turn on `torch.use_deterministic_algorithms`:
  measured on an H100, runs were equal without it at the tiny and the default size, and it cost 1.5-2x per step
  (docs/design.md, "On a GPU"); this test is what would catch a kernel that breaks the equality.
- A killed CUDA run resumes to the unbroken run's ledger, as on CPU.
- `lze-bench eval device=cuda` records the dtype that ran (bfloat16 for `auto`) and repeats its sampled answers.
- Every selector trains on the GPU (astral also with its learned head), recording the GPU it ran on.
- Greedy float32 answers of the trained tiny policy on CUDA equal those on CPU (TF32 is off for float32 matmuls),
  so a checkpoint's greedy eval does not depend on where it ran.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from lze_bench.cli import app
from lze_bench.ledger import read_ledger, read_rollouts
from tiny_run import TINY_TRAIN

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch sees none)")]

runner = CliRunner()
STEPS = 4
CUDA = ["device=cuda", f"trainer.steps={STEPS}", "trainer.checkpoint_every=2", "backend.threads=0"]


def _train(run_dir, cache_dir, *extra):
    result = runner.invoke(app, ["train", *TINY_TRAIN, *CUDA, f"backend.cache_dir={cache_dir}", f"run_dir={run_dir}",
                                 *extra])
    return result


def _ok(result):
    assert result.exit_code == 0, result.output + repr(result.exception)


def _untimed(ledger: pd.DataFrame) -> pd.DataFrame:
    return ledger[[c for c in ledger.columns if not (c.startswith("time_") or c == "cum_time_s")]]


def _weights(run_dir):
    from safetensors.torch import load_file

    return load_file(str(run_dir / "checkpoints" / f"step_{STEPS:06d}" / "model.safetensors"))


@pytest.fixture(scope="module")
def cuda_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu")
    cache = root / "cache"
    a, b = root / "a", root / "b"
    _ok(_train(a, cache))
    _ok(_train(b, cache))
    return a, b, cache


def test_two_cuda_runs_of_one_config_end_identical(cuda_runs):
    a, b, _ = cuda_runs
    pd.testing.assert_frame_equal(_untimed(read_ledger(a)), _untimed(read_ledger(b)))
    ra, rb = read_rollouts(a), read_rollouts(b)
    assert ra[["step", "prompt_id", "kept"]].equals(rb[["step", "prompt_id", "kept"]])
    assert ra["rewards"].map(list).tolist() == rb["rewards"].map(list).tolist()
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert (read_ledger(a)["generated_tokens"] > 0).all()


def test_killed_cuda_run_resumes_to_the_unbroken_ledger(cuda_runs, tmp_path):
    a, _, cache = cuda_runs
    broken = tmp_path / "broken"
    _ok(_train(broken, cache, "backend.stop_after_steps=3"))  # dies after step 2, checkpoint at 2
    assert read_ledger(broken)["step"].tolist() == [0, 1, 2]
    _ok(_train(broken, cache))  # the same command resumes from step_000002
    pd.testing.assert_frame_equal(_untimed(read_ledger(broken)), _untimed(read_ledger(a)))
    ra, rb = read_rollouts(a), read_rollouts(broken)
    assert ra["rewards"].map(list).tolist() == rb["rewards"].map(list).tolist()


def test_greedy_float32_answers_on_cuda_equal_cpu(cuda_runs):
    from lze_bench.evaluation.generation import Sampling, load_generator
    from lze_bench.tasks.synthetic import SyntheticTaskConfig, load_split
    import yaml

    a, _, _ = cuda_runs
    checkpoint = str(a / "checkpoints" / f"step_{STEPS:06d}")
    task = yaml.safe_load((a / "config.yaml").read_text())["task"]
    problems = [row["problem"] for row in load_split("test", SyntheticTaskConfig(**task))]
    greedy = Sampling(n=1, temperature=0.0, max_new_tokens=16)
    texts = {}
    for device in ("cpu", "cuda"):
        generator = load_generator(checkpoint, backend="hf", device=device, dtype="float32", batch_size=8)
        results = generator.generate(problems, greedy)
        texts[device] = [c.text for r in results for c in r.completions]
        assert sum(c.tokens for r in results for c in r.completions) > len(problems)  # it generated, not just EOS
    same = np.mean([x == y for x, y in zip(texts["cpu"], texts["cuda"])])
    assert same == 1.0, f"{same:.0%} of greedy answers equal"


def test_eval_command_on_cuda_records_bfloat16_and_repeats_its_samples(cuda_runs, tmp_path):
    """`lze-bench eval run=... device=cuda` (hf, dtype auto) twice on copies of one run: bfloat16 recorded as the
    dtype that ran, and the sampled answers of each checkpoint equal across the two commands (seeded batches)."""
    import json
    import shutil
    import subprocess
    import sys

    a, _, _ = cuda_runs
    data = tmp_path / "data"
    (data / "gsm8k").mkdir(parents=True)
    (data / "gsm8k" / "test.jsonl").write_text('{"question": "6*7?", "answer": "6*7=42\\n#### 42"}\n'
                                               '{"question": "3+4?", "answer": "#### 7"}\n')
    responses = []
    for name in ("first", "second"):
        run = tmp_path / name
        shutil.copytree(a, run, ignore=shutil.ignore_patterns("evals"))
        command = [sys.executable, "-m", "lze_bench.cli", "eval", f"run={run}", f"data.root={data}",
                   "generation.backend=hf", "device=cuda", "eval.benchmarks=[gsm8k]", "eval.max_new_tokens=12",
                   "eval.temperature=1.0", "eval.n_samples=3", "eval.ks=[1,3]", "grading.workers=1",
                   "eval.min_answer_tokens=0"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        summaries = sorted((run / "evals").glob("*/*/summary.json"))
        assert len(summaries) == 3  # the initial policy, checkpoints 2 and 4
        got = []
        for path in summaries:
            summary = json.loads(path.read_text())["gsm8k"]
            assert (summary["dtype"], summary["device"]) == ("bfloat16", "cuda")
            got.append([json.loads(line)["response"] for line in (path.parent / "gsm8k.jsonl").read_text().splitlines()])
        responses.append(got)
    assert responses[0] == responses[1]


# selectors whose defaults need more than the tiny run offers (as in tests/test_train_local.py)
SMALL = {"astral": ["selector.ref_size=4", "selector.buffer_size=4"], "dapo": ["selector.max_gen_batches=2"]}
TRAINED_HEAD = ["selector=astral", "selector.predictor=trained", "selector.ref_size=6", "selector.buffer_size=8",
                "backend.predictor.labeler_steps=[2,3]", "backend.predictor.sft_questions=16",
                "backend.predictor.ref_candidates=24", "backend.predictor.samples=2", "backend.predictor.epochs=2",
                "backend.predictor.hidden_size=32"]


def _selectors() -> list[str]:
    from lze_bench.config import group_options

    return sorted(group_options("selector"))


@pytest.mark.parametrize("name", [*_selectors(), "astral-trained"])
def test_every_selector_trains_on_cuda(cuda_runs, tmp_path, name):
    """Each selector's features (hive's entropies, astral's embeddings and learned head, ...) on the GPU: 3 steps
    finish with a full ledger, and the run records the GPU it computed on."""
    import yaml

    _, _, cache = cuda_runs
    extra = TRAINED_HEAD if name == "astral-trained" else [f"selector={name}", *SMALL.get(name, [])]
    run_dir = tmp_path / name
    _ok(_train(run_dir, cache, "trainer.steps=3", *extra))
    ledger = read_ledger(run_dir)
    assert ledger["step"].tolist() == [0, 1, 2] and (ledger["flops_total"] > 0).all()
    machine = yaml.safe_load((run_dir / "config.yaml").read_text())["machine"]
    assert machine["device"] == "cuda" and machine["gpu"]
