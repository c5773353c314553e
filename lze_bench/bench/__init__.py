"""`lze-bench bench NAME`: measured performance figures, printed as a table.

Each module here registers one benchmark in `BENCH_COMMANDS`: a function
`(options: dict[str, str]) -> BenchResult` taking `key=value` options from the
command line. Every result carries the machine it was measured on; `--json
PATH` writes the same figures. Time goals live here, never in unit tests.
"""

from __future__ import annotations

import importlib
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path

from lze_bench.errors import LzeBenchError
from lze_bench.registry import BENCH_COMMANDS

BENCH_MODULES = ("selectors", "grading", "train", "generation", "overhead")


@dataclass
class BenchResult:
    title: str
    rows: list[dict]  # one dict per table row; keys are the columns
    notes: list[str] = field(default_factory=list)
    machine: dict = field(default_factory=lambda: machine_info())


def machine_info() -> dict:
    """What the figures were measured on."""
    info = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
    }
    try:
        import numpy

        info["numpy"] = numpy.__version__
    except ImportError:  # pragma: no cover
        pass
    if "torch" in __import__("sys").modules:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    return info


def _load_modules() -> None:
    for name in BENCH_MODULES:
        importlib.import_module(f"lze_bench.bench.{name}")


def parse_options(args: list[str]) -> dict[str, str]:
    options = {}
    for item in args:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise LzeBenchError(f"bench option {item!r} is not KEY=VALUE")
        options[key.lstrip("-")] = value
    return options


def run_bench(what: str, args: list[str], json_path: Path | None) -> BenchResult:
    _load_modules()
    bench_fn = BENCH_COMMANDS[what]
    result = bench_fn(parse_options(args))
    print_result(result)
    if json_path is not None:
        from lze_bench.rundir import atomic_write_json

        atomic_write_json(json_path, {"title": result.title, "machine": result.machine, "rows": result.rows, "notes": result.notes})
    return result


def print_result(result: BenchResult) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=result.title)
    columns = list(dict.fromkeys(key for row in result.rows for key in row))
    for column in columns:
        table.add_column(column, justify="right")
    for row in result.rows:
        table.add_row(*[_fmt(row.get(column)) for column in columns])
    console = Console(width=max(120, Console().width))
    console.print(table)
    machine = ", ".join(f"{k}={v}" for k, v in result.machine.items())
    console.print(f"machine: {machine}")
    for note in result.notes:
        console.print(f"note: {note}")


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
