"""`lze-bench report`: tables and plots from hand-made run directories.

The runs are written through our real writers (Ledger, RolloutLog, append_eval_rows)
with hand-chosen numbers, so every table cell below is computed by hand:

Ledger steps count from 0; held-out accuracy sits on ledger steps 1 and 3 (after 2 and 4
updates); the initial policy (heldout.jsonl, 100 problems) scores 0.30; gsm8k evaluates
checkpoints step_000000 (0.10) and step_000004 (after 4 updates = ledger step 3).

selector  seed  held-out @2,@4  gsm8k @4  FLOPs/step (rollout, logprob, train)  cum @2,@4  DONE stopped_by
uniform   0     0.40, 0.50      0.20      100, 25, 75                           400, 800   budget
uniform   1     0.40, 0.60      0.30      100, 25, 75                           400, 800   budget
lze       0     0.55, 0.65      0.40      100, 10, 40                           300, 600   steps (cap)
lze       1     0.50, 0.70      0.20      100, 10, 40                           300, 600   steps (cap)
dapo      0     0.10, 0.20      -         200, 25, 75                           600, 1200  budget
dapo      1     0.15, 0.25      -         200, 25, 75                           600, 1200  budget
(every DONE: flop_budget 800)

Table 1 (held-out): uniform 0.55 ± 12.706·0.05; lze Δ per seed 0.15, 0.10 -> 0.125 ± 12.706·0.025,
not significant; dapo Δ -0.30, -0.35 -> -0.325 ± 0.3177, interval [-0.643, -0.007]: significant.
Table 2 (fraction 0.9, held-out): seed 0 target 0.30 + 0.9·0.20 = 0.48: uniform crosses between
(400, 0.40) and (800, 0.50) at 720, lze between (0, 0.30) and (300, 0.55) at 216 -> 0.3;
seed 1 target 0.57: uniform 740, lze between (300, 0.50) and (600, 0.70) at 405 -> 405/740;
dapo never. gsm8k (a0 0.10): seed 0 target 0.19: uniform 720, lze 180 -> 0.25; seed 1 target
0.28: lze never (0.20).
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
from lze_bench.errors import LzeBenchError
from lze_bench.report.tables import mean_ci, t975
from lze_bench.rundir import atomic_write_text, mark_done

HELDOUT = {("uniform", 0): (0.40, 0.50), ("uniform", 1): (0.40, 0.60), ("lze", 0): (0.55, 0.65),
           ("lze", 1): (0.50, 0.70), ("dapo", 0): (0.10, 0.20), ("dapo", 1): (0.15, 0.25)}
GSM8K = {("uniform", 0): 0.20, ("uniform", 1): 0.30, ("lze", 0): 0.40, ("lze", 1): 0.20}
COST = {"uniform": (100, 25, 75, 10.0, 8, 8), "lze": (100, 10, 40, 8.0, 8, 4), "dapo": (200, 25, 75, 12.0, 16, 8),
        "hive": (100, 25, 75, 10.0, 8, 8), "astral": (100, 25, 75, 10.0, 8, 8), "pods": (100, 10, 40, 10.0, 8, 8)}
STOPPED_BY = {"uniform": "budget", "lze": "steps", "dapo": "budget", "hive": "budget", "astral": "budget",
              "pods": "budget"}
N = 4  # rollouts per rolled-out prompt: the ledger's `samples` = prompts rolled out x N
STEPS = 4


def _row(step: int, selector: str, seed: int) -> dict:
    rollout, logprob, train, time_s, rolled, kept = COST[selector]
    row = {c: 0 for c in LEDGER_COLUMNS if c not in ("cum_flops", "cum_time_s", "flops_total", "heldout_accuracy")}
    row.update(step=step, prompts_considered=16, prompts_rolled_out=rolled, groups_kept=kept, samples=rolled * N,
               flops_rollout=rollout,
               flops_train=train, flops_logprob=logprob, time_step_s=time_s, reward_mean=0.5, partial=False,
               zero_variance_frac=0.25 if selector == "lze" else 0.5, gen_rounds=2 if selector == "dapo" else 1)
    if step in (1, 3) and (selector, seed) in HELDOUT:
        row["heldout_accuracy"] = HELDOUT[(selector, seed)][step // 2]
    return row


SETTINGS = {"split": "", "temperature": 0.0, "top_p": 1.0, "max_new_tokens": 64, "limit": 10, "seed": 0,
            "prompt_template": "default", "chat_template": True, "grading": "boxed"}


def eval_row(step: int, benchmark: str, accuracy: float, suite: str = "math_suite", key: str = "aaaaaaaaaaaa",
             **settings) -> dict:
    """An evals.parquet row (ledger.EVAL_COLUMNS) of checkpoint step_<step>, greedy on 10 problems by default."""
    return {"step": step, "checkpoint": f"step_{step:06d}", "benchmark": benchmark, "num_problems": 10,
            "samples_per_problem": 1, "accuracy": accuracy, "ci_low": 0.0, "ci_high": 1.0, "pass_at_k": accuracy,
            "maj_at_k": accuracy, "k": 1, "suite": suite, "settings_key": key, **{**SETTINGS, **settings},
            "generation_backend": "hf", "cum_flops": float("nan")}


def make_run(root: Path, selector: str, seed: int, done: bool = True, trained=None) -> Path:
    """A finished run; `trained(step)`: the ledger's `responses_trained` of each step (None: a ledger written
    before that column, as every run of the module fixture)."""
    run_dir = root / f"{selector}-s{seed}"
    atomic_write_text(run_dir / "config.yaml", f"selector:\n  name: {selector}\nseed: {seed}\n")
    atomic_write_text(run_dir / "heldout.jsonl", '{"accuracy": 0.3, "problems": 100, "updates": 0}\n')
    ledger, rollouts = Ledger(run_dir), RolloutLog(run_dir)
    for step in range(STEPS):
        ledger.append({**_row(step, selector, seed), **({"responses_trained": trained(step)} if trained else {})})
        rewards = [[0.0] * 4, [1.0, 0.0, 1.0, 0.0], [1.0] * 4] if step < 2 else [[1.0, 1.0, 1.0, 0.0]]
        rollouts.append(step, [{"step": step, "prompt_id": i, "rewards": r, "response_tokens": [5] * 4, "kept": True}
                               for i, r in enumerate(rewards)])
    if (selector, seed) in GSM8K:
        append_eval_rows(run_dir, [eval_row(s, "gsm8k", acc) for s, acc in ((0, 0.10), (4, GSM8K[(selector, seed)]))])
    if done:
        mark_done(run_dir, {"stopped_by": STOPPED_BY[selector], "flop_budget": 800.0})
    return run_dir


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sweep") / "runs"
    for selector, seed in HELDOUT:
        make_run(root, selector, seed)
    make_run(root, "hive", 0, done=False)  # unfinished: left out
    return root


# t(0.975) for df = 1..30 as printed in the usual tables (3 decimals), the values the report used
# before it took its quantiles from SciPy
PRINTED_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
                2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
                2.045, 2.042]
T1 = math.tan(math.pi * 0.475)  # exact t(0.975, df=1): Student's t with one degree of freedom is Cauchy


def test_t_quantiles_and_ci():
    assert t975(1) == pytest.approx(T1, rel=1e-12)
    assert t975(2) == pytest.approx(0.95 / math.sqrt(2 * 0.975 * 0.025), rel=1e-12)  # closed form for df=2
    for df, printed in enumerate(PRINTED_T975, start=1):
        assert abs(t975(df) - printed) <= 5e-4, df  # the same numbers, to the table's rounding
    assert abs(t975(60) - 2.000) < 1e-3 and abs(t975(120) - 1.980) < 1e-3  # tables: 2.000, 1.980
    assert t975(10**7) == pytest.approx(1.959964, abs=1e-6)  # the normal quantile in the limit
    mean, half, n = mean_ci([0.5, 0.6])
    assert (round(mean, 10), half, n) == (0.55, pytest.approx(T1 * 0.05), 2)
    assert math.isnan(mean_ci([0.3])[1]) and mean_ci([float("nan")])[2] == 0


def test_table1_accuracy_at_equal_compute_is_paired_by_seed(runs_root):
    report = build(runs_root)
    assert report["budget"] == 800.0 and report["heldout_problems"] == 100
    t1 = report["table1"].set_index(["benchmark", "label"])
    assert list(t1.loc["heldout"].index) == ["uniform", "dapo", "lze"]  # canonical order; unfinished hive left out
    uni, lze, dapo = (t1.loc[("heldout", label)] for label in ("uniform", "lze", "dapo"))
    assert uni["accuracy"] == pytest.approx(0.55) and uni["accuracy_ci"] == pytest.approx(T1 * 0.05)
    assert (uni["significant"], uni["pairs"]) == ("–", 0)
    assert lze["delta"] == pytest.approx(0.125) and lze["delta_ci"] == pytest.approx(T1 * 0.025)
    assert (lze["significant"], lze["pairs"], lze["capped"]) == ("no", 2, 2)
    assert lze["flops"] == 600 and lze["flops_over_budget"] == pytest.approx(0.75)
    assert dapo["delta"] == pytest.approx(-0.325) and dapo["significant"] == "yes" and dapo["capped"] == 0
    assert dapo["flops_over_budget"] == pytest.approx(1.5)
    gsm = t1.loc[("gsm8k", "lze")]  # checkpoint 4 = after 4 updates; Δ 0.20, -0.10
    assert gsm["delta"] == pytest.approx(0.05) and gsm["significant"] == "no"


def test_table2_compute_to_a_share_of_uniforms_gain(runs_root):
    t2 = build(runs_root)["table2"].set_index(["benchmark", "label"])
    lze = t2.loc[("heldout", "lze")]
    assert lze["target"] == pytest.approx((0.48 + 0.57) / 2) and (lze["reached"], lze["seeds"]) == (2, 2)
    assert lze["flops_to_target"] == pytest.approx((216 + 405) / 2)
    assert lze["ratio"] == pytest.approx(math.sqrt(0.3 * 405 / 740))
    logs = [math.log(0.3), math.log(405 / 740)]
    half = T1 * abs(logs[0] - logs[1]) / math.sqrt(2) / math.sqrt(2)
    assert lze["ratio_low"] == pytest.approx(math.exp(sum(logs) / 2 - half))
    assert lze["significant"] == "no"
    uni = t2.loc[("heldout", "uniform")]
    assert (uni["ratio"], uni["reached"], uni["flops_to_target"]) == (1.0, 2, pytest.approx(730))
    assert t2.loc[("heldout", "dapo"), "reached"] == 0
    gsm = t2.loc[("gsm8k", "lze")]
    assert (gsm["reached"], gsm["ratio"], gsm["flops_to_target"]) == (1, pytest.approx(0.25), pytest.approx(180))


def test_target_fraction_moves_the_target(runs_root):
    from lze_bench.report.paired import ReportOptions

    t2 = build(runs_root, ReportOptions(target_fraction=0.5))["table2"].set_index(["benchmark", "label"])
    # seed 0 target 0.40: uniform reaches it at its first eval (400), lze at 0.1/0.25 of 300 = 120
    assert t2.loc[("heldout", "uniform"), "target"] == pytest.approx((0.40 + 0.45) / 2)
    with pytest.raises(LzeBenchError, match="--target-fraction"):
        ReportOptions(target_fraction=1.5)


def test_first_crossing_interpolates_between_eval_points():
    from lze_bench.report.paired import first_crossing

    curve = pd.DataFrame({"cum_flops": [0.0, 100.0, 200.0, 300.0], "accuracy": [0.3, 0.5, 0.4, 0.7]})
    assert first_crossing(curve, 0.45) == pytest.approx(75.0)
    assert first_crossing(curve, 0.6) == pytest.approx(200 + 100 * 2 / 3)  # the dip to 0.4 does not count
    assert math.isnan(first_crossing(curve, 0.8))


def test_cost_table_books_every_phase(runs_root):
    t3 = build(runs_root)["table3"].set_index("label")
    assert t3.loc["lze", ["flops_rollout", "flops_logprob", "flops_train", "flops_total"]].tolist() == [400, 40, 160, 600]
    assert t3.loc["dapo", "flops_total"] == 1200 and t3.loc["uniform", "steps"] == 4
    assert t3.loc["lze", "kept_fraction"] == 0.5 and t3.loc["dapo", "rolled_out_fraction"] == 1.0
    assert t3.loc["lze", "wall_time_s"] == 32.0 and t3.loc["lze", "wall_time_s_ci"] == 0.0


def test_table3_counts_generated_and_trained_rollouts_per_step(tmp_path):
    """PODS keeps every group but trains 2 of each group's 4 rollouts: 32 generated, 16 trained per step; uniform
    trains all it generates; a ledger without `responses_trained` (older runs) shows "–" for trained."""
    root = tmp_path / "runs"
    make_run(root, "uniform", 0, trained=lambda step: 8 * N)
    make_run(root, "uniform", 1, trained=lambda step: 8 * N)
    make_run(root, "pods", 0, trained=lambda step: 8 * 2)
    make_run(root, "pods", 1, trained=lambda step: 8 * 2 - 4 * (step % 2))  # 16, 12, 16, 12: mean 14
    make_run(root, "lze", 0)  # an older ledger
    t3 = build(root)["table3"].set_index("label")
    assert t3.loc["pods", "generated_per_step"] == 32 and t3.loc["pods", "trained_per_step"] == 15
    assert t3.loc["pods", "trained_per_step_ci"] == pytest.approx(T1 * 1.0)  # seeds 16 and 14: sd √2, /√2
    assert t3.loc["uniform", ["generated_per_step", "trained_per_step"]].tolist() == [32, 32]
    assert t3.loc["lze", "generated_per_step"] == 32 and math.isnan(t3.loc["lze", "trained_per_step"])
    out = main(root, name="pods", out_root=tmp_path / "reports")
    table3 = (out / "table3.md").read_text()
    assert "| pods | 4.00e2 | 4.00e1 | 1.60e2 | 0 | 6.00e2 | 0 | 4.0 | 1.00 | 32.0 | 15.0 | 1.00 |" in table3
    assert "| uniform | 4.00e2 | 1.00e2 | 3.00e2 | 0 | 8.00e2 | 0 | 4.0 | 1.00 | 32.0 | 32.0 | 1.00 |" in table3
    assert "| lze | 4.00e2 | 4.00e1 | 1.60e2 | 0 | 6.00e2 | 0 | 4.0 | 1.00 | 32.0 | – | 0.50 |" in table3
    assert r"32.0 & 15.0 & 1.00" in (out / "table3.tex").read_text()
    runs = pd.read_csv(out / "runs.csv").set_index(["label", "seed"])
    assert runs.loc[("pods", 1), "trained_per_step"] == 14 and runs.loc[("pods", 0), "generated_per_step"] == 32
    assert "Rollouts generated / step" in (out / "report.md").read_text()


def test_initial_policy_point_from_heldout_log(runs_root):
    points = build(runs_root)["points"]
    initial = points[(points["step"] == -1) & (points["benchmark"] == "heldout")]
    assert len(initial) == 6 and (initial["cum_flops"] == 0).all() and (initial["accuracy"] == 0.3).all()


def test_report_files(runs_root, tmp_path):
    out = main(runs_root, name="fixture", out_root=tmp_path)
    assert out == tmp_path / "fixture"
    table1 = (out / "table1.md").read_text()
    # accuracy: seed mean and per-seed range; the interval belongs to the paired Δ only
    assert "| held-out | uniform | 55.0 | 50.0–60.0 | reference | – | 8.00e2 (1.00) | 0/2 | 2 |" in table1
    assert "| held-out | lze | 67.5 | 65.0–70.0 | +12.5 ± 31.8 | no | 6.00e2 (0.75) | 2/2 | 2 |" in table1
    assert "| held-out | dapo | 22.5 | 20.0–25.0 | -32.5 ± 31.8 | yes |" in table1
    summary = (out / "summary.md").read_text()  # sorted by Δ: lze above dapo; Table 2's ratio beside Table 1's Δ
    assert summary.index("| held-out | lze | 0.41 | [0.01, 18.47] | no | 2/2 | +12.5 | [-19.3, +44.3] | no |") < \
        summary.index("| held-out | dapo | not reached | – | – | 0/2 | -32.5 | [-64.3, -0.7] | yes |")
    table2 = (out / "table2.md").read_text()
    assert "| held-out | lze | 52.5 | 3.11e2 | 0.41 | [0.01, 18.47] | no | 2/2 |" in table2
    assert "| held-out | dapo | 52.5 | not reached | not reached | – | – | 0/2 |" in table2
    assert "| gsm8k | lze | 23.5 | 1.80e2 | 0.25 | – | – | 1/2 |" in table2
    table3 = (out / "table3.md").read_text()
    # rollouts generated / step = samples (8 x 4, 16 x 4); trained "–": these ledgers predate responses_trained
    assert "| lze | 4.00e2 | 4.00e1 | 1.60e2 | 0 | 6.00e2 | 0 | 4.0 | 1.00 | 32.0 | – | 0.50 | 32.0 ± 0.0 | 2 |" in table3
    assert "| dapo | 8.00e2 | 1.00e2 | 3.00e2 | 0 | 1.20e3 | 0 | 4.0 | 2.00 | 64.0 | – |" in table3  # rounds per step
    assert "rollouts generated / step | rollouts trained / step | kept frac." in table3
    tex = (out / "table1.tex").read_text()
    assert r"\toprule" in tex and r"\bottomrule" in tex and r"50.0--60.0" in tex and r"$8.00{\times}10^{2}$" in tex
    assert r"not reached" in (out / "table2.tex").read_text()
    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == 6 and set(runs["stopped_by"]) == {"budget", "steps"}
    assert pd.read_csv(out / "reach.csv")["flops_to_target"].dropna().round(6).tolist().count(720) == 3
    for fig in ("accuracy_vs_flops", "accuracy_vs_wallclock", "rl_curves", "flops_by_phase", "kept_fraction",
                "pass_rate_distribution"):
        assert (out / f"{fig}.png").stat().st_size > 5000 and (out / f"{fig}.pdf").read_bytes()[:4] == b"%PDF"
    text = (out / "report.md").read_text()
    assert "![flops_by_phase](flops_by_phase.png)" in text and "lze seed 0, lze seed 1" in text
    assert "100 problems" in text and "5.0 points" in text  # sqrt(0.55 * 0.45 / 100)
    from lze_bench import __version__

    # the provenance line: a folder of runs (no manifest), the version, and these configs record no machine
    assert f"A folder of runs; lze-bench {__version__}; computed on machine not recorded." in text
    # configs without the trainer keys ran GRPO's estimator on binary rewards
    assert ("Training signal, every run: advantages `trainer.advantage_estimator=grpo`, (r − mean) / (std + ε) "
            "over each prompt's rollouts (GRPO); rewards `trainer.reward_shape=binary`, 1 correct, 0 otherwise.") in text


def test_report_shows_astral_predictor_accuracy(tmp_path):
    root = tmp_path / "runs"
    make_run(root, "uniform", 0)
    run_dir = make_run(root, "astral", 0)
    ledger = pd.read_parquet(run_dir / "ledger.parquet")
    ledger["astral_pred_mae"] = [0.4, float("nan"), 0.2, 0.1]  # step 1: no prediction
    ledger["astral_pred_spearman"] = [0.5, float("nan"), float("nan"), 0.7]
    ledger["astral_pred_pearson"] = [0.3, float("nan"), 0.5, float("nan")]
    ledger.to_parquet(run_dir / "ledger.parquet")
    frame = build(root)["predictor"]
    nan = float("nan")
    assert frame.to_dict("records") == [{
        "label": "astral", "seed": 0, "predictor": "kernel", "ran": True, "steps": 3, "mae_first": 0.4,
        "mae_last": 0.1, "mae": pytest.approx(0.7 / 3), "heldout_mae": pytest.approx(nan, nan_ok=True),
        "spearman": pytest.approx(0.6), "heldout_spearman": pytest.approx(nan, nan_ok=True),
        "pearson": pytest.approx(0.4), "heldout_pearson": pytest.approx(nan, nan_ok=True)}]
    out = main(root, name="astral", out_root=tmp_path / "reports")
    text = (out / "report.md").read_text()
    assert "| astral | kernel (cosine, untrained) — ran | 1 | 3 | 0.233 | 0.600 | 0.400 | 0.400 | 0.100 | – | – | – |" in text
    assert len(pd.read_csv(out / "astral_predictor.csv")) == 1
    assert "p̂" not in (out / "table1.md").read_text()  # its own section, not a column of Table 1
    assert "(+offline)" not in text and not (out / "offline.csv").exists()  # no learned head: nothing charged


def test_learned_head_is_shown_beside_the_kernel_and_its_offline_cost_charged(tmp_path):
    """Offline 300 FLOPs (budget 800). astral's curve: (0, .3), (400, .5), (800, .7); charged: shifted by 300, so
    at the budget .5 + .2 * 100 / 400 = .55 (Table 1), and the target .48 (uniform: a0 .3, A .5) is reached at
    360 + 300 = 660 FLOPs against uniform's 720 (Table 2: 0.92; uncharged 360 / 720 = 0.50)."""
    import json

    root = tmp_path / "runs"
    make_run(root, "uniform", 0)
    run_dir = make_run(root, "astral", 0)
    ledger = pd.read_parquet(run_dir / "ledger.parquet")
    ledger["heldout_accuracy"] = [float("nan"), 0.5, float("nan"), 0.7]
    for prefix, values in (("pred", (0.1, 0.8, 0.7)), ("kernel", (0.3, 0.1, 0.2))):
        for name, value in zip(("mae", "spearman", "pearson"), values):
            ledger[f"astral_{prefix}_{name}"] = value
    ledger.to_parquet(run_dir / "ledger.parquet")
    validation = {"trained": {"mae": 0.12, "spearman": 0.9, "pearson": 0.85},
                  "kernel": {"mae": 0.25, "spearman": 0.2, "pearson": 0.1}, "questions": 10, "models": 3}
    (run_dir / "offline_flops.json").write_text(json.dumps({
        "predictor": "trained", "validation": validation, "time_s": {"labeling": 5.0},
        "encoder": str(tmp_path / "cache" / "warmstarts" / "5ddafc36ce68" / "snapshots" / "step_000300"),
        "flops": {"labeling": 200, "encoder": 40, "training": 60, "total": 300}}))
    report = build(root)
    heldout = report["table1"][report["table1"]["benchmark"] == "heldout"]
    assert heldout["label"].tolist() == ["uniform", "astral", "astral (+offline)"]  # the twin follows its selector
    t1 = report["table1"].set_index("label")
    assert t1.loc["astral (+offline)", "accuracy"] == pytest.approx(0.55)
    assert t1.loc["astral (+offline)", "delta"] == pytest.approx(0.05) and t1.loc["astral", "delta"] == pytest.approx(0.2)
    assert t1.loc["astral (+offline)", "flops"] == 800
    t2 = report["table2"].set_index("label")
    assert t2.loc["astral", "ratio"] == pytest.approx(0.5)
    assert t2.loc["astral (+offline)", "ratio"] == pytest.approx(660 / 720)
    assert report["table3"].set_index("label").loc["astral", "offline_flops"] == 300
    out = main(root, name="head", out_root=tmp_path / "reports")
    text = (out / "report.md").read_text()
    assert "| astral | trained head (lze-bench) — ran | 1 | 4 | 0.100 | 0.800 | 0.700 | 0.100 | 0.100 | 0.120 | 0.900 | 0.850 |" in text
    assert "| astral | kernel (cosine, untrained) — beside it, not used | 1 | 4 | 0.300 | 0.100 | 0.200 | 0.300 | 0.300 | 0.250 | 0.200 | 0.100 |" in text
    assert "labelling rollouts 2.00e2, encoder passes 4.00e1, head training 6.00e1; total 3.00e2 FLOPs = 0.38 × the FLOP budget" in text
    assert "| held-out | astral (+offline) | 55.0 | 55.0 | +5.0 |" in (out / "table1.md").read_text()
    summary = pd.read_csv(out / "summary.csv")
    assert summary["label"].tolist()[:2] == ["astral", "astral (+offline)"]
    # the encoder's folder is the machine's: the report keeps the warm-start store's part of it
    assert pd.read_csv(out / "offline.csv")["encoder"].tolist() == ["warmstarts/5ddafc36ce68/snapshots/step_000300"]
    assert "encoder `warmstarts/5ddafc36ce68/snapshots/step_000300`" in text
    for written in out.iterdir():  # no file of the report names the folders of the machine that wrote it
        if written.suffix in (".md", ".csv", ".tex"):
            assert str(tmp_path) not in written.read_text(), written.name
    assert ("ASTRAL's predictor: astral ran predictor=trained (trained head (lze-bench)); astral also appears as "
            "`(+offline)` rows") in text
    assert pd.read_csv(out / "offline.csv")["total"].tolist() == [300]


def test_report_without_uniform_has_no_table2(tmp_path):
    make_run(tmp_path / "runs", "lze", 0)
    report = build(tmp_path / "runs")
    assert report["table2"] is None and report["table3"]["label"].tolist() == ["lze"]
    assert math.isnan(report["table1"]["delta"].iloc[0])
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


# --- which eval results a report uses (report/suites.py) -------------------------------------------------------------


def _two_suites(tmp_path) -> Path:
    """uniform and lze, seed 0: gsm8k greedy on 10 problems (math_suite) and a 2-problem smoke result beside it."""
    root = tmp_path / "runs"
    for selector in ("uniform", "lze"):
        run_dir = make_run(root, selector, 0)
        append_eval_rows(run_dir, [eval_row(s, "gsm8k", 1.0, suite="smoke", key="bbbbbbbbbbbb", limit=2,
                                            temperature=1.0) for s in (0, 4)])
    return root


def test_report_refuses_mixed_eval_settings_and_names_the_choices(tmp_path):
    from typer.testing import CliRunner

    from lze_bench.cli import app

    root = _two_suites(tmp_path)
    result = CliRunner().invoke(app, ["report", str(root), "--out-root", str(tmp_path / "r")])
    assert result.exit_code == 2
    line = result.output.strip()
    assert "\n" not in line and "benchmark gsm8k has eval results under 2 settings" in line
    assert "math_suite aaaaaaaaaaaa (n=1 T=0" in line and "smoke bbbbbbbbbbbb (n=1 T=1" in line and "limit=2" in line
    assert "--eval-suite" in line
    result = CliRunner().invoke(app, ["report", str(root), "--eval-suite", "nosuch", "--out-root", str(tmp_path / "r")])
    assert result.exit_code == 2 and "--eval-suite nosuch: no eval results" in result.output


def test_report_uses_the_chosen_suite_and_names_it(tmp_path):
    root = _two_suites(tmp_path)
    for choice, accuracy in (("math_suite", 0.20), ("bbbbbbbbbbbb", 1.0)):  # a suite name or a settings key
        from lze_bench.report.paired import ReportOptions

        out = main(root, name=choice, out_root=tmp_path / "r", options=ReportOptions(eval_suites=(choice,)))
        t1 = pd.read_csv(out / "table1.csv").set_index(["benchmark", "label"])
        assert t1.loc[("gsm8k", "uniform"), "accuracy"] == pytest.approx(accuracy)
        used = pd.read_csv(out / "benchmarks.csv").iloc[0]
        assert used["benchmark"] == "gsm8k" and used["samples_per_problem"] == 1 and used["runs"] == 2
        assert used["suite"] == ("math_suite" if choice == "math_suite" else "smoke")
        assert str(used["problems"]) == "10"
        text = (out / "report.md").read_text()
        assert "## Eval results used" in text and f"| gsm8k | 10 | 1 | {used['suite']} |" in text


def test_report_averages_eval_seeds_of_one_setting(tmp_path):
    """`eval.seeds=[0,1]` leaves one settings key per seed: one setting, averaged per checkpoint."""
    root = tmp_path / "runs"
    for selector in ("uniform", "lze"):
        run_dir = make_run(root, selector, 0)  # gsm8k under key aaaa... (eval seed 0)
        append_eval_rows(run_dir, [eval_row(s, "gsm8k", acc, key="cccccccccccc", seed=1)
                                   for s, acc in ((0, 0.30), (4, 0.60))])
    report = build(root)
    gsm = report["points"].query("benchmark == 'gsm8k'").set_index(["label", "step"])["accuracy"]
    assert gsm[("uniform", -1)] == pytest.approx(0.20) and gsm[("uniform", 3)] == pytest.approx(0.40)  # (0.2+0.6)/2
    assert gsm[("lze", 3)] == pytest.approx(0.50)  # (0.4 + 0.6) / 2
    used = report["benchmarks"].iloc[0]
    assert used["settings_key"] == "aaaaaaaaaaaa/cccccccccccc" and "seeds=0,1" in used["settings"]
    assert used["eval_seeds"] == "2" and used["eval_points"] == 4  # 2 runs x 2 checkpoints, seeds averaged
    from lze_bench.report.paired import ReportOptions

    one = build(root, ReportOptions(eval_suites=("cccccccccccc",)))  # a seed's key: that seed alone
    assert one["points"].query("benchmark == 'gsm8k' and step == 3 and label == 'lze'")["accuracy"].item() == 0.6
    append_eval_rows(root / "lze-s0", [eval_row(4, "gsm8k", 0.9, key="dddddddddddd", seed=1)])  # e.g. other ks
    with pytest.raises(LzeBenchError, match="lze-s0 step_000004 has eval seed 1 under settings keys cccccccccccc, "
                                            "dddddddddddd"):
        build(root)


def test_report_leaves_out_a_run_whose_final_checkpoint_is_not_evaluated(tmp_path, caplog):
    root = tmp_path / "runs"
    make_run(root, "uniform", 0)
    late = make_run(root, "lze", 0)
    frame = pd.read_parquet(late / "evals.parquet")
    frame[frame["step"] == 0].to_parquet(late / "evals.parquet")  # only the initial policy evaluated so far
    report = build(root)
    assert set(report["points"].query("benchmark == 'gsm8k'")["label"]) == {"uniform"}
    assert "lze-s0 gsm8k" in caplog.text and "final checkpoint not evaluated" in caplog.text


def test_eval_points_sit_at_their_checkpoints_flops(runs_root):
    points = build(runs_root)["points"].query("benchmark == 'gsm8k'")
    # checkpoint step_000004 = after 4 updates = ledger step 3: uniform 4 x 200 FLOPs, lze 4 x 150
    by_label = points.groupby("label")["cum_flops"].max().to_dict()
    assert by_label == {"uniform": 800.0, "lze": 600.0}
    assert (points.loc[points["step"] == -1, "cum_flops"] == 0).all()  # the initial policy


def test_old_evals_parquet_is_refused_in_one_line(tmp_path):
    run_dir = make_run(tmp_path / "runs", "uniform", 0)
    old = pd.read_parquet(run_dir / "evals.parquet").drop(columns=["settings_key", "suite"])
    old.to_parquet(run_dir / "evals.parquet")
    with pytest.raises(LzeBenchError) as info:
        build(tmp_path / "runs")
    message = str(info.value)
    assert "\n" not in message and "no suite, settings_key column(s)" in message and "lze-bench eval run=" in message


def _with_warm_starts(root: Path, per_seed: bool) -> Path:
    """The fixture's runs with config.yaml's warm-start and machine blocks (as the local trainer writes them)."""
    import yaml

    machine = {"device": "cpu", "threads": 1, "cpu_capability": "AVX512", "cpu_vendor": "AuthenticAMD",
               "cpu_model": "AMD EPYC", "torch": "2.13.0+cpu", "machine": "x86_64"}
    for selector, seed in HELDOUT:
        run_dir = make_run(root, selector, seed)
        init = 1000 * seed if per_seed else 0
        block = {"recipe_key": f"key{init}", "init_seed": init, "shipped": True, "heldout_accuracy": 0.4 + seed / 10}
        atomic_write_text(run_dir / "config.yaml", yaml.safe_dump(
            {"selector": {"name": selector}, "seed": seed, "warmstart": block, "machine": machine}))
    return root


def test_report_says_what_its_intervals_vary_over_and_shows_each_initial_policys_pair(tmp_path):
    out = main(_with_warm_starts(tmp_path / "per_seed", per_seed=True), name="per_seed", out_root=tmp_path)
    text = (out / "report.md").read_text()
    assert "Variation the intervals cover: training seeds and the initial policy" in text
    assert "seed 0: init seed 0, 40.0 %; seed 1: init seed 1000, 50.0 %." in text
    assert "shipped with lze-bench" in text and "AMD EPYC (AuthenticAMD, AVX512), 1 torch thread(s)" in text
    table = (out / "table1b.md").read_text()
    assert "seed 0 (initial 40.0 %)" in table and "seed 1 (initial 50.0 %)" in table
    assert "| held-out | lze | +15.0 | +10.0 |" in table  # lze minus uniform at the last eval, seed by seed
    runs = pd.read_csv(out / "runs.csv")
    assert set(runs["init_seed"]) == {0, 1000} and runs["machine"].str.contains("AMD EPYC").all()

    shared = main(_with_warm_starts(tmp_path / "shared", per_seed=False), name="shared", out_root=tmp_path)
    text = (shared / "report.md").read_text()
    assert "training seeds only" in text and "say nothing about another initial policy" in text
    assert not (shared / "table1b.md").exists()


@pytest.mark.parametrize("name, damage, fix", [
    ("DONE", b'{"stopped_by": "bud', "empty it"), ("DONE", b"\xff\xfe", "empty it"), ("DONE", b"[1, 2]", "empty it"),
    ("config.yaml", b"selector: {name: uniform\nseed: [0\n", "restore it"), ("config.yaml", b"\xff\xfe", "restore it"),
    ("config.yaml", b"- 1\n- 2\n", "restore it"),
])
def test_a_damaged_run_file_is_one_line_naming_it_and_left_as_is(tmp_path, name, damage, fix):
    """A DONE that is not a JSON object, a config.yaml that is not YAML or not a mapping."""
    from typer.testing import CliRunner

    from lze_bench.cli import app

    run = make_run(tmp_path / "runs", "uniform", 0)
    (run / name).write_bytes(damage)
    result = CliRunner().invoke(app, ["report", str(tmp_path / "runs"), "--out-root", str(tmp_path / "out")])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith(f"error: {run / name} is damaged and was left as is") and fix in lines[0], lines[0]
    assert (run / name).read_bytes() == damage and not any(p.is_file() for p in (tmp_path / "out").rglob("*"))


def test_report_shows_the_most_cut_eval_point_per_benchmark(tmp_path):
    """Each benchmark's row names its largest shares of cut answers and truncated prompts over its points;
    results from before they were recorded show "-"."""
    root = tmp_path / "runs"
    for selector, cut in (("uniform", 0.125), ("lze", 0.5)):
        run_dir = make_run(root, selector, 0)
        append_eval_rows(run_dir, [eval_row(s, "gsm8k", 0.2, cut_response_frac=cut * s / 4, cut_prompt_frac=0.0)
                                   for s in (0, 4)])
        append_eval_rows(run_dir, [eval_row(s, "math500", 0.2) for s in (0, 4)])  # an older eval: no shares
    out = main(root, name="cut", out_root=tmp_path / "r")
    used = pd.read_csv(out / "benchmarks.csv").set_index("benchmark")
    assert used.loc["gsm8k", "cut_response_frac"] == 0.5 and used.loc["gsm8k", "cut_prompt_frac"] == 0.0
    assert used.loc["math500", ["cut_response_frac", "cut_prompt_frac"]].isna().all()
    text = (out / "report.md").read_text()
    assert "most cut (answers / prompts)" in text and "| 50% / 0% |" in text and "| - |" in text


def test_runs_that_differ_in_more_than_selector_and_seed_are_refused_in_one_line(tmp_path):
    """A folder of runs where lze also had another learning rate and batch size: no paired delta is printed."""
    import yaml
    from typer.testing import CliRunner

    from lze_bench.cli import app

    root = tmp_path / "runs"
    settings = {"uniform": {"lr": 3e-5, "batch_size": 16}, "lze": {"lr": 1e-3, "batch_size": 8}}
    settings["dapo"] = settings["uniform"]
    for selector, seed in HELDOUT:
        run_dir = make_run(root, selector, seed)
        atomic_write_text(run_dir / "config.yaml", yaml.safe_dump(
            {"selector": {"name": selector}, "seed": seed, "trainer": {**settings[selector], "steps": 4},
             "task": {"name": "synthetic", "num_train": 64}, "run_dir": str(run_dir)}))
    result = CliRunner().invoke(app, ["report", str(root), "--out-root", str(tmp_path / "out")])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "trainer.batch_size (16 vs 8), trainer.lr (3e-05 vs 0.001)" in lines[0]
    assert "not only in selector and seed" in lines[0] and not any(p.is_file() for p in (tmp_path / "out").rglob("*"))
    settings["lze"] = settings["uniform"]  # the same settings (run_dir and seed differ anyway): reported
    for selector, seed in HELDOUT:
        atomic_write_text(root / f"{selector}-s{seed}" / "config.yaml", yaml.safe_dump(
            {"selector": {"name": selector}, "seed": seed, "trainer": {**settings[selector], "steps": 4},
             "run_dir": str(root / f"{selector}-s{seed}")}))
    assert build(root)["table3"]["label"].tolist()


def test_a_sweeps_own_axes_may_differ_between_runs_but_nothing_else():
    from lze_bench.report.comparable import check_comparable

    def cfg(selector, lr, steps=4):
        return {"selector": {"name": selector, "keep_ratio": 0.5}, "trainer": {"lr": lr, "steps": steps}}

    swept = [(Path(f"r{i}"), {"trainer.lr": lr}, cfg(sel, lr)) for i, (sel, lr) in
             enumerate([("uniform", 0.1), ("lze", 0.1), ("uniform", 0.2), ("lze", 0.2)])]
    check_comparable(swept)  # lr is an axis (it labels the runs apart); selector keys are the selector's own
    with pytest.raises(LzeBenchError, match=r"runs r0 and r4 differ in trainer.steps \(4 vs 8\)"):
        check_comparable(swept + [(Path("r4"), {"trainer.lr": 0.1}, cfg("lze", 0.1, steps=8))])


def test_runs_given_different_budgets_are_said_to_differ_in_budget_not_to_have_stopped_on_steps(tmp_path):
    """No common FLOP budget because the runs' budgets differ: the report names each budget and its runs."""
    from lze_bench.report.document import _capped

    for selector, budget in (("uniform", 800.0), ("lze", 1600.0)):
        mark_done(make_run(tmp_path / "runs", selector, 0), {"stopped_by": "budget", "flop_budget": budget})
    report = build(tmp_path / "runs")
    assert report["budget"] is None
    text = _capped(report)
    assert "stopped after their step counts" not in text
    assert "different budgets (8.00e2 FLOPs: uniform seed 0; 1.60e3 FLOPs: lze seed 0)" in text
    mark_done(tmp_path / "runs" / "lze-s0", {"stopped_by": "steps"})  # no budget at all: the step count stopped it
    assert "none (its step count): lze seed 0" in _capped(build(tmp_path / "runs"))
