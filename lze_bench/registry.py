"""Plug-ins by name: selectors, backends, tasks, benchmarks, bench commands.

The names are public: configs, the CLI, ledgers and plot legends all use them,
so one name maps to one module and one config option. The order in which
tables, figures and `sweep status` list selectors (`display_order`) lives here
too, below both the report and the sweep packages that use it.
"""

from __future__ import annotations

import difflib
import importlib

from lze_bench.errors import LzeBenchError


class Registry(dict):
    """A dict from name to plug-in whose missing keys raise one helpful line.

    `loader` ("module:function"): registers the built-in entries; it runs once, before the first read of the
    registry. The built-in selectors are registered this way rather than when their package is imported,
    because they import the public API (lze_bench.api), which imports that package's base module: registering
    on package import would import a selector while the API it needs is half-built.
    """

    def __init__(self, kind: str, loader: str | None = None):
        super().__init__()
        self.kind = kind
        self._loader = loader

    def _load(self) -> None:
        if self._loader:
            module, _, function = self._loader.partition(":")
            self._loader = None  # before the call: the loader's own registrations read the registry
            getattr(importlib.import_module(module), function)()

    def __getitem__(self, name):
        self._load()
        return super().__getitem__(name)

    def __contains__(self, name) -> bool:
        self._load()
        return super().__contains__(name)

    def __iter__(self):
        self._load()
        return super().__iter__()

    def __len__(self) -> int:
        self._load()
        return super().__len__()

    def get(self, name, default=None):
        self._load()
        return super().get(name, default)

    def keys(self):
        self._load()
        return super().keys()

    def values(self):
        self._load()
        return super().values()

    def items(self):
        self._load()
        return super().items()

    def add(self, name: str):
        def remember(obj):
            if name in self:
                raise ValueError(f"two {self.kind}s named {name!r}")
            self[name] = obj
            return obj

        return remember

    def __missing__(self, name):
        raise LzeBenchError(unknown_choice(self.kind, name, self))


def unknown_choice(kind: str, name: str, choices) -> str:
    """One line: the unknown value, the closest valid one, and all valid ones."""
    names = sorted(str(c) for c in choices)
    near = difflib.get_close_matches(str(name), names, n=1)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    return f"unknown {kind} {name!r}{hint} (choices: {', '.join(names) or 'none'})"


SELECTORS = Registry("selector", loader="lze_bench.selectors:register_builtins")
BACKENDS = Registry("backend")
TASKS = Registry("task")
BENCHMARKS = Registry("benchmark")  # evaluation datasets (gsm8k, math500, ...)
BENCH_COMMANDS = Registry("bench command")  # `lze-bench bench NAME`
LOGGERS = Registry("logger")  # experiment trackers of `logger=[...]` (lze_bench.tracking)


# Built-in selectors in the order every table, figure and `sweep status` lists them: the
# baseline first (report/plots.py gives each of these a fixed colour).
SELECTOR_ORDER = ("uniform", "dapo", "astral", "hive", "greso", "lze", "lze_full", "mopps", "adarft", "sec", "pods", "speed", "reinforce_ada")


def display_order(labels) -> list[str]:
    """Built-in selectors in SELECTOR_ORDER, then any other label sorted; a variant row `NAME (...)` (the
    report's `astral (+offline)`) right after NAME."""
    labels = set(labels)
    variants = {label for label in labels if " (" in label and label.split(" (")[0] in labels}
    bases = labels - variants
    ordered = [s for s in SELECTOR_ORDER if s in bases] + sorted(bases - set(SELECTOR_ORDER))
    return [name for base in ordered for name in [base, *sorted(v for v in variants if v.split(" (")[0] == base)]]
