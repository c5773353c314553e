"""Selector plug-ins for tests: module files in a temporary directory and a clean plug-in registry.

`plugin_env` (a fixture factory used by tests/test_plugins.py and tests/test_conformance.py) puts a
directory on the path of the test's own process, writes modules and stand-in installed distributions
(a `*.dist-info` folder with `entry_points.txt`, which importlib.metadata finds on sys.path) there,
and afterwards forgets every plug-in the test registered, so each test starts from the built-ins.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

BAND = (Path(__file__).resolve().parents[2] / "examples" / "band_selector" / "band_selector.py").read_text()


class PluginEnv:
    def __init__(self, root: Path):
        self.root = root

    def fresh_process(self) -> None:
        """What a new lze-bench process starts from: no plug-in registered, the test's modules not imported."""
        forget_plugins(self.root.parent)

    def module(self, name: str, source: str) -> Path:
        path = self.root / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        return path

    def distribution(self, dist: str, version: str, entry_points: dict[str, str]) -> None:
        """A stand-in installed distribution declaring `lze_bench.selectors` entry points."""
        info = self.root / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        lines = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
        (info / "entry_points.txt").write_text(f"[lze_bench.selectors]\n{lines}")


def forget_plugins(root: Path) -> None:
    """Forget the registered plug-ins and the modules imported from under `root`, as a fresh process would."""
    from lze_bench import plugins
    from lze_bench.registry import SELECTORS

    for name in list(plugins.PLUGINS):
        SELECTORS.pop(name, None)
    plugins.PLUGINS.clear()
    plugins._BY_CLASS.clear()
    plugins._entry_points_loaded = False
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(root)):
            sys.modules.pop(name, None)


@pytest.fixture
def plugin_env(tmp_path, monkeypatch):
    import importlib

    import lze_bench.selectors  # noqa: F401  (the built-ins are registered before the test's plug-ins)

    root = tmp_path / "plugins"
    root.mkdir()
    monkeypatch.chdir(root)
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    env = PluginEnv(root)
    env.fresh_process()
    yield env
    env.fresh_process()
