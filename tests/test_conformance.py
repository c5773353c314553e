"""`lze-bench check selector` (lze_bench.conformance): broken selectors fail the property they break, one line
each, exit 1; the example plug-in passes. (Every built-in passing it: tests/test_selector_contracts.py.)"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from lze_bench.cli import app
from plugin_env import BAND, plugin_env  # noqa: F401  (fixture)

runner = CliRunner()


BROKEN = """
    from dataclasses import dataclass

    import numpy as np

    from lze_bench.api import Selector, UpdateDecision


    @dataclass
    class Cfg:
        name: str = "broken"


    class Base(Selector):
        Config = Cfg

        def select_update(self, batch, step, rng):
            return UpdateDecision.keep_all(batch.num_groups)


    class Noisy(Base):
        '''Draws from its own unseeded generator instead of the rng the harness passes.'''
        name = "noisy"

        def __init__(self, config=None, *, num_prompts, batch_size=None):
            super().__init__(config, num_prompts=num_prompts, batch_size=batch_size)
            self.own = np.random.default_rng()

        def select_rollout(self, candidate_ids, budget, step, rng, features=None):
            return candidate_ids[:budget]

        def select_update(self, batch, step, rng):
            return UpdateDecision(keep=self.own.random(batch.num_groups) < 0.5)


    class Forgetful(Base):
        '''Prefers the least-seen prompts but saves none of its counts.'''
        name = "forgetful"

        def __init__(self, config=None, *, num_prompts, batch_size=None):
            super().__init__(config, num_prompts=num_prompts, batch_size=batch_size)
            self.seen = np.zeros(self.num_prompts, dtype=np.int64)

        def select_rollout(self, candidate_ids, budget, step, rng, features=None):
            order = np.argsort(self.seen[candidate_ids], kind="stable")[:budget]
            return candidate_ids[np.sort(order)]

        def observe(self, batch):
            self.seen[batch.prompt_ids] += 1


    class OutOfRange(Base):
        '''Returns ids past the candidates.'''
        name = "out_of_range"

        def select_rollout(self, candidate_ids, budget, step, rng, features=None):
            return candidate_ids[:budget] + self.num_prompts
"""


@pytest.mark.parametrize("cls, prop, words", [
    ("Noisy", "deterministic", "two runs with seed 3 differ"),
    ("Forgetful", "state", "decides otherwise than the unbroken run"),
    ("OutOfRange", "decisions", "not distinct candidates"),
])
def test_a_broken_selector_fails_the_property_it_breaks(plugin_env, cls, prop, words):
    plugin_env.module("broken_selectors", BROKEN)
    result = runner.invoke(app, ["check", "selector", f"broken_selectors:{cls}", "--skip-large"])
    assert result.exit_code == 1, result.output + repr(result.exception)
    line = next(line for line in result.output.splitlines() if line.startswith(f"FAIL {prop}:"))
    assert words in line


def test_the_example_plugin_passes_and_its_step_time_is_printed(plugin_env):
    plugin_env.module("band", BAND)
    result = runner.invoke(app, ["check", "selector", "band:BandSelector", "--skip-large"])
    assert result.exit_code == 0, result.output + repr(result.exception)
    lines = result.output.splitlines()
    assert lines[0] == "selector band"
    assert [line.split(":")[0] for line in lines[1:5]] == ["PASS deterministic", "PASS state", "PASS decisions",
                                                            "PASS booked"]
    assert lines[5].startswith("INFO step time at 10,000 prompts: ") and " ms " in lines[5] and len(lines) == 6


def test_a_target_that_is_not_a_selector_is_one_line(plugin_env):
    result = runner.invoke(app, ["check", "selector", "nonexistent_module:Sel"])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "does not import" in result.output
    result = runner.invoke(app, ["check", "selector", "lzee"])
    assert result.exit_code == 2 and "unknown selector 'lzee'; did you mean 'lze'?" in result.output
