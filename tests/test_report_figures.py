"""`lze-bench report` figures and their captions, from hand-made run directories.

Runs are written through the real writers (Ledger, RolloutLog, append_eval_rows).
Per run: 4 ledger steps of 100 FLOPs, 10 s each (2 s of it a held-out eval on
steps 1 and 3), held-out accuracy on steps 1 and 3 plus the initial policy
(heldout.jsonl): 3 measured points per seed. lze_full's numbers are lze's, so
their curves coincide. Ledger extras: `grad_norm` varies, `clip_frac` is 0 at
every step, no `kl` column.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lze_bench.ledger import LEDGER_COLUMNS, Ledger, RolloutLog, append_eval_rows
from lze_bench.report import main
from lze_bench.report.data import hardware
from lze_bench.rundir import atomic_write_text, mark_done

HELDOUT = {("uniform", 0): (0.40, 0.50), ("uniform", 1): (0.40, 0.60), ("lze", 0): (0.55, 0.65),
           ("lze", 1): (0.50, 0.70), ("lze_full", 0): (0.55, 0.65), ("lze_full", 1): (0.50, 0.70)}
CPU_CONFIG = "backend:\n  name: local\n  threads: 1\ndevice: cpu\n"
GPU_CONFIG = ("backend:\n  name: openrlhf\n  gpus_per_node: 8\n  num_nodes: null\n"
              "launcher:\n  nodes: 2\n  gpus_per_node: 0\ndevice: cpu\n")


def make_run(root: Path, selector: str, seed: int, config: str = CPU_CONFIG, grading: str | None = None) -> Path:
    run_dir = root / f"{selector}-s{seed}"
    atomic_write_text(run_dir / "config.yaml", f"selector:\n  name: {selector}\nseed: {seed}\n{config}")
    atomic_write_text(run_dir / "heldout.jsonl", '{"accuracy": 0.3, "problems": 100, "updates": 0}\n')
    ledger, rollouts = Ledger(run_dir), RolloutLog(run_dir)
    for step in range(4):
        row = {c: 0 for c in LEDGER_COLUMNS if c not in ("cum_flops", "cum_time_s", "flops_total", "heldout_accuracy")}
        row.update(step=step, prompts_considered=8, prompts_rolled_out=8, groups_kept=8, flops_rollout=50,
                   flops_logprob=10, flops_train=40, samples=32, generated_tokens=32 * (20 + step), partial=False,
                   time_step_s=10.0, time_eval_s=2.0 if step in (1, 3) else 0.0, reward_mean=0.4 + 0.05 * step,
                   zero_variance_frac=0.5 - 0.1 * step, grad_norm=1.0 + step + seed, clip_frac=0.0, loss=0.1)
        if step in (1, 3):
            row["heldout_accuracy"] = HELDOUT[(selector, seed)][step // 2]
        ledger.append(row)
        rollouts.append(step, [{"step": step, "prompt_id": i, "rewards": [1.0, 0.0], "response_tokens": [5, 5],
                                "kept": True} for i in range(2)])
    if grading is not None:  # evals.parquet rows (ledger.EVAL_COLUMNS), one settings key
        append_eval_rows(run_dir, [
            {"step": s, "checkpoint": f"step_{s:06d}", "benchmark": "gsm8k", "num_problems": 10,
             "samples_per_problem": 1, "accuracy": acc, "ci_low": 0.0, "ci_high": 1.0, "pass_at_k": acc,
             "maj_at_k": acc, "k": 1, "suite": "math_suite", "settings_key": "cccccccccccc", "split": "",
             "temperature": 0.0, "top_p": 1.0, "max_new_tokens": 64, "limit": 10, "seed": 0,
             "prompt_template": "qwen25_math", "chat_template": True, "grading": grading, "generation_backend": "hf",
             "cum_flops": float("nan")}
            for s, acc in ((0, 0.1), (4, 0.3))])
    mark_done(run_dir, {"stopped_by": "budget", "flop_budget": 400.0})
    return run_dir


def _captions(report_md: str) -> dict[str, str]:
    """Figure name -> its caption line in report.md."""
    found = {}
    for line in report_md.splitlines():
        if line.startswith("*Figure "):
            name = line.split("(", 1)[1].split(")", 1)[0]
            found[name] = line
    return found


@pytest.fixture(scope="module")
def cpu_report(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("figs") / "runs"
    for selector, seed in HELDOUT:
        make_run(root, selector, seed, grading="math_verify" if selector == "uniform" else None)
    return main(root, name="figs", out_root=root.parent / "reports")


def test_every_figure_is_written_and_captioned(cpu_report):
    # the summary first; per-benchmark figures: the held-out set's plain, gsm8k's suffixed; one per RL metric
    names = ["summary", "accuracy_vs_flops", "accuracy_vs_flops_gsm8k", "delta_vs_flops", "accuracy_vs_wallclock",
             "accuracy_vs_wallclock_gsm8k", "rl_curves", "rl_curves_response_length", "rl_curves_grad_norm",
             "rl_curves_zero_variance_frac", "flops_by_phase", "kept_fraction", "pass_rate_distribution"]
    for name in names:
        assert (cpu_report / f"{name}.png").stat().st_size > 5000 and (cpu_report / f"{name}.pdf").exists()
    assert not (cpu_report / "accuracy_vs_gpu_hours.png").exists()  # CPU runs: no GPU-hours
    assert not (cpu_report / "delta_vs_flops_gsm8k.png").exists()  # only uniform has gsm8k results: no pair
    text = (cpu_report / "report.md").read_text()
    captions = _captions(text)
    assert list(captions) == names
    for number, name in enumerate(names, start=1):
        assert f"![{name}]({name}.png)\n\n*Figure {number} ({name}).* " in text
    # the summary (its table and Figure 1) comes before Table 1; the other figures at the end
    assert text.index("## Summary") < text.index("*Figure 1 (summary)") < text.index("## Table 1") < \
        text.index("## Figures") < text.index("*Figure 2 (accuracy_vs_flops)")
    curves = [name for name in names if name.startswith(("accuracy", "rl_curves")) or name == "kept_fraction"]
    assert all("min–max over seeds" in captions[name] and "one panel per selector" in captions[name]
               and "drawn in every panel as the reference" in captions[name] for name in curves)


def test_accuracy_captions_count_measured_evals_and_name_coinciding_curves(cpu_report):
    captions = _captions((cpu_report / "report.md").read_text())
    flops = captions["accuracy_vs_flops"]
    # per seed: initial policy + 2 held-out evals; gsm8k checkpoints 0 and 4
    assert "(per seed at most 3)" in flops and "(per seed at most 2)" in captions["accuracy_vs_flops_gsm8k"]
    assert "Curves that coincide (each drawn in its own panel): lze and lze_full (identical)." in flops
    clock = captions["accuracy_vs_wallclock"]
    assert "(CPU, 1 torch thread per run)" in clock and "held-out evals run during training excluded" in clock


def test_rl_curves_draw_what_the_ledgers_measured_and_say_what_is_left_out(cpu_report):
    caption = _captions((cpu_report / "report.md").read_text())["rl_curves"]
    assert "cumulative training FLOPs: reward (mean reward over every rolled-out response of the step)" in caption
    assert ("One figure per metric: reward, response length, grad norm, zero-variance groups (rl_curves, "
            "rl_curves_response_length, rl_curves_grad_norm, rl_curves_zero_variance_frac).") in caption
    assert "KL to reference (no such column in these ledgers)" in caption
    assert "clip fraction (0 at every step of every run: with one PPO epoch" in caption


def test_report_says_which_grading_and_prompt_evals_used(cpu_report):
    text = (cpu_report / "report.md").read_text()
    assert ("Grading and prompts: gsm8k: answers read from math-verify's extraction from the whole response" in text
            and "(`grading=math_verify`), prompt Qwen2.5-Math's convention (the CoT instruction as the system turn)."
            in text)


def test_accuracy_markers_sit_only_at_measured_evals():
    from lze_bench.report.plot_style import plt, styles_for
    from lze_bench.report.plots import accuracy_panel

    measured = {0: [0.0, 3.0, 7.0], 1: [0.0, 4.0, 8.0]}  # two evals after the initial policy, per seed
    points = pd.DataFrame([{"label": "uniform", "seed": seed, "x": x, "accuracy": 0.1 * (k + 1)}
                           for seed, xs in measured.items() for k, x in enumerate(xs)])
    fig, ax = plt().subplots()
    means = accuracy_panel(ax, points, "x", styles_for(["uniform"]))
    marked = [line for line in ax.get_lines() if line.get_marker() not in ("None", None, "") and len(line.get_xdata())]
    assert sorted(float(x) for line in marked for x in line.get_xdata()) == sorted(sum(measured.values(), []))
    mean_line = [line for line in ax.get_lines() if len(line.get_xdata()) == 100]
    assert len(mean_line) == 1 and mean_line[0].get_marker() in ("None", None, "")
    grid, mean = means["uniform"]
    assert grid[0] == 0.0 and grid[-1] == 7.0  # the range both seeds cover
    assert mean[-1] == pytest.approx(100 * (0.3 + 0.2 + 0.1 * 3 / 4) / 2)  # seed 1 interpolated at x = 7
    assert means["_evals"] == {"uniform": 3}
    plt().close(fig)


def test_gpu_runs_get_a_gpu_hours_figure(tmp_path):
    import yaml

    assert hardware(yaml.safe_load(GPU_CONFIG)) == (16, 0)  # backend.gpus_per_node x launcher.nodes
    assert hardware(yaml.safe_load(CPU_CONFIG)) == (0, 1)
    assert hardware({"device": "cuda:0", "backend": {"name": "local"}}) == (1, 0)
    root = tmp_path / "runs"
    for seed in (0, 1):
        make_run(root, "uniform", seed, config=GPU_CONFIG)
    out = main(root, name="gpu", out_root=tmp_path / "reports")
    assert (out / "accuracy_vs_gpu_hours.png").stat().st_size > 5000
    captions = _captions((out / "report.md").read_text())
    assert "Accuracy (held-out) against GPU-hours (16 GPUs per run)" in captions["accuracy_vs_gpu_hours"]
    assert "(16 GPUs per run)" in captions["accuracy_vs_wallclock"]
    assert "wall-clock, CPU" not in (out / "report.md").read_text()
    assert np.isclose(pd.read_csv(out / "runs.csv")["gpus"], 16).all()
