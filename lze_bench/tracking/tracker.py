"""One run's rows -> scalar metrics -> every tracker the run asked for (none: a no-op).

A tracker ("sink") is an object with `log(section, metrics, step, cum_flops)`
and `close()`; `metrics` maps full names (`ledger/reward_mean`) to finite
numbers, `section` names the event's axes (`<section>/step`,
`<section>/cum_flops`). Names are in lze_bench/tracking/__init__.py.
"""

from __future__ import annotations

import math
from numbers import Number

# eval row column -> metric name under eval/<benchmark>/ ({k} from the row's `k`)
EVAL_METRICS = {"accuracy": "accuracy", "ci_low": "ci_low", "ci_high": "ci_high", "pass_at_k": "pass@{k}",
                "maj_at_k": "maj@{k}"}


def scalar(value) -> int | float | None:
    """A finite int or float, else None (strings, lists, NaN). Bools become 0/1; ints stay exact."""
    if hasattr(value, "item") and getattr(value, "size", 1) == 1:  # numpy / torch scalars
        value = value.item()
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, Number):
        value = float(value)
        return value if math.isfinite(value) else None
    return None


def scalars(values: dict, prefix: str) -> dict:
    """`{prefix/key: number}` for the keys of `values` that hold a finite number."""
    out = {}
    for key, value in values.items():
        number = scalar(value)
        if number is not None:
            out[f"{prefix}/{key}"] = number
    return out


class Tracker:
    """Fans rows out to `sinks`; closes them on `close()` (or leaving a `with` block)."""

    def __init__(self, sinks: list, backend: str = ""):
        self.sinks = list(sinks)
        self.backend = backend  # the namespace of the backend's own per-step metrics

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __bool__(self) -> bool:
        return bool(self.sinks)

    def log_step(self, row: dict, backend_metrics: dict | None = None) -> None:
        """One ledger row (as Ledger.append returned it) and the backend's own metrics of that step."""
        if not self.sinks:
            return
        metrics = scalars(row, "ledger")
        rolled = scalar(row.get("prompts_rolled_out"))
        if rolled:
            metrics["ledger/kept_fraction"] = float(row["groups_kept"]) / rolled
        metrics.update(scalars(backend_metrics or {}, self.backend))
        self._send("ledger", metrics, int(row["step"]), float(row["cum_flops"]))

    def log_heldout(self, updates: int, accuracy: float, by_level: dict, cum_flops: float) -> None:
        """A held-out eval of the policy after `updates` updates (local backend, heldout.jsonl)."""
        values = {"accuracy": accuracy, **{f"level_{level}": v for level, v in by_level.items()}}
        self._send("heldout", scalars(values, "heldout"), int(updates), float(cum_flops))

    def log_evals(self, rows: list[dict], history: list[dict] = (), sinks: list | None = None) -> None:
        """evals.parquet rows not sent before; one event per checkpoint, every benchmark and setting of it at once,
        named `eval/<benchmark>/<settings_key>/<metric>` so two settings of one checkpoint never share a point.

        `history`: every eval row of the run (these included). A sink that cannot insert a point before later
        ones (TensorBoard: `replace_evals`) gets the whole series of each settings key these rows touch, oldest
        checkpoint first, to replace what it holds, instead of these rows alone."""
        settings = sorted({str(row.get("settings_key")) for row in rows})
        for sink in self.sinks if sinks is None else sinks:
            if history and hasattr(sink, "replace_evals"):
                for key in settings:
                    sink.replace_evals(key, _eval_events([r for r in history if str(r.get("settings_key")) == key]))
                continue
            for step, metrics, cum_flops, keys in _eval_events(rows):
                sink.log("eval", metrics, step, cum_flops, keys=keys)

    def _send(self, section: str, metrics: dict, step: int, cum_flops: float) -> None:
        for sink in self.sinks:
            sink.log(section, metrics, step, cum_flops)

    def close(self) -> None:
        sinks, self.sinks = self.sinks, []
        for sink in sinks:
            sink.close()


def eval_key(row: dict) -> list:
    """What identifies an eval row in evals.parquet (ledger.EVAL_KEY)."""
    return [row["checkpoint"], row["benchmark"], row.get("settings_key")]


def _eval_events(rows: list[dict]) -> list[tuple[int, dict, float, list]]:
    """(checkpoint step, metrics, cum_flops, eval keys) per checkpoint, oldest first."""
    by_step: dict[int, list[dict]] = {}
    for row in rows:
        by_step.setdefault(int(row["step"]), []).append(row)
    events = []
    for step, group in sorted(by_step.items()):
        metrics = {}
        for row in group:
            named = {name.format(k=row.get("k")): row.get(column) for column, name in EVAL_METRICS.items()}
            metrics.update(scalars(named, f"eval/{row['benchmark']}/{row.get('settings_key')}"))
        events.append((step, metrics, float(group[0].get("cum_flops", float("nan"))), [eval_key(r) for r in group]))
    return events
