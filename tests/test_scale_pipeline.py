"""The scale path's equal-compute pipeline at the CLI, on CPU: `lze-bench sweep` on backend=openrlhf with one FLOP
budget -> `lze-bench eval sweep_dir=` -> `lze-bench report`, per benchmark.

* The sweep: 2 selectors (uniform, lze) x 1 seed, `trainer.flop_budget` with `trainer.steps` only a cap, an HF
  checkpoint at every `trainer.checkpoint_every_flops` and after the last step, submitted through submitit's
  local executor exactly as `lze-bench sweep` does. Each job is `lze-bench train backend=openrlhf`: our entry
  module under OpenRLHF 0.11.2's real controller loop on a private Ray cluster, rolling out with OpenRLHF's own
  vLLM engines on vLLM's CPU build, with the torch policy actor of tests/openrlhf_cpu put in place by
  `backend.driver_wrapper` (the driver runs under tests/openrlhf_cpu/run_entry.py).
* The evals: every checkpoint of every run (and each run's initial policy) on a 2-benchmark suite with `limit`,
  `generation.backend=vllm` (the real engine, one per checkpoint), submitit's local executor (`launcher=local`).

Where vLLM's CPU build is not installed (CI requires it: LZE_BENCH_REQUIRE_VLLM=1) the same pipeline runs with
the transformers stand-in engine and HF generation.
* The report: Table 1 and Table 2 have one row per benchmark and selector, lze paired with uniform on the seed;
  every run stopped on the budget, and each eval point sits at its checkpoint's FLOPs. (Intervals over several
  seed pairs are the report's own arithmetic on run directories, the same for both backends:
  tests/test_eval_pipeline.py checks them on local runs; a second seed here would double the engine runs.)

The benchmarks are gsm8k and math500 by format: a data folder written here holds the tiny policy's own task
("Is i odd? ...", answers 0/1) in each benchmark's file layout, prompted with the template it was trained on.
Slow (about three minutes on 2 cores); skips only when OpenRLHF does not import (CI requires it).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
STANDINS = REPO / "tests" / "openrlhf_cpu"
sys.path.insert(0, str(STANDINS))
from lze_cpu_standins import harness  # noqa: E402
from lze_cpu_standins.harness import PROBLEM  # noqa: E402

sys.path.remove(str(STANDINS))
pytestmark = harness.slow_openrlhf_marks()

ENGINE = harness.engine_under_test()
# the real engine in the evals: eager (no compile cache), float32 as the HF path
GENERATION = (["generation.backend=vllm", "device=cpu", "generation.enforce_eager=true",
               "generation.dtype=float32"]
              if ENGINE == "vllm" else [])
SELECTORS, SEEDS, BENCHMARKS = ["uniform", "lze"], [0], ["gsm8k", "math500"]
BATCH, N, MICRO, CAP = 2, 3, 1, 10


def suite_yaml() -> str:
    from lze_bench.backends.openrlhf.data import PROMPT_TEMPLATE

    return (f"name: two\nbenchmarks: [gsm8k, math500]\nn_samples: 1\ntemperature: 0.0\nmax_new_tokens: 4\n"
            f"ks: [1]\nuse_chat_template: false\nprompt_template: {json.dumps(PROMPT_TEMPLATE)}\n")


def write_benchmarks(root: Path) -> Path:
    """The tiny policy's task in gsm8k's and math500's layouts (problems the training file also has, by format)."""
    (root / "gsm8k").mkdir(parents=True)
    (root / "math500").mkdir()
    with (root / "gsm8k" / "test.jsonl").open("w") as handle:
        for i in range(6):
            handle.write(json.dumps({"question": PROBLEM.format(i=i), "answer": f"#### {i % 2}"}) + "\n")
    with (root / "math500" / "test.jsonl").open("w") as handle:
        for i in range(6, 12):
            handle.write(json.dumps({"problem": PROBLEM.format(i=i), "answer": str(i % 2), "unique_id": f"s/{i}"})
                         + "\n")
    return root


def step_flops(model: Path) -> float:
    """The fewest FLOPs a uniform step books here (every sample's shortest prompt plus one response token;
    generation, old-log-prob forward, 3 F(L) for the update)."""
    from transformers import AutoConfig, AutoTokenizer

    from lze_bench.backends.openrlhf.data import PROMPT_TEMPLATE
    from lze_bench.flops import FlopModel

    flops = FlopModel.from_hf_config(AutoConfig.from_pretrained(model))
    tokenizer = AutoTokenizer.from_pretrained(model)
    shortest = min(len(tokenizer(PROMPT_TEMPLATE.format(problem=PROBLEM.format(i=i)), add_special_tokens=False)
                       ["input_ids"]) for i in range(10))
    return BATCH * N * 5 * flops.forward([shortest + 1])


def cli(args: list[str], env: dict, timeout: int = 1800) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "lze_bench.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    return done


def test_budgeted_openrlhf_sweep_then_eval_sweep_then_report_per_benchmark(tmp_path):
    from lze_bench.ledger import read_evals, read_ledger
    from lze_bench.rundir import list_checkpoints
    from lze_bench.sweep.manifest import load_manifest

    with harness.tiny_world(tmp_path, hidden_size=harness.hidden_size_for(ENGINE), engine=ENGINE) as world:
        model, budget = world["model"], 2.5 * step_flops(world["model"])
        env = harness.child_env(ENGINE, LZE_RAY_ADDRESS=world["cluster"].address, COLUMNS="200",
                                **{harness.ENV_ENGINE: ENGINE})
        sweep_dir = tmp_path / "sweep"
        overrides = harness.overrides(model, world["data"], "uniform", tmp_path / "unused", steps=CAP, batch=BATCH,
                                      n=N, micro=MICRO, checkpoint_every=0,
                                      extra=harness.engine_overrides(ENGINE))
        overrides = [o for o in overrides if not o.startswith(("selector=", "seed=", "run_dir="))]
        cli(["sweep", f"selector={','.join(SELECTORS)}", f"seed={','.join(map(str, SEEDS))}", *overrides,
             f"trainer.flop_budget={budget!r}", f"trainer.checkpoint_every_flops={budget / 2.2!r}",
             f"backend.driver_wrapper=[{sys.executable},{STANDINS / 'run_entry.py'}]",
             "launcher=local", "launcher.array_parallelism=1", f"sweep_dir={sweep_dir}", "poll_s=2"], env)

    # every run stopped on the budget, with checkpoints at the FLOP marks and after its last step
    runs = {}
    for entry in load_manifest(sweep_dir)["jobs"].values():
        run = sweep_dir / entry["run_dir"]
        done = json.loads((run / "DONE").read_text())
        assert done["stopped_by"] == "budget" and done["flop_budget"] == budget and done["steps"] < CAP
        ledger = read_ledger(run)
        assert ledger["cum_flops"].iloc[-1] >= budget > (ledger["cum_flops"].iloc[-2] if len(ledger) > 1 else 0)
        saved = [step for step, _ in list_checkpoints(run)]
        assert saved[-1] == len(ledger) and len(saved) >= 2
        runs[(entry["selector"], entry["seed"])] = run
    assert sorted(runs) == sorted((s, seed) for s in SELECTORS for seed in SEEDS)

    (tmp_path / "two.yaml").write_text(suite_yaml())
    evaluated = cli(["eval", f"sweep_dir={sweep_dir}", f"eval={tmp_path / 'two.yaml'}",
                     f"data.root={write_benchmarks(tmp_path / 'bench')}", "limit=4", "grading.workers=1", "poll_s=2",
                     *GENERATION], harness.child_env(ENGINE, COLUMNS="200"))
    status = cli(["sweep", "status", str(sweep_dir)], harness.child_env(COLUMNS="200"))
    assert "evals eval-two" in status.stdout and f"{len(SELECTORS) * len(SEEDS)} done" in status.stdout, evaluated.stdout
    for run in runs.values():  # the initial policy and every checkpoint, on both benchmarks, at its FLOPs
        ledger, evals = read_ledger(run), read_evals(run)
        if ENGINE == "vllm":  # the real engine generated every answer, at the precision asked for
            assert (evals["generation_backend"] == "vllm").all() and (evals["dtype"] == "float32").all()
        saved = [step for step, _ in list_checkpoints(run)]
        assert sorted(set(evals["step"])) == [0, *saved] and set(evals["benchmark"]) == set(BENCHMARKS)
        for _, row in evals.iterrows():
            expected = 0.0 if row["step"] == 0 else float(ledger.loc[ledger["step"] == row["step"] - 1,
                                                                     "cum_flops"].iloc[0])
            assert row["cum_flops"] == expected

    out_root = tmp_path / "reports"
    cli(["report", str(sweep_dir), "--name", "scale", "--out-root", str(out_root)], harness.child_env())
    out = out_root / "scale"
    t1 = pd.read_csv(out / "table1.csv").set_index(["benchmark", "label"])
    assert sorted(t1.index) == sorted((b, s) for b in BENCHMARKS for s in SELECTORS)
    for bench in BENCHMARKS:
        lze, uniform = t1.loc[(bench, "lze")], t1.loc[(bench, "uniform")]
        assert lze["seeds"] == 1 and lze["pairs"] == 1 and math.isfinite(lze["delta"])  # paired on the seed
        assert math.isnan(uniform["delta"]) and 0 <= uniform["accuracy"] <= 1
        assert lze["capped"] == 0 and uniform["capped"] == 0  # every run stopped on the budget
    t2 = pd.read_csv(out / "table2.csv").set_index(["benchmark", "label"])
    assert sorted(t2.index) == sorted((b, s) for b in BENCHMARKS for s in SELECTORS)
    points = pd.read_csv(out / "points.csv")
    for (label, seed), group in points[points["benchmark"].isin(BENCHMARKS)].groupby(["label", "seed"]):
        at = dict(zip(*(read_ledger(runs[(label, seed)])[c] for c in ("step", "cum_flops"))))
        assert group["cum_flops"].tolist() == pytest.approx([0.0 if s < 0 else at[s] for s in group["step"]],
                                                            rel=1e-9)
    used = pd.read_csv(out / "benchmarks.csv").set_index("benchmark")
    assert list(used.index) == BENCHMARKS and (used["problems"] == 4).all() and (used["suite"] == "two").all()
