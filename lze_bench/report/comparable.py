"""Runs compared or averaged in one report must differ only in selector and seed (and the sweep's own axes).

The report pairs each selector's run with uniform's run of the same seed and
averages a label's runs over seeds (paired.py). Runs that also differ in, say,
`trainer.lr` or `task.num_train` would give a delta that mixes the selector
with that setting, so the report refuses them in one line naming the keys.

Settings are config.yaml's keys, flattened (`trainer.lr`), except NOT_SETTINGS:
what the run is (selector, seed), where it lives or runs, where its curves go,
and what the trainers record beside the config (version, commit, warm start, machine). A sweep's other grid axes
(`lze-lr0.001`) are part of the label, so runs are checked within each set of
axis values: runs of different axis values are never paired or averaged.
"""

from __future__ import annotations

from pathlib import Path

from lze_bench.errors import LzeBenchError

NOT_SETTINGS = ("selector", "seed", "run_dir", "launcher", "logger", "tracking", "version", "git_commit",
                "warmstart", "machine", "identity", "lze_bench", "backend.cache_dir")
SHOWN = 4  # differing keys shown with their values; the rest are counted


def settings(cfg: dict, prefix: str = "") -> dict:
    """config.yaml as {dotted key: value}, without NOT_SETTINGS."""
    flat = {}
    for key, value in cfg.items():
        name = f"{prefix}{key}"
        if name in NOT_SETTINGS:
            continue
        if isinstance(value, dict) and value:
            flat.update(settings(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def differing(a: dict, b: dict) -> list[str]:
    missing = object()
    return sorted(k for k in set(a) | set(b) if a.get(k, missing) != b.get(k, missing))


def check_comparable(runs: list[tuple[Path, dict, dict]]) -> None:
    """`runs`: (run dir, the sweep axes besides selector and seed, config.yaml). Raises one line if two runs of
    one set of axis values differ in a setting."""
    first: dict[tuple, tuple[Path, dict]] = {}
    for run_dir, axes, cfg in runs:
        group = tuple(sorted((k, str(v)) for k, v in axes.items()))
        swept = tuple(k.lstrip("+~") for k in axes)  # they differ between groups, and are equal within one
        mine = {k: v for k, v in settings(cfg).items() if not k.startswith(swept)}
        if group not in first:
            first[group] = (run_dir, mine)
            continue
        other_dir, theirs = first[group]
        keys = differing(theirs, mine)
        if keys:
            shown = ", ".join(f"{k} ({theirs.get(k, 'unset')!r} vs {mine.get(k, 'unset')!r})" for k in keys[:SHOWN])
            more = f" and {len(keys) - SHOWN} more" if len(keys) > SHOWN else ""
            raise LzeBenchError(
                f"runs {other_dir} and {run_dir} differ in {shown}{more}, not only in selector and seed: their paired "
                "deltas would mix in those settings; report such runs from separate folders (or sweep the key as a "
                "grid axis, which labels the runs apart)")
