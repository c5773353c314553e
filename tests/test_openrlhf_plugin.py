"""A selector plug-in from a module file in the current directory trains on backend=openrlhf: OpenRLHF 0.11.2's
controller loop on CPU (tests/openrlhf_cpu, the transformers stand-in engine), whose driver and trainer actor
register the plug-in from the run's config.yaml (neither composed the config; without that registration the
trainer actor stops on "unknown selector 'band'"). The cluster's processes start in another directory: the
actors find the module through the driver's directory, which Ray puts on its workers' path for a local
driver, and the folder entry.actor_env adds to their PYTHONPATH (tests/test_openrlhf_plugin_launch.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
STANDINS = REPO / "tests" / "openrlhf_cpu"
sys.path.insert(0, str(STANDINS))
from lze_cpu_standins import harness  # noqa: E402
from lze_cpu_standins.harness import ok  # noqa: E402

sys.path.remove(str(STANDINS))
from plugin_env import BAND, plugin_env  # noqa: E402,F401  (fixture)

pytestmark = harness.slow_openrlhf_marks()

STEPS, BATCH, N, MICRO = 2, 2, 3, 2


def test_a_module_file_plugin_trains_on_openrlhf(plugin_env, tmp_path_factory):
    plugin_env.module("band", BAND)
    with harness.tiny_world(tmp_path_factory.mktemp("plugin")) as world:
        cfg = harness.overrides(world["model"], world["data"], "band:BandSelector", Path("unused"), steps=STEPS,
                                batch=BATCH, n=N, micro=MICRO, extra=("selector.low=0.1",))
        cfg = [item for item in cfg if not item.startswith("run_dir=")]  # the default run directory, named by it
        ok(harness.run_job(cfg, world["cluster"].address))
    from lze_bench.ledger import read_ledger

    (run,) = (plugin_env.root / "runs").iterdir()
    assert run.name.startswith("band-openrlhf-") and (run / "DONE").exists()
    assert read_ledger(run)["step"].tolist() == list(range(STEPS))
    selector = yaml.safe_load((run / "config.yaml").read_text())["selector"]
    assert (selector["name"], selector["plugin"], selector["low"]) == ("band", "band:BandSelector", 0.1)
