"""The Hugging Face hub path of benchmark loading (lze_bench/data.py `_from_hub`), against a stand-in hub.

No test may reach the network, so `datasets.load_dataset` is replaced by a
stand-in that answers like the hub would for the ids, configs and splits in
tests/data/hub_standin.json (each dataset's real column names and value types,
placeholder texts) and fails like the hub for anything else: an unknown id,
a missing config, an unknown split. It returns real `datasets.Dataset`
objects, so lze-bench reads them exactly as it reads the hub's.

A benchmark registered with a hub id but absent from the stand-in fails here:
add its schema (from its dataset card) to hub_standin.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lze_bench.data import get_spec, load_benchmark
from lze_bench.errors import LzeBenchError
from lze_bench.registry import BENCHMARKS

datasets = pytest.importorskip("datasets", reason="the hub path needs the `hub` extra (datasets)")

HUB = json.loads((Path(__file__).parent / "data" / "hub_standin.json").read_text())

# benchmark -> (split asked of lze-bench, normalized golds, ids), from the stand-in rows by hand
EXPECTED = {
    "gsm8k": (None, ["60", "10400"], ["0", "1"]),
    "math500": (None, ["\\frac{5}{6}", "\\left( 2, \\frac{\\pi}{2} \\right)"],
                ["test/prealgebra/1.json", "test/precalculus/2.json"]),
    "aime25": (None, ["24", "12"], ["0", "1"]),
    "amc23": (None, ["25", "-1"], ["0", "1"]),
    "aime24": (None, ["25", "209"], ["60", "61"]),
    "math": (None, ["4", "2\\sqrt{2}"], ["0", "1"]),
}


class StandInHub:
    """`load_dataset(path, name=None, split=None)` over HUB; records every call."""

    def __init__(self):
        self.calls: list[tuple[str, str | None, str | None]] = []

    def load_dataset(self, path, name=None, split=None, **kwargs):
        self.calls.append((path, name, split))
        if path not in HUB or path.startswith("_"):
            raise FileNotFoundError(f"Dataset '{path}' doesn't exist on the Hub or cannot be accessed.")
        configs = HUB[path]["configs"]
        if name is None:
            if "default" not in configs:
                raise ValueError(f"Config name is missing. Please pick one among the available configs: "
                                 f"{list(configs)}")
            name = "default"
        if name not in configs:
            raise ValueError(f"BuilderConfig '{name}' not found. Available: {list(configs)}")
        if split not in configs[name]:
            raise ValueError(f'Unknown split "{split}". Should be one of {list(configs[name])}.')
        return datasets.Dataset.from_list(configs[name][split])


@pytest.fixture
def hub(monkeypatch, tmp_path):
    stand_in = StandInHub()
    monkeypatch.setattr(datasets, "load_dataset", stand_in.load_dataset)
    monkeypatch.delenv("LZE_BENCH_DATA", raising=False)
    return stand_in


def test_every_hub_benchmark_has_a_stand_in():
    with_hub = sorted(name for name in _all_names() if get_spec(name).hub_id)
    assert with_hub == sorted(EXPECTED)
    assert all(get_spec(name).hub_id in HUB for name in with_hub)


def _all_names() -> list[str]:
    import lze_bench.benchmarks  # noqa: F401  (fills BENCHMARKS)

    return list(BENCHMARKS)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_hub_id_config_split_and_columns(name, hub, tmp_path):
    split, golds, ids = EXPECTED[name]
    rows = load_benchmark(name, root=str(tmp_path), split=split)  # empty data root: the hub is asked
    spec = get_spec(name)
    assert hub.calls == [(spec.hub_id, config, spec.hub_split) for config in spec.hub_configs]
    assert [r["answer"] for r in rows] == golds
    assert [r["id"] for r in rows] == ids
    first = next(iter(HUB[spec.hub_id]["configs"].values()))[spec.hub_split][0]
    assert rows[0]["problem"] in first.values()  # the problem column is the one lze-bench reads


def test_another_split_is_asked_by_its_own_name(hub, tmp_path):
    rows = load_benchmark("gsm8k", root=str(tmp_path), split="train")
    assert hub.calls == [("openai/gsm8k", "main", "train")]
    assert [r["answer"] for r in rows] == ["7", "750"]


def test_local_file_wins_and_the_hub_is_not_asked(hub, tmp_path):
    folder = tmp_path / "aime25"
    folder.mkdir()
    (folder / "test.jsonl").write_text(json.dumps({"question": "Find 1+1.", "answer": "2"}) + "\n")
    assert load_benchmark("aime25", root=str(tmp_path)) == [{"id": "0", "problem": "Find 1+1.", "answer": "2"}]
    assert hub.calls == []


def test_hub_failure_is_one_line_with_the_fix(hub, tmp_path):
    with pytest.raises(LzeBenchError) as info:
        load_benchmark("gsm8k", root=str(tmp_path), split="validation")
    message = str(info.value)
    assert "openai/gsm8k" in message and 'Unknown split "validation"' in message
    assert f"{tmp_path}/gsm8k/validation.jsonl" in message and "\n" not in message
