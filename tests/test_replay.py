"""`lze-bench replay` at the command line, on hand-made logs in tests/data (selectors.md §8).

tests/data/replay_small.jsonl: prompts 0..5, every prompt once per step,
steps 0, 1, 2 (so epochs 0, 1, 2), n = 4, with prompt entropy. Hand checks
of the pinned choices:
* dapo keeps exactly the groups with mixed rewards, asks for 18 = 3 x 6 more;
* lze epoch 0 keeps every alive group; epoch 1 energies 1: 0.8625, 2:
  0.43125, 5: 0.5625 (0, 3, 4 dead) -> k = 2 keeps {1, 5}; epoch 2: 3 and 5
  (0.8625 each) beat 1 (0.7228);
* lze_full prunes 0 and 4 (solved at steps 0 and 1); epoch 2 re-checks one (0);
* hive (budget 3 = 6 / pool_factor, B = 6): step 0 all unseen (q = 1), median
  entropy 0.6 -> 0, 3, 5; only 5 is informative. Step 1 (v = rng(0,1,0) =
  .89 .56 .80 .96 .06 .24, q = .25 1 1 .25 1 .875) shortlists all six, median
  0.45 -> 1, 3, 4. Step 2: p_easy = p_hard = 0.49 after step 1's adaptation,
  q = .245 .969 1 .120 .245 .875 against v = .08 .40 .60 .15 .12 .33 ->
  shortlist 1, 2, 5, median 0.6 -> 1, 2; 2 is solved;
* greso: step 0 all unseen -> all six, keeps the mixed 1, 2, 5; step 1 skips
  4 (keep 0.5, draw .06), then p_easy = p_hard = 0.49 (1/5 solved, 1/5
  failed); step 2 keeps 1, 2, 5 of the survivors and 2 is solved.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from lze_bench.cli import app

DATA = Path(__file__).parent / "data"
SMALL = DATA / "replay_small.jsonl"
runner = CliRunner()

# selector -> per step (rolled out, kept), prompt ids
PINNED = {
    "uniform": [(list(range(6)), list(range(6)))] * 3,
    "dapo": [(list(range(6)), [1, 2, 5]), (list(range(6)), [1, 2, 5]), (list(range(6)), [1, 3, 5])],
    "lze": [(list(range(6)), [1, 2, 5]), (list(range(6)), [1, 5]), (list(range(6)), [3, 5])],
    "lze_full": [(list(range(6)), [1, 2, 5]), (list(range(6)), [1, 5]), ([0, 1, 2, 3, 5], [3, 5])],
    "hive": [([0, 3, 5], [5]), ([1, 3, 4], [1]), ([1, 2], [1])],
    "greso": [(list(range(6)), [1, 2, 5]), ([0, 1, 2, 3, 5], [1, 2, 5]), ([1, 2, 5], [1, 5])],
    "astral": [([0, 1, 3], [0, 1, 3]), ([2, 4, 5], [2, 4, 5]), ([5], [5])],
}


def replay(*args):
    result = runner.invoke(app, ["replay", *map(str, args)])
    return result


def choices(rows):
    out = []
    for step in sorted({r["step"] for r in rows}):
        here = [r for r in rows if r["step"] == step]
        out.append(([r["prompt_id"] for r in here if r["rolled_out"]], [r["prompt_id"] for r in here if r["kept"]]))
    return out


def read_jsonl(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


@pytest.mark.parametrize("name", sorted(PINNED))
def test_each_selector_pinned_on_small_log(name, tmp_path):
    out = tmp_path / "out.jsonl"
    result = replay(SMALL, f"selector={name}", "--out", out)
    assert result.exit_code == 0, result.output
    assert "total" in result.output
    rows = read_jsonl(out)
    source = read_jsonl(SMALL)
    assert [{k: r[k] for k in source[0]} for r in rows] == source  # the same rows, in order
    assert choices(rows) == PINNED[name]
    assert all(r["rolled_out"] or not r["kept"] for r in rows)
    # a selector that decides per group trains all of a kept group's rollouts and none of another's
    assert all(r["kept_rollouts"] == [r["kept"]] * len(r["rewards"]) for r in rows)


def test_summary_counts_more_and_replay(tmp_path):
    dapo = replay(SMALL, "selector=dapo")
    assert dapo.exit_code == 0 and "more asked" in dapo.output
    total = next(line for line in dapo.output.splitlines() if "total" in line)
    assert [int(x) for x in total.replace("│", " ").split()[1:]] == [18, 18, 9, 0, 72, 36, 54]  # rollouts: x 4
    astral = replay(SMALL, "selector=astral")
    total = next(line for line in astral.output.splitlines() if "total" in line)
    assert [int(x) for x in total.replace("│", " ").split()[1:]] == [18, 7, 7, 3, 28, 28, 1]


def test_astral_replay_never_draws_an_all_correct_or_all_wrong_group(tmp_path):
    """Revised §3 (ray_trainer.py select_buffer): only prompt 5's groups are mixed, and prompt 5 is logged from
    step 1 on. Step 1's pool holds step 0's all-0 / all-1 groups only: nothing to replay (the unfiltered buffer
    replayed one). Later steps replay R = floor(0.5 * 3) = 1 group iff prompt 5 was rolled out before."""
    log = tmp_path / "equal.jsonl"
    rows = [{"step": s, "prompt_id": i, "rewards": [0, 1, 0, 1] if i == 5 else [i % 2] * 4}
            for s in range(10) for i in range(6) if (s, i) != (0, 5)]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    result = replay(log, "selector=astral", "selector.mu=1", "--out", out)
    assert result.exit_code == 0, result.output
    rolled = {(r["step"], r["prompt_id"]) for r in read_jsonl(out) if r["rolled_out"]}
    from lze_bench.config import compose
    from lze_bench.replay import replay_log
    from lze_bench.replay.log import read_log

    summary = replay_log(read_log(log), compose("replay", ["selector=astral", "selector.mu=1"]).selector).summary
    replayed = [row["replayed"] for row in summary]
    assert replayed[:2] == [0, 0]
    assert replayed == [0] + [int(any((t, 5) in rolled for t in range(s))) for s in range(1, 10)]
    assert sum(replayed) >= 1  # the mixed group is replayed once it is in the buffer


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_same_seed_byte_identical_output(suffix, tmp_path):
    first, second = tmp_path / f"a{suffix}", tmp_path / f"b{suffix}"
    for out in (first, second):
        assert replay(SMALL, "selector=lze", "seed=3", "--out", out).exit_code == 0
    assert first.read_bytes() == second.read_bytes()


def run_dir_from_small(tmp_path) -> Path:
    """A run directory as the trainer writes it (ledger.RolloutLog), from the small log."""
    from lze_bench.ledger import RolloutLog

    run_dir = tmp_path / "run"
    log = RolloutLog(run_dir)
    for step, rows in pd.DataFrame(read_jsonl(SMALL)).groupby("step"):
        rows = rows.drop(columns=["prompt_entropy"]).assign(response_tokens=[[5, 6, 7, 8]] * len(rows), kept=True)
        log.append(int(step), rows)
    log.compact()
    return run_dir


def test_rollouts_parquet_and_run_dir_replay_like_jsonl(tmp_path):
    run_dir = run_dir_from_small(tmp_path)
    out = tmp_path / "lze.parquet"
    assert replay(run_dir / "rollouts.parquet", "selector=lze", "--out", out).exit_code == 0
    frame = pd.read_parquet(out)
    assert {"response_tokens", "logged_kept", "rolled_out", "kept"} <= set(frame.columns)
    assert frame["logged_kept"].all()
    rows = frame.to_dict("records")
    assert choices(rows) == PINNED["lze"]
    from_dir = tmp_path / "dir.jsonl"
    assert replay(run_dir, "selector=lze", "--out", from_dir).exit_code == 0
    assert choices(read_jsonl(from_dir)) == PINNED["lze"]


def test_hive_without_prompt_entropy_uses_the_edge_term(tmp_path):
    log = tmp_path / "no_entropy.jsonl"
    log.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "prompt_entropy"}) + "\n"
                           for r in read_jsonl(SMALL)))
    out = tmp_path / "hive.jsonl"
    assert replay(log, "selector=hive", "--out", out).exit_code == 0
    steps = choices(read_jsonl(out))
    assert steps[0][0] == [0, 1, 2]  # all unseen (e = +inf): all pass the median, cap 3 by candidate order
    assert steps[1][0] == [3, 4, 5]  # e = .5 .875 1 inf inf inf: median inf keeps the unseen


def test_astral_with_embeddings_uses_previous_round_as_reference(tmp_path):
    rows = read_jsonl(SMALL)
    angle = {pid: pid * 0.5 for pid in range(6)}
    for row in rows:
        row["prompt_embedding"] = [float(np.cos(angle[row["prompt_id"]])), float(np.sin(angle[row["prompt_id"]]))]
    log = tmp_path / "embed.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "astral.jsonl"
    result = replay(log, "selector=astral", "--out", out)
    assert result.exit_code == 0, result.output
    picked = choices(read_jsonl(out))
    assert [len(rolled) for rolled, _ in picked] == [3, 3, 1]
    # round 1 (step 2): reference = all six prompts revealed in round 0, with their last pass rates
    from lze_bench.selectors.astral_predict import kernel_predict

    emb = np.array([[np.cos(angle[i]), np.sin(angle[i])] for i in range(6)])
    last_rate = np.array([1.0, 0.25, 0.75, 0.0, 1.0, 0.25])  # 0, 1, 3 from step 0; 2, 4, 5 from step 1
    p_hat = kernel_predict(emb, emb, last_rate, 0.1)[1]
    nearest = set(np.argsort(np.abs(p_hat - 0.5))[:2].tolist())  # mu * B_fresh = 2 drawn (tau = 1e-3: no luck)
    assert nearest == {1, 2} and picked[2][0][0] in nearest  # the history predictor would tie 1, 2 and 5


def test_epoch_column_is_honoured(tmp_path):
    log = tmp_path / "epoch0.jsonl"
    log.write_text("".join(json.dumps({**r, "epoch": 0}) + "\n" for r in read_jsonl(SMALL)))
    out = tmp_path / "lze.jsonl"
    assert replay(log, "selector=lze", "--out", out).exit_code == 0
    assert [kept for _, kept in choices(read_jsonl(out))] == [[1, 2, 5], [1, 2, 5], [1, 3, 5]]  # epoch 0: all alive


def test_budget_fraction_override(tmp_path):
    out = tmp_path / "u.jsonl"
    assert replay(SMALL, "selector=uniform", "replay.budget_fraction=0.5", "--out", out).exit_code == 0
    assert [rolled for rolled, _ in choices(read_jsonl(out))] == [[0, 1, 2]] * 3


@pytest.mark.parametrize(
    "name,where,field",
    [("missing", "line 2", "'rewards'"), ("ragged", "line 3", "'rewards'"), ("reward", "line 2", "'rewards'")],
)
def test_malformed_logs_fail_in_one_line(name, where, field):
    result = replay(DATA / f"replay_bad_{name}.jsonl", "selector=lze")
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and where in lines[0] and field in lines[0]


def test_malformed_parquet_names_row_and_field(tmp_path):
    path = tmp_path / "bad.parquet"
    pd.DataFrame({"step": [0, 0], "prompt_id": [0, 1], "rewards": [["1", "0"], ["0", "x"]]}).to_parquet(path)
    result = replay(path, "selector=uniform")
    assert result.exit_code == 2 and "row 1" in result.output and "'rewards'" in result.output
    path = tmp_path / "no_step.parquet"
    pd.DataFrame({"prompt_id": [0], "rewards": [[1.0, 0.0]]}).to_parquet(path)
    result = replay(path, "selector=uniform")
    assert result.exit_code == 2 and "'step'" in result.output and "missing column" in result.output


def test_duplicate_prompt_in_a_step_is_rejected(tmp_path):
    log = tmp_path / "dup.jsonl"
    log.write_text('{"step": 0, "prompt_id": 1, "rewards": [1, 0]}\n{"step": 0, "prompt_id": 1, "rewards": [0, 0]}\n')
    result = replay(log, "selector=uniform")
    assert result.exit_code == 2 and "line 2" in result.output and "'prompt_id'" in result.output


@pytest.mark.parametrize("name,p_after", [("greso", (0.49, 0.49)), ("hive", (0.49, 0.49))])
def test_round_samplers_finish_each_logged_step(name, p_after):
    """Each logged step is one complete update (B = m): counters reset, exploration adapted (spec §8)."""
    from lze_bench.config import compose
    from lze_bench.replay import AstralReference, LogFeatures, ReplayResult, replay_step
    from lze_bench.replay.log import read_log
    from lze_bench.selectors import build_selector
    from lze_bench.selectors.base import step_rng

    log = read_log(SMALL)
    selector = build_selector(compose("train", [f"selector={name}"]).selector, num_prompts=log.num_prompts,
                              batch_size=6)
    result = ReplayResult.for_log(log)
    features, reference = LogFeatures(log), AstralReference(selector, log)
    for step in (0, 1):
        selector.begin_epoch(step, step_rng(0, step, 2))
        rows = np.flatnonzero(log.step == step)
        summary = replay_step(selector, log, rows, step, step, 0, None, features, reference, result)
        assert summary["more_asked"] > 0  # short of B = 6: it would have asked for more
        state = selector.state_dict()
        assert (state["kept_so_far"], state["gen_rounds"], state["rolled_step"]) == (0, 0, 0)
    assert (round(selector.history.p_easy, 6), round(selector.history.p_hard, 6)) == p_after


def test_mopps_replays_its_pool_share_of_each_logged_step(tmp_path):
    out = tmp_path / "mopps.jsonl"
    assert replay(SMALL, "selector=mopps", "selector.ts_ratio=3", "--out", out).exit_code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    picked = choices(rows)
    assert [len(rolled) for rolled, _ in picked] == [2, 2, 2]  # floor(6 rows / ts_ratio 3)
    assert all(kept == rolled for rolled, kept in picked)  # every rolled-out group reaches the update


def test_column_readers_replay_with_the_columns_recorded_beside_the_log(tmp_path):
    from lze_bench.metadata import PromptMetadata

    line = replay(SMALL, "selector=sec", "--out", tmp_path / "x.jsonl").output.strip().splitlines()
    assert len(line) == 1 and "selector.column='level'" in line[0] and "it has: none" in line[0]
    log = tmp_path / "run" / "rollouts.jsonl"
    log.parent.mkdir()
    log.write_text(SMALL.read_text())
    meta = PromptMetadata(6)
    meta.add("difficulty", np.array([0.0, 20, 40, 60, 80, 100]), "test")
    meta.write(log.parent, ["difficulty"])
    out = tmp_path / "adarft.jsonl"
    assert replay(log, "selector=adarft", "--out", out).exit_code == 0
    picked = choices([json.loads(r) for r in out.read_text().splitlines()])
    assert picked[0][0] == [0, 1, 2]  # T = 0: the three easiest of the six logged prompts (budget 6 // 2)


# PODS with m = 2 of n = 4 (0/1 rewards, stable descending order: correct rollouts first in generation order).
# Subsets i = 2 (top two), then 0 (bottom two), then 1 (top one + bottom one), moving on a strictly larger
# variance: two correct of four keep the top and the bottom one; three correct keep the bottom two (one right,
# one wrong); any other group has no subset with more variance than the top two.
PODS_KEPT = {(1, 1, 0, 0): [True, False, False, True], (1, 1, 1, 0): [False, False, True, True]}


def test_pods_replays_the_rollouts_it_would_train(tmp_path):
    out = tmp_path / "pods.jsonl"
    result = replay(SMALL, "selector=pods", "--out", out)
    assert result.exit_code == 0, result.output
    rows = read_jsonl(out)
    assert all(r["rolled_out"] and r["kept"] for r in rows)  # PODS chooses rollouts, not prompts
    assert [r["kept_rollouts"] for r in rows] == [PODS_KEPT.get(tuple(r["rewards"]), [True, True, False, False])
                                                 for r in rows]
    total = next(line for line in result.output.splitlines() if "total" in line)
    assert [int(x) for x in total.replace("│", " ").split()[1:]] == [18, 18, 18, 9, 72, 36]  # 2 of 4 trained
    assert "rollouts trained" in result.output
    # a run directory's log of a pods run: its own flags stay beside the replay's, renamed
    run_dir = run_dir_from_small(tmp_path)
    logged = pd.read_parquet(run_dir / "rollouts.parquet").assign(kept_rollouts=[[True, False, True, False]] * 18)
    logged.to_parquet(run_dir / "rollouts.parquet")
    out = tmp_path / "pods.parquet"
    assert replay(run_dir / "rollouts.parquet", "selector=pods", "--out", out).exit_code == 0
    frame = pd.read_parquet(out)
    assert [list(v) for v in frame["logged_kept_rollouts"]] == [[True, False, True, False]] * 18
    assert [list(v) for v in frame["kept_rollouts"]] == [r["kept_rollouts"] for r in rows]


def long_log(tmp_path, rollouts: int, steps: int = 3, prompts: int = 6) -> Path:
    """A uniform-like log with `rollouts` logged rewards per prompt (enough for a selector that extends groups)."""
    rng = np.random.default_rng(11)
    path = tmp_path / f"long{rollouts}.jsonl"
    with open(path, "w") as handle:
        for step in range(steps):
            for pid in range(prompts):
                rate = [0.0, 1.0, 0.2, 0.5, 0.9, 0.05][pid]
                rewards = (rng.random(rollouts) < rate).astype(int).tolist()
                handle.write(json.dumps({"step": step, "prompt_id": pid + step * prompts, "rewards": rewards}) + "\n")
    return path


def test_a_selector_asking_for_rollouts_the_log_lacks_says_what_is_missing(tmp_path):
    out = tmp_path / "never.jsonl"
    result = replay(SMALL, "selector=reinforce_ada", "--out", out)  # 2n = 8 first rollouts; the log has 4
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "selector=reinforce_ada asks for rollouts 1-8 of prompt" in lines[0]
    assert "the log holds 4" in lines[0] and "never generated" in lines[0] and not out.exists()
    assert replay(SMALL, "selector=uniform").exit_code == 0  # the same log through one that keeps to its groups


def test_reinforce_ada_replays_a_log_with_enough_rollouts(tmp_path):
    out = tmp_path / "ada.jsonl"
    result = replay(long_log(tmp_path, 32), "selector=reinforce_ada", "replay.group_size=4", "--out", out)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(r["rolled_out"] and r["kept"] for r in rows)
    for r in rows:
        kept = [x for x, k in zip(r["rewards"], r["kept_rollouts"]) if k]
        assert len(kept) == 4
        first = r["rewards"][:8]
        if 2 <= sum(first) <= 6:  # two right and two wrong in round 1: the first of each kept
            right = [i for i, x in enumerate(first) if x][:2]
            wrong = [i for i, x in enumerate(first) if not x][:2]
            assert [i for i, k in enumerate(r["kept_rollouts"]) if k] == sorted(right + wrong)
    assert replay(long_log(tmp_path, 16), "selector=reinforce_ada", "replay.group_size=4").exit_code == 2


def test_speed_replays_screening_and_continuation_from_the_logged_rollouts(tmp_path):
    out = tmp_path / "speed.jsonl"
    result = replay(long_log(tmp_path, 24, steps=4), "selector=speed", "--out", out)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    screened_in = [r for r in rows if 0 < sum(r["rewards"][:4]) < 4]
    kept = [r for r in rows if r["kept"]]
    assert all(r["rolled_out"] for r in rows) and len(kept) == 6  # B = 6: one update, once 6 groups were complete
    assert all(r in screened_in for r in kept)  # screening passed; no second filter on the continued 20
    assert all(r["kept_rollouts"] == [r["kept"]] * 24 for r in rows)


def ragged_run_dir(tmp_path) -> Path:
    """A run directory whose groups differ in size (as a speed run writes them): prompt 1 has 6 rollouts."""
    from lze_bench.ledger import RolloutLog

    run_dir = tmp_path / "ragged"
    log = RolloutLog(run_dir)
    for step in (0, 1):
        sizes = [4, 6 if step == 1 else 4, 4]
        log.append(step, [{"step": step, "prompt_id": i, "rewards": [float(j % 2) for j in range(n)],
                           "response_tokens": [5] * n, "kept": True, "kept_rollouts": [True] * n,
                           "response_entropy": [0.5] * n} for i, n in enumerate(sizes)])
    log.compact()
    return run_dir


def test_ragged_groups_are_read_and_refused_by_name(tmp_path):
    from lze_bench.replay.log import read_log

    run_dir = ragged_run_dir(tmp_path)
    log = read_log(run_dir)
    assert log.ragged and log.lengths.tolist() == [4, 4, 4, 4, 6, 4] and log.rewards.shape == (6, 6)
    assert log.valid.sum() == 26 and np.isnan(log.rewards[~log.valid]).all()
    assert log.rewards[4].tolist() == [0, 1, 0, 1, 0, 1] and log.response_entropy.shape == (6, 6)
    for target in (run_dir, run_dir / "rollouts.parquet"):
        result = replay(target, "selector=pods")
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert result.exit_code == 2 and len(lines) == 1
        assert "row 5" in lines[0] and "'rewards'" in lines[0] and "6 rewards where row 1 has 4" in lines[0]


def test_response_entropy_needs_one_value_per_reward_of_its_row(tmp_path):
    log = tmp_path / "entropy.jsonl"
    log.write_text('{"step": 0, "prompt_id": 0, "rewards": [1, 0], "response_entropy": [0.1, 0.2]}\n'
                   '{"step": 0, "prompt_id": 1, "rewards": [1, 0, 1], "response_entropy": [0.1, 0.2]}\n')
    result = replay(log, "selector=uniform")
    assert result.exit_code == 2 and "line 2" in result.output and "'response_entropy'" in result.output


def test_replaying_a_pods_run_gives_back_its_own_rollout_choices(tmp_path):
    """PODS decides from each group's rewards alone, so replaying it on its own run's log must flag the rollouts the
    run trained, and count what the run's ledger booked; the report's Table 3 shows the same two counts."""
    from tiny_run import TINY_TRAIN

    from lze_bench.ledger import read_ledger

    run_dir = tmp_path / "pods"
    trained = runner.invoke(app, ["train", *TINY_TRAIN, f"backend.cache_dir={tmp_path / 'cache'}",
                                  f"run_dir={run_dir}", "selector=pods", "trainer.steps=2"])
    assert trained.exit_code == 0, trained.output
    out = tmp_path / "replayed.parquet"
    result = replay(run_dir, "selector=pods", "--out", out)
    assert result.exit_code == 0, result.output
    frame = pd.read_parquet(out)
    assert [list(v) for v in frame["kept_rollouts"]] == [list(v) for v in frame["logged_kept_rollouts"]]
    assert frame["kept"].tolist() == frame["logged_kept"].tolist()
    ledger = read_ledger(run_dir)
    total = next(line for line in result.output.splitlines() if "total" in line)
    rollouts, trained_rollouts = [int(x) for x in total.replace("│", " ").split()[-2:]]
    assert (rollouts, trained_rollouts) == (ledger["samples"].sum(), ledger["responses_trained"].sum())
    assert trained_rollouts < rollouts
    report = runner.invoke(app, ["report", str(tmp_path), "--name", "pods", "--out-root", str(tmp_path / "reports")])
    assert report.exit_code == 0, report.output
    row = pd.read_csv(tmp_path / "reports" / "pods" / "table3.csv").set_index("label").loc["pods"]
    assert (row["generated_per_step"], row["trained_per_step"]) == (ledger["samples"].mean(),
                                                                    ledger["responses_trained"].mean())


def test_a_log_line_that_is_not_utf8_fails_in_one_line(tmp_path):
    log = tmp_path / "latin1.jsonl"
    log.write_bytes(SMALL.read_bytes().replace(b"\n", b' \xff\n', 2).replace(b' \xff\n', b"\n", 1))
    result = replay(log, "selector=uniform")
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert f"{log}:2: not UTF-8 (byte 0xff at column" in lines[0]
