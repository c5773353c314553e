"""Runs that start from the same policy share its initial held-out eval (lze_bench/backends/local/initial_eval.py).

Through `lze-bench train`: the first run computes and stores it, a run of another selector from the same warm start
books the stored numbers (marked `reused`) and a run whose eval settings differ computes its own; a stored file that
is not one is computed again, with a warning."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from lze_bench.cli import app
from tiny_run import TINY_TRAIN as TINY

runner = CliRunner()
SHORT = ("trainer.steps=1", "trainer.eval_every=0")


def train(run_dir, cache_dir, *extra):
    result = runner.invoke(app, ["train", *TINY, *SHORT, f"backend.cache_dir={cache_dir}", f"run_dir={run_dir}",
                                 *extra])
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result


def initial(run_dir) -> dict:
    rows = [json.loads(line) for line in (run_dir / "heldout.jsonl").read_text().splitlines()]
    return next(r for r in rows if r["updates"] == 0)


def test_a_second_run_from_the_same_policy_books_the_stored_initial_eval(tmp_path, caplog):
    cache = tmp_path / "cache"
    train(tmp_path / "uniform", cache, "selector=uniform")
    first = initial(tmp_path / "uniform")
    stored = list((cache / "initial-evals").glob("*.json"))
    assert "reused" not in first and len(stored) == 1

    train(tmp_path / "lze", cache, "selector=lze")
    second = initial(tmp_path / "lze")
    assert second.pop("reused") == stored[0].stem
    assert second == first  # accuracy, per-level accuracy, problems, FLOPs and the seconds it took where computed

    train(tmp_path / "longer", cache, "selector=uniform", "trainer.max_new_tokens=20")  # other numbers: its own
    assert "reused" not in initial(tmp_path / "longer")
    assert len(list((cache / "initial-evals").glob("*.json"))) == 2

    stored[0].write_text("{not json")
    train(tmp_path / "again", cache, "selector=uniform")
    again = initial(tmp_path / "again")
    assert "reused" not in again and again["accuracy"] == first["accuracy"]
    assert "not a stored initial eval" in caplog.text
    assert json.loads(stored[0].read_text())["accuracy"] == first["accuracy"]  # replaced by the recomputed one


def test_the_key_reads_the_bytes_of_any_dtype_and_changes_with_them():
    """bfloat16 parameters have no NumPy dtype: the key hashes their raw bytes; changing one weight changes it."""
    import torch

    from lze_bench.backends.local import initial_eval

    model = torch.nn.Linear(3, 2).to(torch.bfloat16)

    class Tok:
        pad_token_id, eos_token_id = 0, 1

        def get_vocab(self):
            return {"a": 0, "b": 1}

    rows = [{"problem": "1+1", "answer": 2, "level": 1}]

    def key():
        return initial_eval.key(model, Tok(), rows, max_new_tokens=4, chunk_size=8, grading_mode="boxed",
                                numerics={"device": "cpu"})

    before = key()
    assert before == key()
    with torch.no_grad():
        model.weight[0, 0] += 1
    assert key() != before
