"""`lze-bench report`: tables and plots from hand-made run directories.

The runs are written through our real writers (Ledger, RolloutLog, append_eval_rows)
with hand-chosen numbers, so every table cell below is computed by hand:

Ledger steps count from 0; held-out accuracy sits on ledger steps 1 and 3 (after 2 and 4
updates); gsm8k evaluates checkpoints step_000000 (initial) and step_000004 (after 4 updates).

selector  seed  held-out acc @2,@4   gsm8k @0,@4   FLOPs/step (rollout, train)  time/step  kept/rolled
uniform   0     0.30, 0.50           0.10, 0.20    100, 100                      10 s       8/8
uniform   1     0.40, 0.60           0.10, 0.30    100, 100                      10 s       8/8
lze       0     0.55, 0.65           0.10, 0.40    100, 50                        8 s       4/8
lze       1     0.50, 0.70           0.10, 0.20    100, 50                        8 s       4/8
dapo      0     0.10, 0.20           -             200, 100                      12 s       8/16
dapo      1     0.15, 0.25           -             200, 100                      12 s       8/16

Held-out target = mean(0.50, 0.60) = 0.55. First eval point >= 0.55:
uniform s0 never, s1 step 4 (800 FLOPs, 40 s) -> D = 800 FLOPs, 40 s;
lze s0 step 2 (300, 16 s), s1 step 4 (600, 32 s) -> ratios 0.375, 0.75: mean 0.5625,
CI half-width t(0.975,1)=12.706 * sd(0.375, 0.75)/sqrt(2) = 12.706 * 0.1875 = 2.382;
dapo never. The initial policy (heldout.jsonl, 0.60) is not an eval point "after training", so it
never counts as reaching. gsm8k target 0.25: uniform s1 at step 4 (800); lze s0 at step 4 (600) -> 0.75, 1/2 seeds.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from lze_bench.ledger import LEDGER_COLUMNS, Ledger, RolloutLog, append_eval_rows
from lze_bench.report import build, main
from lze_bench.report.formats import tex_cell
from lze_bench.report.tables import mean_ci, t975
from lze_bench.rundir import atomic_write_text, mark_done

HELDOUT = {("uniform", 0): (0.30, 0.50), ("uniform", 1): (0.40, 0.60), ("lze", 0): (0.55, 0.65),
           ("lze", 1): (0.50, 0.70), ("dapo", 0): (0.10, 0.20), ("dapo", 1): (0.15, 0.25)}
GSM8K = {("uniform", 0): 0.20, ("uniform", 1): 0.30, ("lze", 0): 0.40, ("lze", 1): 0.20}
COST = {"uniform": (100, 100, 10.0, 8, 8), "lze": (100, 50, 8.0, 8, 4), "dapo": (200, 100, 12.0, 16, 8),
        "hive": (100, 100, 10.0, 8, 8), "astral": (100, 100, 10.0, 8, 8)}
STEPS = 4


def _row(step: int, selector: str, seed: int) -> dict:
    rollout, train, time_s, rolled, kept = COST[selector]
    row = {c: 0 for c in LEDGER_COLUMNS if c not in ("cum_flops", "cum_time_s", "flops_total", "heldout_accuracy")}
    row.update(step=step, prompts_considered=16, prompts_rolled_out=rolled, groups_kept=kept, flops_rollout=rollout,
               flops_train=train, flops_logprob=0, time_step_s=time_s, reward_mean=0.5, partial=False,
               zero_variance_frac=0.25 if selector == "lze" else 0.5)
    if step in (1, 3) and (selector, seed) in HELDOUT:
        row["heldout_accuracy"] = HELDOUT[(selector, seed)][step // 2]
    return row


def make_run(root: Path, selector: str, seed: int, done: bool = True) -> Path:
    run_dir = root / f"{selector}-s{seed}"
    atomic_write_text(run_dir / "config.yaml", f"selector:\n  name: {selector}\nseed: {seed}\n")
    # the local backend's held-out log; its initial-policy row (0.60, above the target) must not count as reached
    atomic_write_text(run_dir / "heldout.jsonl", '{"accuracy": 0.6, "updates": 0}\n')
    ledger, rollouts = Ledger(run_dir), RolloutLog(run_dir)
    for step in range(STEPS):
        ledger.append(_row(step, selector, seed))
        rewards = [[0.0] * 4, [1.0, 0.0, 1.0, 0.0], [1.0] * 4] if step < 2 else [[1.0, 1.0, 1.0, 0.0]]
        rollouts.append(step, [{"step": step, "prompt_id": i, "rewards": r, "response_tokens": [5] * 4, "kept": True}
                               for i, r in enumerate(rewards)])
    if (selector, seed) in GSM8K:
        append_eval_rows(run_dir, [
            {"step": s, "checkpoint": f"step_{s:06d}", "benchmark": "gsm8k", "num_problems": 10,
             "samples_per_problem": 1, "accuracy": acc, "ci_low": 0.0, "ci_high": 1.0, "pass_at_k": acc,
             "maj_at_k": acc, "k": 1}
            for s, acc in ((0, 0.10), (4, GSM8K[(selector, seed)]))])
    if done:
        mark_done(run_dir)
    return run_dir


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sweep") / "runs"
    for selector, seed in HELDOUT:
        make_run(root, selector, seed)
    make_run(root, "hive", 0, done=False)  # unfinished: left out
    return root


def test_t_quantiles_and_ci():
    assert t975(1) == 12.706 and t975(30) == 2.042
    assert abs(t975(60) - 2.000) < 1e-3 and abs(t975(120) - 1.980) < 1e-3  # tables: 2.000, 1.980
    mean, half, n = mean_ci([0.5, 0.6])
    assert (round(mean, 10), round(half, 6), n) == (0.55, round(12.706 * 0.05, 6), 2)
    assert math.isnan(mean_ci([0.3])[1]) and mean_ci([float("nan")])[2] == 0


def test_table1_numbers(runs_root):
    t1 = build(runs_root)["table1"].set_index("label")
    assert list(t1.index) == ["uniform", "dapo", "lze"]  # canonical order; unfinished hive left out
    assert t1.loc["uniform", "acc_heldout"] == pytest.approx(0.55)
    assert t1.loc["uniform", "acc_heldout_ci"] == pytest.approx(12.706 * 0.05)
    assert t1.loc["lze", "acc_heldout"] == pytest.approx(0.675)
    assert t1.loc["lze", "acc_gsm8k"] == pytest.approx(0.30)
    assert math.isnan(t1.loc["dapo", "acc_gsm8k"])
    assert t1.loc["lze", ["flops_rollout", "flops_train", "flops_total"]].tolist() == [400, 200, 600]
    assert t1.loc["dapo", "flops_total"] == 1200
    assert t1.loc["lze", "kept_fraction"] == 0.5 and t1.loc["uniform", "kept_fraction"] == 1.0
    assert t1.loc["dapo", "rolled_out_fraction"] == 1.0 and t1.loc["lze", "rolled_out_fraction"] == 0.5
    assert t1.loc["lze", "wall_time_s"] == 32.0 and t1.loc["lze", "wall_time_s_ci"] == 0.0


def test_initial_policy_point_from_heldout_log(runs_root):
    points = build(runs_root)["points"]
    initial = points[(points["step"] == -1) & (points["benchmark"] == "heldout")]
    assert len(initial) == 6 and (initial["cum_flops"] == 0).all() and (initial["accuracy"] == 0.6).all()


def test_table2_flops_to_reach_uniform(runs_root):
    t2 = build(runs_root)["table2"].set_index(["benchmark", "label"])
    lze = t2.loc[("heldout", "lze")]
    assert lze["target"] == pytest.approx(0.55) and lze["reached"] == 2
    assert lze["flops_ratio"] == pytest.approx(0.5625)
    assert lze["flops_ratio_ci"] == pytest.approx(12.706 * 0.1875)
    assert lze["time_ratio"] == pytest.approx(0.6)
    assert lze["flops_to_target"] == pytest.approx(450)
    uni = t2.loc[("heldout", "uniform")]
    assert (uni["reached"], uni["flops_ratio"], uni["flops_to_target"]) == (1, 1.0, 800)
    assert t2.loc[("heldout", "dapo"), "reached"] == 0
    gsm = t2.loc[("gsm8k", "lze")]  # checkpoint 4 = after 4 updates = ledger step 3 (600 FLOPs)
    assert (gsm["target"], gsm["reached"], gsm["flops_ratio"]) == (pytest.approx(0.25), 1, 0.75)


def test_report_files(runs_root, tmp_path):
    out = main(runs_root, name="fixture", out_root=tmp_path)
    assert out == tmp_path / "fixture"
    table1 = (out / "table1.md").read_text()
    assert "| uniform | 55.0 ± 63.5 | 25.0 ± 63.5 | 4.00e2 | 4.00e2 | 8.00e2 | 1.00 | 40.0 ± 0.0 | 2 |" in table1
    table2 = (out / "table2.md").read_text()
    assert "| held-out | lze | 55.0 | 4.50e2 | 0.56 ± 2.38 | 0.60 ± 2.54 | 2/2 |" in table2
    assert "| held-out | dapo | 55.0 | not reached | not reached | not reached | 0/2 |" in table2
    assert "| gsm8k | lze | 25.0 | 6.00e2 | 0.75 | 0.80 | 1/2 |" in table2
    tex = (out / "table1.tex").read_text()
    assert r"\toprule" in tex and r"\bottomrule" in tex and r"55.0 $\pm$ 63.5" in tex and r"$4.00{\times}10^{2}$" in tex
    assert r"not reached" in (out / "table2.tex").read_text()
    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == 6 and set(runs["final_accuracy_heldout"]) == {0.5, 0.6, 0.65, 0.7, 0.2, 0.25}
    assert pd.read_csv(out / "reach.csv")["flops_to_target"].dropna().tolist().count(800) == 2  # heldout + gsm8k
    for fig in ("accuracy_vs_flops", "kept_fraction", "pass_rate_distribution", "zero_variance"):
        assert (out / f"{fig}.png").stat().st_size > 5000 and (out / f"{fig}.pdf").read_bytes()[:4] == b"%PDF"
    assert "![accuracy_vs_flops](accuracy_vs_flops.png)" in (out / "report.md").read_text()


def test_report_shows_astral_predictor_accuracy(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "uniform", 0)
    run_dir = make_run(root, "astral", 0)
    ledger = pd.read_parquet(run_dir / "ledger.parquet")
    ledger["astral_pred_mae"] = [0.4, float("nan"), 0.2, 0.1]  # step 1: no prediction
    ledger["astral_pred_spearman"] = [0.5, float("nan"), float("nan"), 0.7]
    ledger.to_parquet(run_dir / "ledger.parquet")
    frame = build(root)["predictor"]
    assert frame.to_dict("records") == [{"label": "astral", "seed": 0, "steps": 3, "mae": pytest.approx(0.7 / 3),
                                         "spearman": pytest.approx(0.6), "mae_first": 0.4, "mae_last": 0.1}]
    out = main(root, name="astral", out_root=tmp_path / "reports")
    assert "| astral | 1 | 3 | 0.233 | 0.600 | 0.400 | 0.100 |" in (out / "report.md").read_text()
    assert len(pd.read_csv(out / "astral_predictor.csv")) == 1
    assert "p̂" not in (out / "table1.md").read_text()  # its own section, not a column of Table 1


def test_report_without_uniform_has_no_table2(tmp_path):
    make_run(tmp_path / "runs", "lze", 0)
    report = build(tmp_path / "runs")
    assert report["table2"] is None and report["table1"]["label"].tolist() == ["lze"]
    assert report["predictor"] is None  # no astral run: no predictor section


def test_report_errors_are_one_line(tmp_path):
    from lze_bench.errors import LzeBenchError

    with pytest.raises(LzeBenchError, match="no finished run"):
        build(tmp_path)
    with pytest.raises(LzeBenchError, match="not a directory"):
        build(tmp_path / "missing")


def test_tex_escaping():
    assert tex_cell("a_b 5% 1.5e-03 ± 2 × {x}") == r"a\_b 5\% $1.5{\times}10^{-3}$ $\pm$ 2 $\times$ \{x\}"


def test_import_report_loads_no_torch_or_backend():
    code = ("import sys, lze_bench.report, lze_bench.report.plots; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'openrlhf', 'vllm') "
            "or m.startswith('lze_bench.backends')]; print(bad); assert not bad")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
