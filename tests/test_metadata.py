"""Per-prompt columns (lze_bench.metadata): read from the data or a labels file, recorded in the run directory,
handed to the selectors that read them on both backends, and a labelling cost booked as offline FLOPs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from lze_bench.errors import LzeBenchError
from lze_bench.metadata import PromptMetadata, read_columns

DATA = Path(__file__).parent / "data"


def test_the_synthetic_task_carries_its_level_and_the_difficulty_it_maps_to():
    from lze_bench.tasks.synthetic import SyntheticTaskConfig, load_split

    rows = load_split("train", SyntheticTaskConfig(num_train=30, num_sft=10, num_test=10))
    meta = PromptMetadata.for_run(rows, "synthetic", OmegaConf.create({"name": "uniform"}))
    assert meta.columns["level"].tolist() == [r["level"] for r in rows]
    assert meta.columns["difficulty"].tolist() == [(r["level"] - 1) * 20.0 for r in rows]
    assert sorted(set(meta.columns["level"].tolist())) == [1, 2, 3, 4, 5, 6]


def test_math_rows_carry_level_and_subject_from_the_data():
    from lze_bench.tasks.datasets import DatasetTaskConfig, MathTask

    rows = MathTask.load(DatasetTaskConfig(name="math", dataset="math500", split="test", limit=6), str(DATA))
    raw = [json.loads(line) for line in (DATA / "math500" / "test.jsonl").read_text().splitlines()[:6]]
    meta = PromptMetadata.for_run(rows, "math", OmegaConf.create({"name": "sec"}))
    assert meta.columns["level"].tolist() == [int(r["level"]) for r in raw]
    assert meta.columns["subject"].tolist() == [r["subject"] for r in raw]
    assert "difficulty" not in meta.columns  # MATH has no 0-100 label: adarft needs a labels file
    with pytest.raises(LzeBenchError, match=r"selector.column='difficulty'.*it has: level, subject.*selector.labels"):
        meta.require(["difficulty"], "adarft")


def test_math_level_strings_are_read_and_unknown_levels_left_out():
    from lze_bench.metadata import row_columns

    assert row_columns({"level": "Level 3", "type": "Algebra"}) == {"level": 3, "subject": "Algebra"}
    assert row_columns({"level": "Level ?"}) == {}


def labels_file(tmp_path, values, flops):
    path = tmp_path / "labels.json"
    path.write_text(json.dumps({"columns": {"difficulty": values}, "flops": flops, "source": "64 rollouts"}))
    return path


def test_a_charged_labels_file_is_booked_as_offline_flops_only_when_read(tmp_path):
    from lze_bench.report.offline import offline_flops

    rows = [{"id": i, "level": 1 + i % 2} for i in range(4)]
    path = labels_file(tmp_path, [10, 90, 50, 0], 3.5e12)
    meta = PromptMetadata.for_run(rows, "math", OmegaConf.create({"name": "adarft", "labels": str(path)}))
    reader, other = tmp_path / "reader", tmp_path / "other"
    reader.mkdir(), other.mkdir()
    meta.write(reader, ["difficulty"])
    meta.write(other, ["level"])
    assert offline_flops(reader) == 3.5e12 and offline_flops(other) == 0.0  # the report's `(+offline)` rows
    record = json.loads((reader / "prompt_metadata.json").read_text())
    assert record["columns"]["difficulty"]["charge"] == "offline, 3.5e+12 FLOPs"
    assert record["columns"]["level"]["charge"] == "external, not charged"
    assert read_columns(reader)["difficulty"].tolist() == [10, 90, 50, 0]


def test_an_external_labels_file_is_not_charged(tmp_path):
    path = labels_file(tmp_path, [1, 2, 3], None)
    meta = PromptMetadata.for_run([{"id": i} for i in range(3)], "math", OmegaConf.create({"labels": str(path)}))
    meta.write(tmp_path, ["difficulty"])
    assert not (tmp_path / "offline_flops.json").exists()
    assert json.loads((tmp_path / "prompt_metadata.json").read_text())["columns"]["difficulty"]["charge"] == \
        "external, not charged"


@pytest.mark.parametrize("content,needle", [
    ({"columns": {"difficulty": [1, 2]}}, "has 2 values for 3 train prompts"),
    ({"columns": {"difficulty": [1, 2, "x"]}}, "must be numbers"),
    ({"columns": {"difficulty": [1, 2, 3]}, "flops": -1}, '"flops" must be a number >= 0'),
    ({"rows": []}, 'needs an object "columns"'),
])
def test_a_bad_labels_file_is_one_line_naming_the_field(tmp_path, content, needle):
    path = tmp_path / "labels.json"
    path.write_text(json.dumps(content))
    with pytest.raises(LzeBenchError, match="selector.labels=") as info:
        PromptMetadata.for_run([{"id": i} for i in range(3)], "math", OmegaConf.create({"labels": str(path)}))
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_openrlhf_actor_builds_the_selector_from_the_columns_the_launcher_recorded(tmp_path):
    """launch.write_metadata (the launcher has the rows) -> prompt_metadata.json -> the trainer actor's selector."""
    from lze_bench.backends.openrlhf.context import build_run_selector
    from lze_bench.backends.openrlhf.launch import write_metadata

    rows = [{"id": i, "problem": "p", "answer": "1", "level": 1 + i % 3} for i in range(12)]
    cfg = OmegaConf.create({"selector": {"name": "sec", "column": "level"}, "task": {"name": "math"},
                            "trainer": {"batch_size": 2}, "run_dir": str(tmp_path)})
    write_metadata(cfg, rows, tmp_path)
    selector = build_run_selector(cfg, 12)
    assert selector.arm_of.tolist() == [i % 3 for i in range(12)] and selector.arm_names == ["1", "2", "3"]
    cfg.selector.column = "subject"
    with pytest.raises(LzeBenchError, match=r"selector.column='subject'.*it has: level"):
        write_metadata(cfg, rows, tmp_path)  # refused before any cluster starts


def test_labels_made_from_rollouts_are_charged_to_the_run_that_reads_them_and_dataset_labels_are_not(tmp_path):
    """`lze-bench label` rolls out a reference model on the train prompts and writes AdaRFT's difficulty with the
    rollouts' FLOPs; an adarft run reading the file books them (offline_flops.json, the report's `(+offline)`
    rows); a run on the task's own level records "external, not charged" and books nothing."""
    from typer.testing import CliRunner

    from lze_bench.cli import app
    from lze_bench.flops import FlopModel
    from lze_bench.report.offline import offline_flops
    from tiny_run import TINY_TRAIN

    runner = CliRunner()
    common = [*TINY_TRAIN, f"backend.cache_dir={tmp_path / 'cache'}", "trainer.steps=1"]
    out = tmp_path / "labels.json"
    made = runner.invoke(app, ["label", *common, "--reference", "policy", "--samples", "3", "--out", str(out)])
    assert made.exit_code == 0, made.output + repr(made.exception)
    record = json.loads(out.read_text())
    rate, difficulty = (np.asarray(record["columns"][k]) for k in ("pass_rate", "difficulty"))
    assert rate.shape == (64,) and np.allclose(difficulty, 100 * (1 - rate))
    assert np.all(np.isin(np.round(rate * 3), [0, 1, 2, 3]))  # a share of 3 graded samples
    # the rollouts' FLOPs by the project's FLOP model: between prompts alone and prompts + max_new_tokens each
    from lze_bench.backends.local.heldout import encode_prompts
    from lze_bench.backends.local.model import load_policy
    from lze_bench.config import compose, to_objects
    from lze_bench.tasks.synthetic import load_split

    cfg = to_objects(compose("train", common))
    model, tokenizer = load_policy(record["reference"]["dir"], "cpu")
    prompt_tokens = np.repeat([len(p) for p in encode_prompts(tokenizer, [r["problem"] for r in load_split("train", cfg.task)])], 3)
    flop_model = FlopModel.from_torch_model(model)
    low, high = (flop_model.generation(prompt_tokens, np.full(prompt_tokens.size, n)) for n in (1, 16))
    assert low <= record["flops"] <= high

    charged, own = tmp_path / "charged", tmp_path / "own"
    for run_dir, extra in ((charged, [f"selector.labels={out}"]), (own, [])):
        result = runner.invoke(app, ["train", *common, "selector=adarft", f"run_dir={run_dir}", *extra])
        assert result.exit_code == 0, result.output + repr(result.exception)
    assert offline_flops(charged) == record["flops"] and offline_flops(own) == 0.0
    assert not (own / "offline_flops.json").exists()
    columns = {d: json.loads((d / "prompt_metadata.json").read_text())["columns"] for d in (charged, own)}
    assert columns[charged]["difficulty"]["charge"] == f"offline, {record['flops']:.6g} FLOPs"
    assert columns[charged]["difficulty"]["values"] == pytest.approx(difficulty.tolist())
    assert columns[own]["difficulty"]["charge"] == columns[own]["level"]["charge"] == "external, not charged"


def test_labels_made_for_other_data_are_refused_in_one_line(tmp_path):
    rows = [{"id": i, "problem": f"{i}+1", "answer": str(i + 1)} for i in range(3)]
    from lze_bench.fingerprint import fingerprint

    path = tmp_path / "labels.json"
    path.write_text(json.dumps({"columns": {"difficulty": [1, 2, 3]}, "flops": 5.0,
                                "train_fingerprint": fingerprint(rows[::-1])}))
    with pytest.raises(LzeBenchError, match=r"selector.labels=.*labels made for another train split.*lze-bench label"):
        PromptMetadata.for_run(rows, "synthetic", OmegaConf.create({"labels": str(path)}))
    path.write_text(json.dumps({"columns": {"difficulty": [1, 2, 3]}, "flops": 5.0, "train_fingerprint": fingerprint(rows)}))
    assert PromptMetadata.for_run(rows, "synthetic", OmegaConf.create({"labels": str(path)})).offline_flops(["difficulty"]) == 5.0


def test_a_labels_file_without_the_column_the_selector_reads_is_refused_in_one_line(tmp_path):
    """A misspelt column would leave adarft on the synthetic task's own `difficulty`, the file ignored."""
    from typer.testing import CliRunner

    from lze_bench.cli import app
    from tiny_run import TINY_TRAIN

    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({"columns": {"dificulty": [50.0] * 64}, "flops": None}))
    result = CliRunner().invoke(app, ["train", *TINY_TRAIN, f"backend.cache_dir={tmp_path / 'cache'}",
                                      "trainer.steps=1", "selector=adarft", f"selector.labels={labels}",
                                      f"run_dir={tmp_path / 'run'}"])
    lines = [line for line in result.output.splitlines() if line.strip() and "━" not in line]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert f"selector.labels={labels}: has column(s) 'dificulty', but selector=adarft reads 'difficulty'" in lines[0]
    assert not (tmp_path / "run" / "ledger.parquet").exists()
