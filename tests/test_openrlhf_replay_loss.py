"""ASTRAL's replay loss on OpenRLHF 0.11.2 = the local backend's loss, on the same tensors.

OpenRLHF's own `PolicyLoss`, configured from `replay_loss.replay_is_flags()` as
parsed by its own argparse, against `grpo.replay_clip_loss`: per-token loss,
token-mean over micro-batches and DP ranks, and the gradient w.r.t. log pi.
Imports OpenRLHF the way tests/test_openrlhf_hooks.py does (CPU stubs for vllm
and flash_attn only while importing).
"""

from __future__ import annotations

import importlib
import math
import importlib.util
import runpy
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from lze_bench.backends.local.grpo import replay_clip_loss  # noqa: E402
from lze_bench.backends.openrlhf.replay_loss import recentre_rollout_logprobs, replay_is_flags  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
STUBS = REPO / "tests" / "stubs"
STUB_PACKAGES = ("vllm", "flash_attn")
EPS_LOW, EPS_HIGH = 0.2, 0.28


def _import_openrlhf() -> str | None:
    missing = [name for name in STUB_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        sys.path.insert(0, str(STUBS))
    try:
        importlib.import_module("openrlhf.models.loss")
        importlib.import_module("openrlhf.cli.train_ppo_ray")
    except Exception as exc:  # ImportError, or an import-time error of a heavy dependency
        return f"{type(exc).__name__}: {exc}"
    finally:
        if missing:
            sys.path.remove(str(STUBS))
            for name in list(sys.modules):
                if name.split(".")[0] in missing:
                    del sys.modules[name]
    return None


# Every skip for a missing OpenRLHF names the command that installs it.
INSTALL_HINT = "install it: bash .ci/openrlhf.sh (CPU, these tests) or pip install 'lze-bench[openrlhf]' (GPU nodes)"

IMPORT_ERROR = _import_openrlhf()
pytestmark = pytest.mark.skipif(IMPORT_ERROR is not None,
                                reason=f"OpenRLHF 0.11.2 does not import ({IMPORT_ERROR}); {INSTALL_HINT}")


class Parsed(Exception):
    def __init__(self, args):
        super().__init__("parsed")
        self.parsed = args


@pytest.fixture(scope="module")
def parsed_args(tmp_path_factory):
    """OpenRLHF's own argparse and validation on the recipe flags plus ours (stops at get_strategy)."""
    import openrlhf.utils
    import ray
    import yaml

    from lze_bench.backends.openrlhf.command import RunPaths, openrlhf_flags
    from lze_bench.config import compose

    run_dir = tmp_path_factory.mktemp("run")
    spec = yaml.safe_load((REPO / "sweeps" / "qwen25_math_1p5b.yaml").read_text())
    cfg = compose("train", [*spec["overrides"], "selector=uniform", "seed=0", f"run_dir={run_dir}"])
    flags = [*openrlhf_flags(cfg, RunPaths(run_dir)), *replay_is_flags()]

    def stop(args):
        raise Parsed(args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(openrlhf.utils, "get_strategy", stop)
        mp.setattr(ray, "is_initialized", lambda: True)  # no Ray cluster: parsing only
        mp.setattr(sys, "argv", ["train_ppo_ray", *flags])
        with pytest.raises(Parsed) as info:
            runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__")
    return info.value.parsed


def openrlhf_policy_loss(args):
    """`PolicyLoss` exactly as OpenRLHF's `PolicyModelActor` builds it from the parsed args."""
    from openrlhf.models.loss import PolicyLoss

    return PolicyLoss(clip_eps_low=args.actor.eps_clip_low_high[0], clip_eps_high=args.actor.eps_clip_low_high[1],
                      dual_clip=args.actor.dual_clip, token_level_loss=args.actor.loss_agg_mode == "token-mean",
                      policy_loss_type=args.actor.policy_loss_type,
                      is_correction_level=args.algo.advantage.is_correction_level,
                      is_correction_mode=args.algo.advantage.is_correction_mode,
                      is_correction_gating=args.algo.advantage.is_correction_gating,
                      is_correction_threshold=args.algo.advantage.is_correction_threshold)


@pytest.fixture
def per_token_capture(monkeypatch):
    """Records the per-token loss matrix `PolicyLoss.forward` hands to `aggregate_loss`."""
    import openrlhf.models.loss as module

    seen = []
    original = module.aggregate_loss

    def capture(loss, *args, **kwargs):
        seen.append(loss.detach().clone())
        return original(loss, *args, **kwargs)

    monkeypatch.setattr(module, "aggregate_loss", capture)
    return seen


def batch(seed=0, rows=8, width=9, spread=0.6):
    """Random float64 tensors: 4 fresh rows then 4 replayed, right-padded, ratios well off r_old."""
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(rows, width, generator=gen, dtype=torch.float64) * 3  # log pi_old
    logp = old + spread * torch.randn(rows, width, generator=gen, dtype=torch.float64)  # log pi
    stored = old + spread * torch.randn(rows, width, generator=gen, dtype=torch.float64)  # log mu
    lengths = torch.tensor([9, 5, 1, 7, 9, 3, 6, 2])[:rows]
    mask = torch.arange(width)[None, :] < lengths[:, None]
    stored = torch.where(mask, stored, torch.nan)  # a stored log mu has nothing at padding
    adv = torch.tensor([1.3, -0.7, 0.4, -1.1, 0.9, -0.2, -1.6, 0.6], dtype=torch.float64)[:rows, None]
    replayed = torch.arange(rows) >= rows // 2
    return logp, old, stored, adv, mask, replayed


def local_loss(logp, old, stored, adv, mask, replayed):
    """grpo_update's per-token loss, and where its clip binds (the loss is not -A·r there)."""
    mu = torch.where(replayed[:, None], torch.nan_to_num(stored, nan=0.0), old)  # grpo._place pads with 0
    loss, _ = replay_clip_loss(logp, old, mu, adv, EPS_LOW, EPS_HIGH)
    return loss, loss.detach() != (-adv * torch.exp(logp - mu)).detach()


def test_flags_parse_with_openrlhf_argparse(parsed_args):
    a = parsed_args.algo.advantage
    assert (a.is_correction_level, a.is_correction_mode, a.is_correction_gating) == ("token", "clip", "ratio")
    assert list(a.is_correction_threshold) == [0.0, float("inf")]
    assert parsed_args.actor.policy_loss_type == "ppo" and parsed_args.actor.dual_clip is None
    assert parsed_args.actor.loss_agg_mode == "token-mean"
    assert list(parsed_args.actor.eps_clip_low_high) == [EPS_LOW, EPS_HIGH]


def test_per_token_loss_equals_local_grpo(parsed_args, per_token_capture):
    logp, old, stored, adv, mask, replayed = batch()
    ours, binds = local_loss(logp, old, stored, adv, mask, replayed)
    rollout = recentre_rollout_logprobs(old, stored, replayed, mask)
    openrlhf_policy_loss(parsed_args)(logp, old, adv, action_mask=mask.double(), rollout_log_probs=rollout)
    theirs = per_token_capture[0]

    # the clip binds on fresh and replayed tokens alike, so a wrong centre would show
    assert binds[~replayed][mask[~replayed]].float().mean() > 0.1
    assert binds[replayed][mask[replayed]].float().mean() > 0.1
    assert torch.equal(theirs[~replayed], ours[~replayed])  # w = exp(0) = 1: bitwise
    torch.testing.assert_close(theirs[mask], ours[mask], rtol=1e-12, atol=0)
    assert torch.isfinite(theirs).all()  # NaN stored at padding never reaches the loss


def test_recentring_matters(parsed_args, per_token_capture):
    """The test can fail: mu on fresh rows, or no IS factor on replayed rows, changes the loss."""
    logp, old, stored, adv, mask, replayed = batch(seed=1)
    ours, _ = local_loss(logp, old, stored, adv, mask, replayed)
    fn = openrlhf_policy_loss(parsed_args)
    everywhere = torch.where(mask, stored, old)  # stored/vLLM log-probs on fresh rows too: TIS, not ASTRAL
    fn(logp, old, adv, action_mask=mask.double(), rollout_log_probs=everywhere)
    fresh = mask & ~replayed[:, None]
    assert not torch.allclose(per_token_capture[0][fresh], ours[fresh])
    fn(logp, old, adv, action_mask=mask.double(), rollout_log_probs=old)  # IS factor 1: plain PPO on pi/pi_old
    again = mask & replayed[:, None]
    assert not torch.allclose(per_token_capture[1][again], ours[again])


def test_token_mean_and_gradient_over_micro_batches_and_ranks(parsed_args):
    """OpenRLHF's step: 2 DP ranks x 2 micro-batches (gas=2) = our one token-mean over the update."""
    from openrlhf.utils.loss_utils import _optimizer_step_loss_norm

    logp, old, stored, adv, mask, replayed = batch(seed=2)
    mine = logp.clone().requires_grad_(True)
    ours, _ = local_loss(mine, old, stored, adv, mask, replayed)
    total = (ours * mask).sum() / mask.sum()
    total.backward()

    fn, dp, gas = openrlhf_policy_loss(parsed_args), 2, 2
    theirs = logp.clone().requires_grad_(True)
    rollout = recentre_rollout_logprobs(old, stored, replayed, mask)
    shards = [torch.tensor(rows) for rows in ([0, 5], [2, 7], [1, 4], [3, 6])]  # rank r gets shards 2r, 2r+1
    # every rank's masks: what its all-reduce over the DP group sums (no process group on CPU)
    info = {k: torch.as_tensor(v).cpu() for k, v in
            _optimizer_step_loss_norm([mask[s].double() for s in shards], None, dp, gas).items()}
    assert info["batch_num_tokens"] == mask.sum() / gas
    step = 0.0
    for s in shards:
        loss = fn(theirs[s], old[s], adv[s], action_mask=mask[s].double(), rollout_log_probs=rollout[s], **info)[0]
        step = step + loss / gas / dp  # DeepSpeed: 1/gas per micro-batch; DDP: mean over ranks
    step.backward()
    torch.testing.assert_close(step.detach(), total.detach(), rtol=1e-12, atol=0)
    torch.testing.assert_close(theirs.grad, mine.grad, rtol=1e-10, atol=1e-15)
    assert mine.grad[~mask].abs().max() == 0


def test_log_ratio_clamp_is_the_one_difference(parsed_args, per_token_capture):
    """Past |log pi - log pi_old| = 20 OpenRLHF freezes its ratio at e^20; ours keeps growing."""
    logp, old, stored, adv, mask, replayed = batch(seed=3)
    logp = logp.clone()
    logp[1, 0] = old[1, 0] + 25.0  # adv < 0 on row 1: the unclipped side, the ratio counts
    ours, _ = local_loss(logp, old, stored, adv, mask, replayed)
    openrlhf_policy_loss(parsed_args)(logp, old, adv, action_mask=mask.double(),
                                      rollout_log_probs=recentre_rollout_logprobs(old, stored, replayed, mask))
    theirs = per_token_capture[0]
    assert theirs[1, 0] == pytest.approx(-adv[1, 0].item() * math.exp(20.0), rel=1e-12)
    assert ours[1, 0] > 100 * theirs[1, 0]
    other = mask.clone()
    other[1, 0] = False
    torch.testing.assert_close(theirs[other], ours[other], rtol=1e-12, atol=0)


def test_recentre_needs_stored_logprobs_only_for_replayed_rows():
    old = -torch.rand(3, 4, dtype=torch.float64)
    assert torch.equal(recentre_rollout_logprobs(old, None, torch.zeros(3, dtype=torch.bool)), old)
    with pytest.raises(ValueError, match="stored behaviour"):
        recentre_rollout_logprobs(old, None, torch.tensor([False, True, False]))
