"""The real micro sweep (sweeps/micro.yaml): 6 selectors x 2 seeds on the embedded backend through
submitit's local executor, then `lze-bench report`, asserting on the tables ("Measured outcomes")."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from typer.testing import CliRunner

from lze_bench.cli import app
from lze_bench.sweep.manifest import load_manifest

SELECTORS = ["uniform", "dapo", "astral", "hive", "greso", "lze"]
runner = CliRunner()


@pytest.mark.slow
def test_micro_sweep_then_report(tmp_path):
    sweep_dir = tmp_path / "micro"
    result = runner.invoke(app, ["sweep", "sweep=micro", f"sweep_dir={sweep_dir}", "poll_s=2"])
    assert result.exit_code == 0, result.output
    manifest = load_manifest(sweep_dir)
    assert sorted(manifest["jobs"]) == sorted(f"{s}-s{seed}" for s in SELECTORS for seed in (0, 1))
    assert all(entry["status"] == "done" for entry in manifest["jobs"].values())
    groups = sorted(sorted(names) for names in manifest["pairs"].values())  # paired per seed
    assert groups == [sorted(f"{s}-s{seed}" for s in SELECTORS) for seed in (0, 1)]

    # re-running the same sweep submits nothing: every job is done
    again = runner.invoke(app, ["sweep", "sweep=micro", f"sweep_dir={sweep_dir}", "poll_s=1"])
    assert again.exit_code == 0, again.output
    assert all(e["attempts"] == 1 for e in load_manifest(sweep_dir)["jobs"].values())

    result = runner.invoke(app, ["report", str(sweep_dir), "--name", "micro", "--out-root", str(tmp_path / "reports")])
    assert result.exit_code == 0, result.output
    out = tmp_path / "reports" / "micro"
    t1 = pd.read_csv(out / "table1.csv").set_index(["benchmark", "label"])
    assert list(t1.loc["heldout"].index) == SELECTORS  # the figures' order, baseline first
    assert (t1["seeds"] == 2).all() and t1["accuracy"].between(0, 1).all()
    assert math.isnan(t1.loc[("heldout", "uniform"), "delta"]) and t1.loc[("heldout", "lze"), "pairs"] == 2
    t3 = pd.read_csv(out / "table3.csv").set_index("label")
    assert (t3[["flops_rollout", "flops_logprob", "flops_train"]] > 0).all().all()  # the old-log-prob pass is booked
    assert t3.loc["uniform", "kept_fraction"] == 1.0  # plain GRPO trains on every rolled-out group
    runs = pd.read_csv(out / "runs.csv")
    parts = runs["flops_rollout"] + runs["flops_logprob"] + runs["flops_train"] + runs["flops_select"]
    assert ((runs["flops_total"] - parts).abs() <= 1e-9 * runs["flops_total"]).all()
    t2 = pd.read_csv(out / "table2.csv").set_index(["benchmark", "label"])
    uniform = t2.loc[("heldout", "uniform")]
    assert uniform["reached"] == uniform["seeds"]  # uniform reaches its own target on every seed that has one
    assert uniform["reached"] == 0 or math.isclose(uniform["ratio"], 1.0)
    assert {label for _, label in t2.index} == set(SELECTORS)
    table2 = (out / "table2.md").read_text()
    for label in SELECTORS:
        row = next(line for line in table2.splitlines() if line.startswith(f"| held-out | {label} |"))
        reached = int(t2.loc[("heldout", label), "reached"])
        assert ("not reached" in row) == (reached == 0)
    for fig in ("accuracy_vs_flops", "accuracy_vs_wallclock", "rl_curves", "flops_by_phase", "kept_fraction",
                "pass_rate_distribution"):
        assert (out / f"{fig}.png").exists() and (out / f"{fig}.pdf").exists()
