"""Results over several sampling seeds (`eval.seeds=[0,1,2]`): one result per seed, one aggregate beside them.

Each seed is its own settings key (settings.py), evaluated, filed and skipped
like any other result. Once every seed of a (checkpoint, benchmark) is
finished, the aggregate is computed from the seeds' per-sample files (the
`<benchmark>.jsonl` of each seed's folder, so results evaluated earlier count
the same as new ones) and written beside them:

    <checkpoint out>/seeds-<group key>/summary.json   benchmark -> mean, per-seed values, std, interval
    <checkpoint out>/seeds-<group key>/summary.csv    the same, one row per benchmark

The group key is settings.group_settings' key (the settings with `seed` = the
sorted seed list), so other seed lists get other folders and never overwrite
each other. The statistics are metrics.summarize_seeds: each metric's mean
over seeds, its per-seed values and their standard deviation (ddof 1), and the
95 % interval over problems of the seed-averaged per-problem values.

Choices where the sources are silent:
- a seed's problems are matched by id, in the first seed's order; seeds whose
  problem ids differ (a data file changed between them) are refused in one
  line rather than averaged;
- the aggregate is recomputed on every run of the command (it is derived, and
  cheap) but rewritten only when it changed, so a re-run with nothing new
  leaves every file as it was;
- token and time counts are summed over seeds (`tokens_per_s` = their ratio).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from lze_bench.errors import LzeBenchError
from lze_bench.evaluation.outputs import finished, read_summary, results_dir, write_summary
from lze_bench.evaluation.settings import group_settings, settings_key

SEEDS_PREFIX = "seeds-"
SUMMED = ("generated_tokens", "generate_s", "grade_s", "grade_timeouts", "grade_errors", "no_answer",
          "truncated_prompts")


def seeds_dir(checkpoint_out: Path, per_seed: list[dict]) -> Path:
    return Path(checkpoint_out) / f"{SEEDS_PREFIX}{settings_key(group_settings(per_seed))}"


def checkpoint_finished(checkpoint_out: Path, keys: list[str], group_key: str, benchmarks: list[str]) -> bool:
    """Has this checkpoint every benchmark under every seed's key (outputs.finished) and, with several seeds,
    in their aggregate (`seeds-<group_key>/summary.json`)? What `sweep status` and eval sweeps count as done."""
    for key in keys:
        folder = results_dir(checkpoint_out, key)
        summary = read_summary(folder)
        if not all(finished(folder, name, key, summary) for name in benchmarks):
            return False
    if len(keys) == 1:
        return True
    aggregate = read_summary(Path(checkpoint_out) / f"{SEEDS_PREFIX}{group_key}")
    return all(name in aggregate for name in benchmarks)


def read_verdicts(path: Path) -> tuple[list[str], np.ndarray, list[list[str | None]]]:
    """(problem ids, correct bool[P, n], extracted answers [P][n]) of one `<benchmark>.jsonl`."""
    rows: dict[str, list[dict]] = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            rows.setdefault(str(record["id"]), []).append(record)
    ids = list(rows)
    samples = [sorted(rows[i], key=lambda r: r["sample"]) for i in ids]
    correct = np.array([[bool(r["correct"]) for r in s] for s in samples], dtype=bool)
    return ids, correct, [[r.get("extracted") for r in s] for s in samples]


def aggregate_target(out_dir: Path, per_seed: list[dict], benchmarks: list[str], entries: list[dict]) -> dict:
    """Write (when changed) and return the seed aggregate of one checkpoint: benchmark -> entry.

    `entries` are the per-seed summary entries of this checkpoint (every seed x benchmark, finished)."""
    from lze_bench.evaluation.metrics import summarize_seeds

    ordered = sorted(per_seed, key=lambda s: s["seed"])
    keys = [settings_key(s) for s in ordered]
    group = group_settings(ordered)
    out = {}
    for name in benchmarks:
        by_key = {e["settings_key"]: e for e in entries if e["benchmark"] == name}
        seed_entries = [by_key[key] for key in keys]
        corrects, answers = _seed_verdicts(out_dir, keys, ordered, name)
        first = seed_entries[0]
        entry = {"benchmark": name, "checkpoint": first["checkpoint"], "step": first["step"], "model": first["model"],
                 "suite": first["suite"], "settings_key": settings_key(group), "settings": group,
                 "seeds": [s["seed"] for s in ordered], "seed_settings_keys": keys,
                 **summarize_seeds(corrects, answers, group["ks"])}
        for field in SUMMED:
            entry[field] = sum(e.get(field) or 0 for e in seed_entries)
        entry["tokens_per_s"] = entry["generated_tokens"] / entry["generate_s"] if entry["generate_s"] > 0 else None
        entry["generation_backend"] = first.get("generation_backend")
        for field in ("cut_response_frac", "cut_prompt_frac"):  # every seed samples the same prompts: the mean share
            shares = [e.get(field) for e in seed_entries]
            if all(isinstance(v, (int, float)) for v in shares):
                entry[field] = sum(shares) / len(shares)
        out[name] = entry
    folder = seeds_dir(out_dir, ordered)
    if _canonical(read_summary(folder)) != _canonical(out):
        write_summary(folder, out)
    return out


def _seed_verdicts(out_dir: Path, keys: list[str], ordered: list[dict], name: str):
    corrects, answers, first_ids = [], [], None
    for key, settings in zip(keys, ordered):
        ids, correct, extracted = read_verdicts(results_dir(out_dir, key) / f"{name}.jsonl")
        if first_ids is None:
            first_ids = ids
        elif sorted(ids) != sorted(first_ids):
            raise LzeBenchError(f"{name}: seed {settings['seed']} (settings {key}) was evaluated on other problems "
                                f"than seed {ordered[0]['seed']}; delete {results_dir(out_dir, key)} and evaluate again")
        position = {problem: row for row, problem in enumerate(ids)}
        order = [position[problem] for problem in first_ids]
        corrects.append(correct[order])
        answers.append([extracted[i] for i in order])
    return corrects, answers


def _canonical(summary: dict) -> str:
    return json.dumps(summary, sort_keys=True, default=float)
