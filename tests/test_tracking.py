"""`logger=[wandb,tensorboard]`: live trackers on both backends, read back with each tool's own file format.

W&B runs offline (`WANDB_MODE=offline`, no internet); its transaction log
(`<run_dir>/wandb/offline-run-*/run-<id>.wandb`: W&B's LevelDB-style record
log of `wandb_internal_pb2.Record` protobufs) is read back record by record.
TensorBoard event files are read with TensorBoard's own EventAccumulator.
A fake `WANDB_API_KEY` is in the environment of every run, and no file of the
run directory nor any output may contain it.

The local backend's run is real and short (the tiny policy of
test_train_local.py), killed after 3 of 4 steps between checkpoints and
resumed, then evaluated twice; backend=openrlhf runs once through the CPU
end-to-end harness (tests/openrlhf_cpu, slow).
"""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from lze_bench.cli import app
from lze_bench.ledger import LEDGER_COLUMNS, read_evals, read_ledger
from tiny_run import TINY_TRAIN as TINY

REPO = Path(__file__).resolve().parents[1]
SECRET = "lzetestkey0123456789abcdef0123456789abcd"  # 40 characters, like a W&B key; never valid
OPENRLHF = ["backend=openrlhf", "model=Qwen/Qwen2.5-Math-1.5B", "backend.gpus_per_node=8"]


# --- readers: each tool's own files ------------------------------------------------------------------


def wandb_records(run_dir: Path) -> list[tuple[str, object]]:
    """(run id, Record) of every offline W&B run under run_dir/wandb, oldest run first, in write order."""
    from wandb.proto import wandb_internal_pb2

    out = []
    for path in sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb")):
        data = path.read_bytes()
        assert data[:4] == b":W&B"
        run_id = path.stem.removeprefix("run-")
        for payload in _log_records(data, start=7):  # the header: ":W&B", magic 0xBEE1, version
            record = wandb_internal_pb2.Record()
            record.ParseFromString(payload)
            out.append((run_id, record))
    return out


def _log_records(data: bytes, start: int, block: int = 32768):
    """Payloads of a LevelDB log: 7-byte chunk headers (crc32c, length, type) in 32 KiB blocks."""
    position, pending = start, b""
    while position + 7 <= len(data):
        left = block - position % block
        if left < 7:  # a block's tail too short for a header is padding
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position:position + 7])
        if kind == 0:
            position += left
            continue
        chunk = data[position + 7:position + 7 + length]
        position += 7 + length
        if kind == 1:  # FULL
            yield chunk
        elif kind == 2:  # FIRST
            pending = chunk
        elif kind == 3:  # MIDDLE
            pending += chunk
        elif kind == 4:  # LAST
            yield pending + chunk
            pending = b""


def wandb_history(run_dir: Path) -> list[dict]:
    """The run's history as W&B shows it once the offline runs are synced in order: a run started with
    `resume_from` (its config's `_wandb.branch_point`) keeps the earlier rows through that `_step` only."""
    rows = []
    for _, record in wandb_records(run_dir):
        kind = record.WhichOneof("record_type")
        if kind in ("run", "config"):
            items = record.run.config.update if kind == "run" else record.config.update
            for item in items:
                if item.key == "_wandb" and "branch_point" in json.loads(item.value_json):
                    point = json.loads(item.value_json)["branch_point"]
                    rows = [row for row in rows if row["_step"] <= int(point["step"])]
        if kind == "history":
            rows.append({"/".join(item.nested_key) or item.key: json.loads(item.value_json)
                         for item in record.history.item})
    return rows


def wandb_axes(run_dir: Path) -> dict[str, str]:
    """define_metric globs -> their step metric."""
    axes = {}
    for _, record in wandb_records(run_dir):
        if record.WhichOneof("record_type") == "metric" and record.metric.glob_name:
            axes[record.metric.glob_name] = record.metric.step_metric
    return axes


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] as TensorBoard shows them (older copies of re-logged steps purged)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def finite_columns(row) -> dict[str, float]:
    """Every ledger column of a row that holds a finite number (NaN = not measured, never logged)."""
    out = {}
    for column in row.index:
        value = row[column]
        if isinstance(value, (bool, int, float)) or hasattr(value, "dtype"):
            value = float(value)
            if math.isfinite(value):
                out[column] = value
    return out


def no_key_anywhere(run_dir: Path, *outputs: str) -> None:
    files = [p for p in run_dir.rglob("*") if p.is_file() and not p.is_symlink()]
    assert files
    leaked = [str(p) for p in files if SECRET.encode() in p.read_bytes()]
    assert not leaked, leaked
    assert all(SECRET not in text for text in outputs)


def wandb_env(root: Path) -> dict:
    """W&B offline with a (fake) key, its settings, caches and netrc private to the test."""
    home = root / "wandb-home"
    return {"WANDB_MODE": "offline", "WANDB_API_KEY": SECRET, "WANDB_CONFIG_DIR": str(home / "config"),
            "WANDB_CACHE_DIR": str(home / "cache"), "WANDB_DATA_DIR": str(home / "data"),
            "NETRC": str(home / "netrc")}


def tracker_env(root: Path, **extra) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", LZE_BENCH_PROGRESS="0", **wandb_env(root))
    env.update(extra)
    return env


def lze(*args, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    """The CLI in a fresh process (W&B reads its environment once per process)."""
    done = subprocess.run([sys.executable, "-m", "lze_bench.cli", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def check_every_ledger_column(run_dir: Path, backend_metrics: tuple[str, ...] = ()) -> None:
    """Both trackers hold every finite ledger column of every step, by step and by cum_flops."""
    ledger = read_ledger(run_dir)
    assert set(LEDGER_COLUMNS) <= set(ledger.columns)
    by_step = tensorboard_scalars(run_dir / "tensorboard")
    by_flops = tensorboard_scalars(run_dir / "tensorboard" / "cum_flops")
    everything = wandb_history(run_dir)
    assert [h["_step"] for h in everything] == list(range(len(everything)))  # no step twice, none out of order
    history = [h for h in everything if "ledger/step" in h]
    assert [int(h["ledger/step"]) for h in history] == ledger["step"].tolist()  # a re-run step: its new copy only
    last_logged = {int(h["ledger/step"]): h for h in history}
    for _, row in ledger.iterrows():
        step, x = int(row["step"]), int(row["cum_flops"] // 1e6)
        values = finite_columns(row)
        assert set(LEDGER_COLUMNS) - {"heldout_accuracy", "astral_pred_mae", "astral_pred_spearman"} <= set(values)
        for column, value in values.items():
            # TensorBoard's step is updates done (step + 1), the axis its held-out and eval events share
            assert [v for s, v in by_step[f"ledger/{column}"] if s == step + 1] == [pytest.approx(value, rel=1e-6)], column
            assert [v for s, v in by_flops[f"cum_flops/ledger/{column}"] if s == x] == [
                pytest.approx(value, rel=1e-6)], column
            assert last_logged[step][f"ledger/{column}"] == pytest.approx(value, rel=1e-12), column
        for name in backend_metrics:  # the backend's own metrics arrive beside the ledger's
            assert name in last_logged[step] and [s for s, _ in by_step[name]].count(step + 1) == 1, name
    # cum_flops is the x-axis of the ledger's and the backend's metrics (W&B define_metric)
    assert wandb_axes(run_dir)["ledger/*"] == "ledger/cum_flops"
    assert all(h["ledger/cum_flops"] == pytest.approx(float(ledger.set_index("step").loc[s, "cum_flops"]))
               for s, h in last_logged.items())
    # one W&B run per run directory, every invocation continuing it
    ids = {run_id for run_id, _ in wandb_records(run_dir)}
    assert ids == {json.loads((run_dir / "tracking.json").read_text())["wandb_id"]}


# --- backend=local: a short real run, resumed, evaluated -------------------------------------------


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("tracked")
    run = root / "run"
    env = tracker_env(root)
    common = ["train", *TINY, f"backend.cache_dir={root / 'cache'}", f"run_dir={run}", "trainer.steps=4",
              "trainer.eval_every=2", "trainer.checkpoint_every=2", "logger=[wandb,tensorboard]"]
    # killed after step 2 (updates 3) with the last checkpoint at 2 updates: the rerun redoes row 2
    first = lze(*common, "backend.stop_after_steps=3", env=env, cwd=root)
    assert not (run / "DONE").exists() and len(read_ledger(run)) == 3
    second = lze(*common, env=env, cwd=root)
    assert (run / "DONE").exists()
    evaluate = ["eval", f"run={run}", "eval=synthetic", "limit=3", "eval.max_new_tokens=4", "grading.workers=1"]
    third = lze(*evaluate, env=env, cwd=root)
    runs_after_eval = sorted(run.glob("wandb/offline-run-*"))
    fourth = lze(*evaluate, env=env, cwd=root)  # nothing new: nothing sent again
    # another setting (limit=2) of the same checkpoints, the later checkpoint first
    later = [lze(*evaluate, "limit=2", f"checkpoints=[{name}]", env=env, cwd=root)
             for name in ("step_000004", "step_000002")]
    return {"run": run, "outputs": [d.stdout + d.stderr for d in (first, second, third, fourth, *later)],
            "second": second, "runs_after_eval": runs_after_eval}


@pytest.mark.slow  # the module's real run: six CLI runs (~45 s)
def test_local_run_logs_every_ledger_column_each_step_with_cum_flops_axis(local_run):
    run = local_run["run"]
    check_every_ledger_column(run)
    assert local_run["second"].stdout.strip().splitlines()[-1] == f"run directory: {run}"  # W&B writes to stderr
    # held-out evals as they happen (0 = the initial policy), on their own cum_flops axis
    heldout = [json.loads(line) for line in (run / "heldout.jsonl").read_text().splitlines()]
    tensorboard = tensorboard_scalars(run / "tensorboard")["heldout/accuracy"]
    assert [s for s, _ in tensorboard] == [r["updates"] for r in heldout] == [0, 2, 4]
    assert [v for _, v in tensorboard] == pytest.approx([r["accuracy"] for r in heldout])
    assert wandb_axes(run)["heldout/*"] == "heldout/cum_flops"
    ledger = read_ledger(run)
    flops_at = {0: 0.0, **{int(s) + 1: float(f) for s, f in zip(ledger["step"], ledger["cum_flops"])}}
    logged = [h for h in wandb_history(run) if "heldout/step" in h]
    assert [(h["heldout/step"], h["heldout/cum_flops"]) for h in logged] == [(u, flops_at[u]) for u in (0, 2, 4)]


@pytest.mark.slow  # the module's real run: six CLI runs (~45 s)
def test_local_evals_reach_both_trackers_once_when_written(local_run):
    """Each eval setting is its own series; each checkpoint's point is in it once, in checkpoint order,
    even when an earlier checkpoint is evaluated after a later one (limit=2: step 4, then step 2)."""
    run = local_run["run"]
    evals = read_evals(run)
    keys = evals.groupby("settings_key")["limit"].first().to_dict()
    assert sorted(keys.values()) == [2, 3]
    assert sorted(set(evals["step"])) == [0, 2, 4]  # the initial policy (warm start) and both checkpoints
    logged = [h for h in wandb_history(run) if "eval/step" in h]
    for key, limit in keys.items():
        rows = evals[evals["settings_key"] == key].sort_values("step")
        assert rows["step"].tolist() == ([0, 2, 4] if limit == 3 else [2, 4])
        tag = f"eval/synthetic/{key}/accuracy"
        tensorboard = tensorboard_scalars(run / "tensorboard" / f"eval-{key}")
        by_flops = tensorboard_scalars(run / "tensorboard" / "cum_flops" / f"eval-{key}")
        assert tensorboard[tag] == [(int(r.step), pytest.approx(r.accuracy)) for r in rows.itertuples()]
        assert [s for s, _ in by_flops[f"cum_flops/{tag}"]] == [int(f // 1e6) for f in rows["cum_flops"]]
        points = [(h["eval/step"], h["eval/cum_flops"], h[tag]) for h in logged if tag in h]
        assert sorted(points) == [(r.step, r.cum_flops, pytest.approx(r.accuracy)) for r in rows.itertuples()]
        assert all(f"eval/synthetic/{key}/pass@{k}" in h for h, k in zip(logged, rows["k"]) if tag in h)
    assert wandb_axes(run)["eval/*"] == "eval/cum_flops"
    # the second `lze-bench eval` skipped every benchmark: no W&B run; the two later ones one each
    assert len(sorted(run.glob("wandb/offline-run-*"))) == len(local_run["runs_after_eval"]) + 2


@pytest.mark.slow  # the module's real run: six CLI runs (~45 s)
def test_local_run_names_and_no_key_in_any_file(local_run):
    run = local_run["run"]
    no_key_anywhere(run, *local_run["outputs"])
    names = [r.run for _, r in wandb_records(run) if r.WhichOneof("record_type") == "run"]
    assert {(n.display_name, n.job_type, n.project) for n in names} == {(run.name, "uniform", "lze-bench")}
    assert set(names[0].tags) == {"selector:uniform", "seed:0", "backend:local"}
    assert "logger" in yaml.safe_load((run / "config.yaml").read_text())


# --- config: identity, refusals, missing pieces (fast) ---------------------------------------------


def run_directory_line(output: str) -> str:
    return next(line for line in output.splitlines() if "run directory" in line)


@pytest.mark.parametrize("backend", [[], OPENRLHF])
def test_tracking_keys_change_neither_the_run_directory_nor_the_command(backend, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    plain = CliRunner().invoke(app, ["train", *backend, "--dry-run"])
    tracked = CliRunner().invoke(app, ["train", *backend, "logger=[wandb,tensorboard]", "tracking.project=p",
                                       "tracking.group=g", "tracking.tags=[a]", "--dry-run"])
    assert plain.exit_code == tracked.exit_code == 0, plain.output + tracked.output
    assert run_directory_line(plain.output) == run_directory_line(tracked.output)
    assert SECRET not in tracked.output
    if backend:  # OpenRLHF's own trackers stay off: no key, no tensorboard_dir in its command line
        command = lambda text: [line for line in text.splitlines() if line.startswith("  --")]  # noqa: E731
        assert command(plain.output) == command(tracked.output)
        assert not [line for line in command(tracked.output) if "--logger.wandb" in line or "tensorboard" in line]


def test_an_openrlhf_run_resumes_with_other_trackers_but_not_another_config(tmp_path):
    from lze_bench.backends.openrlhf.launch import prepare
    from lze_bench.config import compose
    from lze_bench.errors import LzeBenchError

    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "train.jsonl").write_text('{"question": "1+1?", "answer": "#### 2"}\n')
    base = [*OPENRLHF, "task=gsm8k", f"data.root={tmp_path}", f"run_dir={tmp_path / 'run'}"]
    first = prepare(compose("train", base))
    again = prepare(compose("train", [*base, "logger=[wandb]", "tracking.group=g"]))  # resume, now tracked
    assert first == again
    with pytest.raises(LzeBenchError, match="holds an unfinished run with another config"):
        prepare(compose("train", [*base, "logger=[wandb]", "trainer.lr=2e-6"]))


def one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("override, needles", [
    ("backend.tensorboard=true", ["backend.tensorboard was replaced by logger=[tensorboard]"]),
    (f"backend.extra_args=[--logger.wandb.key,{SECRET}]", ["--logger.wandb.key", "logger=[wandb]", "WANDB_API_KEY"]),
    (f"backend.extra_args=['--logger.wandb.key={SECRET}']", ["--logger.wandb.key", "logger=[wandb]"]),
    ("backend.extra_args=[--logger.tensorboard_dir,/tmp/tb]", ["--logger.tensorboard_dir", "logger=[tensorboard]"]),
    ("backend.extra_args=[--logger.wandb.project,p]", ["tracking.project"]),
])
def test_openrlhf_tracker_flags_are_refused_for_logger(override, needles):
    line = one_error_line(CliRunner().invoke(app, ["train", *OPENRLHF, override, "--dry-run"]))
    assert all(needle in line for needle in needles), line
    assert SECRET not in line


def test_logger_names_are_checked_and_verl_spelling_is_accepted():
    from lze_bench.config import compose

    line = one_error_line(CliRunner().invoke(app, ["train", "logger=[wandbb]", "--dry-run"]))
    assert "unknown logger 'wandbb'; did you mean 'wandb'?" in line
    assert list(compose("train", ["logger=wandb,tensorboard"]).logger) == ["wandb", "tensorboard"]
    assert list(compose("train", ["logger=tensorboard"]).logger) == ["tensorboard"]
    assert list(compose("train", []).logger) == []


@pytest.mark.parametrize("package", ["wandb", "tensorboard"])
def test_a_missing_tracker_package_names_its_extra(package, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, package, None)  # `import <package>` fails, as when not installed
    result = CliRunner().invoke(app, ["train", f"run_dir={tmp_path / 'run'}", f"logger=[{package}]"])
    assert one_error_line(result) == (f"error: {package} is not installed (logger=[{package}]); "
                                      f"install it with: pip install 'lze-bench[{package}]'")
    assert not (tmp_path / "run").exists()  # refused before anything starts


def test_wandb_online_without_a_key_fails_before_training(tmp_path):
    env = tracker_env(tmp_path, WANDB_MODE="online")
    env.pop("WANDB_API_KEY")
    done = subprocess.run([sys.executable, "-m", "lze_bench.cli", "train", f"run_dir={tmp_path / 'run'}",
                           "logger=[wandb]"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("error: logger=[wandb]: no W&B API key: export WANDB_API_KEY")
    assert not (tmp_path / "run").exists()


def test_sweep_jobs_group_by_sweep_and_pair_by_seed(tmp_path):
    from lze_bench.config import compose
    from lze_bench.sweep import SweepSpec
    from lze_bench.sweep.grid import plan_jobs

    spec = SweepSpec(grid={"selector": ["uniform", "lze"], "seed": [0, 1]}, overrides=["trainer.steps=2"])
    plain = plan_jobs(spec, [], tmp_path, name="cmp")
    tracked = plan_jobs(spec, ["logger=[wandb]"], tmp_path, name="cmp")
    assert [j.config_hash for j in plain.jobs] == [j.config_hash for j in tracked.jobs]  # same run dirs, pairs
    tracking = {j.name: compose("train", j.train_overrides).tracking for j in tracked.jobs}
    assert {t.group for t in tracking.values()} == {"cmp"}
    assert {name: t.name for name, t in tracking.items()} == {name: name for name in tracking}
    pair = {name: tuple(t.tags) for name, t in tracking.items()}
    assert pair["uniform-s0"] == pair["lze-s0"] != pair["uniform-s1"] == pair["lze-s1"]


# --- backend=openrlhf: the CPU end-to-end harness (slow) -------------------------------------------

STANDINS = REPO / "tests" / "openrlhf_cpu"
STUBS = REPO / "tests" / "stubs"


def openrlhf_env(**extra) -> dict:
    """PYTHONPATH for the driver and the Ray processes (as tests/test_openrlhf_e2e.py), W&B offline with a key."""
    import importlib.util

    paths = [str(REPO), str(STANDINS)]
    if any(importlib.util.find_spec(name) is None for name in ("vllm", "flash_attn")):
        paths.append(str(STUBS))
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths), TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1",
                RAY_DEDUP_LOGS="0", **extra)


@pytest.mark.slow
@pytest.mark.usefixtures("openrlhf_importable")  # skips, or fails with LZE_BENCH_REQUIRE_OPENRLHF=1 (conftest.py)
def test_openrlhf_run_logs_every_ledger_column_and_openrlhf_metrics(tmp_path):
    sys.path.insert(0, str(STANDINS))
    try:
        from lze_cpu_standins.fixtures import RayCluster, save_tiny_policy, write_prompts
    finally:
        sys.path.remove(str(STANDINS))
    from lze_bench.backends.openrlhf.data import PROMPT_TEMPLATE
    from lze_bench.backends.openrlhf.launch import prepare
    from lze_bench.config import compose

    data = write_prompts(tmp_path / "data", 10)
    problems = [f"Is {i} odd? Reply 1 for yes, 0 for no." for i in range(4)]
    model = save_tiny_policy(tmp_path / "tiny", [PROMPT_TEMPLATE.format(problem=p) for p in problems])
    run = tmp_path / "run"
    overrides = [
        "backend=openrlhf", f"model={model}", "task=gsm8k", f"data.root={data}", "selector=uniform", "seed=0",
        f"run_dir={run}", "trainer.steps=3", "trainer.batch_size=2", "trainer.n_samples=2", "trainer.max_new_tokens=4",
        "trainer.lr=0.01", "trainer.checkpoint_every=3", "backend.gpus_per_node=1", "backend.max_len=400",
        "backend.packing_samples=false", "backend.attn_implementation=eager", "backend.apply_chat_template=false",
        "backend.gradient_checkpointing=false", "backend.train_micro_batch_size=2",
        "backend.rollout_micro_batch_size=2", "backend.grade_workers=1", "backend.placement_timeout_s=120",
        "logger=[wandb,tensorboard]",
    ]
    env = openrlhf_env(**wandb_env(tmp_path))
    # the trainer actor reads W&B's environment from the Ray cluster's, as on a cluster started by the job
    cluster = RayCluster(env)
    try:
        paths, argv = prepare(compose("train", overrides))
        command = [sys.executable, str(STANDINS / "run_entry.py"), *argv[3:]]
        done = subprocess.run(command, env=dict(env, LZE_RAY_ADDRESS=cluster.address), capture_output=True,
                              text=True, timeout=900)
    finally:
        cluster.stop()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    assert (run / "DONE").exists()
    check_every_ledger_column(run, backend_metrics=("openrlhf/policy_loss", "openrlhf/timing/generation"))
    no_key_anywhere(run, done.stdout, done.stderr, " ".join(argv))
    assert not [a for a in argv if a.startswith("--logger.") and a != "--logger.logging_steps"]
