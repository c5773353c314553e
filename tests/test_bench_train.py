"""`lze-bench bench train`: where the local step's time goes, as shares of the step and of the machine's matmul rate."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from lze_bench.cli import app


def test_bench_train_accounts_for_the_whole_step_and_states_the_matmul_rate(tmp_path):
    """`lze-bench bench train`: a row per phase whose seconds add up to the step's, each computing phase's FLOP/s
    over the matmul rate measured in the same command, and that rate and thread count in the notes."""
    out = tmp_path / "train.json"
    result = CliRunner().invoke(app, ["bench", "train", "trainer.steps=2", "trainer.batch_size=2",
                                      "trainer.n_samples=2", "trainer.max_new_tokens=8", "backend.threads=1",
                                      "task.num_train=8", "--json", str(out)])
    assert result.exit_code == 0, result.output
    figures = json.loads(out.read_text())
    rows = {row["phase"]: row for row in figures["rows"]}
    whole = rows.pop("whole step")
    assert set(rows) == {"generation", "log-prob passes (old policy, reference)", "training (forward, backward, step)",
                         "held-out eval", "grading", "selection", "rest of the step (advantages, store, bookkeeping)"}
    assert sum(row["seconds"] for row in rows.values()) == pytest.approx(whole["seconds"], rel=1e-9)
    assert sum(row["of step"] for row in rows.values()) == pytest.approx(1.0)
    rate_note = next(n for n in figures["notes"] if n.startswith("matmul rate of this machine"))
    assert "at 1 thread(s)" in rate_note
    peak = float(rate_note.split(": ")[1].split(" FLOP/s")[0])
    for row in (rows["generation"], rows["training (forward, backward, step)"], whole):
        assert row["FLOPs"] > 0 and row["FLOP/s"] == pytest.approx(row["FLOPs"] / row["seconds"])
        assert row["of matmul"] == pytest.approx(row["FLOP/s"] / peak, rel=1e-2)  # the note prints 3 digits
    assert rows["generation"]["generated tokens/s"] > 0
