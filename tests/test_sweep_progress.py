"""What a sweep shows while its runs work: the warm start's progress (not a run stuck at step 0),
and the work done against what the runs were asked to do (FLOP budgets, else step caps)."""

from __future__ import annotations

import io
import threading

import pandas as pd
from rich.console import Console
from typer.testing import CliRunner

from lze_bench.cli import app
from lze_bench.rundir import PROGRESS, write_progress
from tiny_run import TINY_TRAIN as TINY


def test_train_reports_the_warm_start_then_training_in_the_run_directory(tmp_path, monkeypatch):
    import lze_bench.backends.local.trainer as trainer

    seen = []

    def recording(run_dir, phase, done=None, total=None, note=""):
        seen.append((phase, done, total, note, (run_dir / "config.yaml").exists()))
        write_progress(run_dir, phase, done, total, note)

    monkeypatch.setattr(trainer, "write_progress", recording)
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(app, ["train", *TINY, f"backend.cache_dir={tmp_path / 'cache'}", f"run_dir={run_dir}",
                                      "trainer.steps=1"])
    assert result.exit_code == 0, result.output
    warm = [(done, total) for phase, done, total, _, _ in seen if phase == "warm start"]
    assert warm[:4] == [(0, 3), (1, 3), (2, 3), (3, 3)] and warm[-1] == (3, 3)  # then its held-out eval
    assert not any(config for phase, *_, config in seen if phase == "warm start")  # before config.yaml: from the start
    assert [phase for phase, *_ in seen if phase != "warm start"] == ["initial eval", "training"]
    assert not (run_dir / PROGRESS).exists() and (run_dir / "DONE").exists()  # a finished run keeps no progress file


def test_a_job_waiting_on_the_warm_start_hears_the_builders_progress(tmp_path, monkeypatch):
    import fcntl

    from lze_bench.backends.local import warmstart
    from lze_bench.config import compose, to_objects
    from lze_bench.rundir import atomic_write_json

    monkeypatch.setattr(warmstart, "WAIT_POLL_S", 0.05)
    objects = to_objects(compose("train", [*TINY, f"backend.cache_dir={tmp_path}"]))
    key, _ = warmstart.warmstart_key(objects.model, objects.task, objects.backend, "cpu")
    root = tmp_path / "warmstart"
    root.mkdir()
    heard, result = [], {}
    waiting = threading.Event()

    def report(done, total, note):
        heard.append((done, total, note))
        if (done, total) == (40, 300):
            waiting.set()

    with open(root / f"{key}.lock", "w") as lock:  # another job holds the lock and is at step 40 of 300
        fcntl.flock(lock, fcntl.LOCK_EX)
        atomic_write_json(root / f"{key}.progress.json", {"done": 40, "total": 300, "note": "training"})
        worker = threading.Thread(target=lambda: result.setdefault("dir", warmstart.ensure_warmstart(
            objects.model, objects.task, objects.backend, __import__("torch").device("cpu"), None, report)))
        worker.start()
        assert waiting.wait(30)
        (root / key).mkdir()  # the other job finishes: its directory appears, then it unlocks
        atomic_write_json(root / key / warmstart.INFO_FILE, {"key": key})
        fcntl.flock(lock, fcntl.LOCK_UN)
    worker.join(30)
    assert result["dir"] == root / key  # loaded, not built again
    assert set(heard) == {(40, 300, "another job is building it")}


def _sweep(tmp_path, jobs: dict[str, dict]) -> dict:
    entries = {}
    for name, job in jobs.items():
        run_dir = tmp_path / "runs" / name
        run_dir.mkdir(parents=True)
        if job.get("cum_flops"):
            pd.DataFrame({"cum_flops": job["cum_flops"]}).to_parquet(run_dir / "ledger.parquet")
        if job.get("progress"):
            write_progress(run_dir, *job["progress"])
        entries[name] = {"selector": name.split("-")[0], "seed": 0, "status": job["status"], "steps": 60,
                         "flop_budget": job.get("budget", 6e11), "run_dir": f"runs/{name}", "pair_key": "p",
                         "job_id": "1", "attempts": 1}
    return {"name": "t", "jobs": entries}


def render(renderable) -> str:
    console = Console(record=True, width=220, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def test_status_shows_the_warm_start_and_counts_flops_against_the_budgets(tmp_path):
    from lze_bench.sweep.status import jobs_table

    data = _sweep(tmp_path, {
        "uniform-s0": {"status": "running", "progress": ("warm start", 120, 300, "training")},
        "dapo-s0": {"status": "running", "progress": ("warm start", 40, 300, "another job is building it")},
        "lze-s0": {"status": "running", "cum_flops": [1e11, 3e11]},  # 2 steps, half its budget
        "greso-s0": {"status": "done", "cum_flops": [4e11, 6.3e11]},  # stopped on its budget
    })
    text = render(jobs_table(tmp_path, data))
    assert "0/60 (warm start 120/300)" in text
    assert "0/60 (waiting for the warm start 40/300)" in text
    assert "2/60" in text and "3e+11/6e+11" in text and "6.3e+11/6e+11" in text
    # asked: 4 x 6e11; done: greso all of it, lze half, the warm-starting two nothing
    assert "FLOP budgets 38% done (9.3e+11 of 2.4e+12 FLOPs spent)" in " ".join(text.split())


def test_status_without_budgets_counts_steps_against_the_caps(tmp_path):
    from lze_bench.sweep.status import jobs_table

    data = _sweep(tmp_path, {
        "uniform-s0": {"status": "done", "cum_flops": [1.0] * 12, "budget": None},  # done: all it was asked
        "lze-s0": {"status": "running", "cum_flops": [1.0] * 30, "budget": None},
    })
    assert "steps 42/120 (75% done)" in " ".join(render(jobs_table(tmp_path, data)).split())


def test_log_lines_say_when_a_job_builds_or_waits_for_the_warm_start(tmp_path):
    from lze_bench.sweep.status import SweepDisplay

    data = _sweep(tmp_path, {
        "uniform-s0": {"status": "running", "progress": ("warm start", 10, 300, "training")},
        "dapo-s0": {"status": "running", "progress": ("warm start", 10, 300, "another job is building it")},
    })
    out = io.StringIO()
    display = SweepDisplay(tmp_path, data, Console(file=out, width=200))
    display.update(data)
    write_progress(tmp_path / "runs" / "uniform-s0", "warm start", 11, 300, "training")  # same phase: no new line
    display.update(data)
    write_progress(tmp_path / "runs" / "uniform-s0", "training")
    display.update(data)
    lines = out.getvalue().splitlines()
    assert lines == [
        "[sweep] uniform-s0: running (job 1): warm start (300 steps, cached for every run of this recipe)",
        "[sweep] dapo-s0: running (job 1): waiting for the warm start another job is building",
        "[sweep] uniform-s0: running (job 1): training",
    ]
