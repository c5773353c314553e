"""lze_bench.state_file: run-state files load without running code, and hold what a resume needs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lze_bench import state_file
from lze_bench.backends.local.grpo import Group
from lze_bench.errors import LzeBenchError
from lze_bench.selectors.base import RolloutBatch
from lze_bench.step_rounds import Held


def held_group() -> Held:
    group = Group(prompt_id=3, gen_step=1, prompt=[5, 6], responses=[np.arange(3), np.arange(2)],
                  behaviour_logprobs=[np.float32([-0.5, -1.25, -2.0]), np.float32([-0.1, -0.2])],
                  rewards=np.float32([1, 0]), train_mask=np.array([True, False]), adv_eps=1e-4)
    row = RolloutBatch(prompt_ids=np.array([3]), rewards=np.float32([[1, 0]]), step=1,
                       response_tokens=np.int32([[3, 2]]), valid=np.array([[True, True]]))
    return Held(group=group, row=row, extend=2)


def optimizer_state() -> dict:
    layer = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=1e-3)
    layer(torch.ones(3)).sum().backward()
    optimizer.step()
    return optimizer.state_dict()


def test_state_written_by_plain_torch_save_loads_back_exactly(tmp_path):
    """Earlier versions wrote these files with torch.save; the same pickles load, field for field."""
    held, optimizer = held_group(), optimizer_state()
    state = {"optimizer": optimizer, "stream": {"epoch": 1, "offset": 4}, "pending": [held],
             "scalar": np.float32(0.25)}
    torch.save(state, tmp_path / "old.pt")
    state_file.save(state, tmp_path / "new.pt")
    for name in ("old.pt", "new.pt"):
        back = state_file.load(tmp_path / name, "fix")
        again = back["pending"][0]
        assert type(again) is Held and type(again.group) is Group and type(again.row) is RolloutBatch
        assert again.extend == 2 and again.group.adv_eps == 1e-4 and again.group.prompt == [5, 6]
        for a, b in zip(again.group.behaviour_logprobs, held.group.behaviour_logprobs):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
        assert again.group.train_mask.tolist() == [True, False] and again.row.response_tokens.dtype == np.int32
        assert back["scalar"] == np.float32(0.25) and type(back["scalar"]) is np.float32
        assert back["optimizer"]["param_groups"] == optimizer["param_groups"]
        for key, value in optimizer["state"][0].items():
            assert torch.equal(back["optimizer"]["state"][0][key], value)


class Unlisted:
    """A class no state file may hold."""


def test_state_a_resume_could_not_read_is_refused_when_saved(tmp_path):
    with pytest.raises(LzeBenchError, match=r"holds .*test_state_file\.Unlisted, which lze_bench\.state_file"):
        state_file.save({"x": Unlisted()}, tmp_path / "s.pt")
    assert list(tmp_path.iterdir()) == []  # neither the file nor its temporary


def test_a_truncated_file_is_damaged_not_refused(tmp_path):
    state_file.save({"groups": [held_group()]}, tmp_path / "s.pt")
    data = (tmp_path / "s.pt").read_bytes()
    (tmp_path / "s.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(Exception) as caught:
        state_file.load(tmp_path / "s.pt", "fix")
    assert not isinstance(caught.value, state_file.UnsafeStateFile)
