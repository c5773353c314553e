"""`lze-bench sweep`: grid expansion, pairing, manifest, status, skip/resubmit, local executor."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from lze_bench.cli import app
from lze_bench.config import compose, yaml_options
from lze_bench.errors import LzeBenchError
from lze_bench.registry import SELECTORS
from lze_bench.rundir import mark_done
from lze_bench.sweep import SweepSpec, split_args, sweep_name
from lze_bench.sweep.grid import grid_axes, job_name, plan_jobs
from lze_bench.sweep.manifest import derive_status, load_manifest, merge_plan, new_manifest
from lze_bench.sweep.submit import run_sweep

runner = CliRunner()
# A model path that does not exist: composition accepts it, the job fails when it starts
# (before any training), so the failure path is exercised for real and fast.
BROKEN = ["model=/nonexistent/lze-bench-test-model", "trainer.steps=1"]


def two_selectors() -> list[str]:
    import lze_bench.selectors  # noqa: F401  (registers them)

    if "dapo" not in SELECTORS:
        pytest.skip("needs a second selector (dapo) registered")
    return ["uniform", "dapo"]


def test_split_args_sends_sweep_keys_to_the_sweep():
    sweep_args, train_args = split_args(["sweep=quickstart", "sweep.name=x", "wait=false", "seed=0,1", "poll_s=2",
                                         "sweep_dir=/tmp/s", "launcher=slurm"])
    assert sweep_args == ["sweep=quickstart", "sweep.name=x", "wait=false", "poll_s=2", "sweep_dir=/tmp/s"]
    assert train_args == ["seed=0,1", "launcher=slurm"]
    assert sweep_name(None, ["sweep=quickstart"], []) == "quickstart"
    assert sweep_name("named", ["sweep=quickstart"], []) == "named"
    assert sweep_name(None, [], ["seed=0,1"]).startswith("multirun-")
    assert sweep_name(None, [], ["seed=0,1"]) != sweep_name(None, [], ["seed=0,2"])


def test_grid_axes_command_line_replaces_recipe_axes():
    fixed, axes = grid_axes({"selector": ["uniform", "lze"], "seed": [0, 1, 2]}, ["trainer.steps=3"],
                            ["seed=5", "trainer.lr=0.1,0.2", "selector=uniform,dapo"])
    assert fixed == ["trainer.steps=3", "seed=5"]
    assert axes == {"trainer.lr": ["0.1", "0.2"], "selector": ["uniform", "dapo"]}
    assert grid_axes({}, [], ["seed=range(0,3)"])[1] == {"seed": ["0", "1", "2"]}
    assert grid_axes({"flag": [True, None]}, [], [])[1] == {"flag": ["true", "null"]}


def test_job_names():
    assert job_name({"selector": "lze", "seed": "1"}) == "lze-s1"
    assert job_name({"trainer.lr": "0.001", "seed": "0", "selector": "dapo"}) == "dapo-s0-lr0.001"
    assert job_name({}) == "job"
    assert job_name({"data.root": "/a b"}) == "root_a_b"


def test_plan_pairs_selectors_of_a_seed(tmp_path):
    selectors = two_selectors()
    spec = SweepSpec(grid={"selector": selectors, "seed": [0, 1]}, overrides=["trainer.steps=2"])
    plan = plan_jobs(spec, [], tmp_path, name="t")
    names = [job.name for job in plan.jobs]
    assert names == [f"{s}-s{seed}" for s in selectors for seed in (0, 1)]
    assert all(job.run_dir == tmp_path / "runs" / job.name for job in plan.jobs)
    assert len({job.config_hash for job in plan.jobs}) == 4
    groups = sorted(sorted(names) for names in plan.pairs.values())
    assert groups == sorted(sorted(f"{s}-s{seed}" for s in selectors) for seed in (0, 1))
    assert plan.launcher["name"] == "local" and all(job.steps == 2 for job in plan.jobs)


def test_selector_overrides_reach_only_that_selector_and_keep_pairs(tmp_path):
    spec = SweepSpec(grid={"selector": ["uniform", "astral"], "seed": [0]}, overrides=["trainer.steps=2"],
                     selector_overrides={"astral": ["selector.ref_size=8"]})
    plan = plan_jobs(spec, [], tmp_path, name="t")
    by_name = {job.name: job for job in plan.jobs}
    assert "selector.ref_size=8" in by_name["astral-s0"].overrides
    assert not any(o.startswith("selector.ref_size") for o in by_name["uniform-s0"].overrides)
    assert compose("train", by_name["astral-s0"].overrides).selector.ref_size == 8
    assert list(plan.pairs.values()) == [["uniform-s0", "astral-s0"]]
    with pytest.raises(LzeBenchError, match="selector_overrides.astral"):
        SweepSpec(selector_overrides={"astral": ["trainer.steps=3"]})


def test_plan_errors_before_anything_runs(tmp_path):
    with pytest.raises(LzeBenchError, match="launcher cannot be swept"):
        plan_jobs(SweepSpec(), ["launcher=local,slurm"], tmp_path, name="t")
    with pytest.raises(LzeBenchError, match="trainer.stpes"):
        plan_jobs(SweepSpec(), ["seed=0,1", "trainer.stpes=3"], tmp_path, name="t")
    with pytest.raises(LzeBenchError, match="unknown selector"):
        plan_jobs(SweepSpec(), ["selector=uniform,nosuch"], tmp_path, name="t")


@pytest.mark.parametrize("recipe", sorted(yaml_options("sweep")))
def test_every_recipe_composes(recipe, tmp_path):
    cfg = compose("sweep", [f"sweep={recipe}"])
    plan = plan_jobs(cfg.sweep, [], tmp_path, name=recipe)
    assert plan.jobs, f"sweeps/{recipe}.yaml expands to no job"


def test_manifest_refuses_a_changed_config(tmp_path):
    plan = plan_jobs(SweepSpec(), ["seed=0,1", "trainer.steps=2"], tmp_path, name="t")
    data = merge_plan(new_manifest(plan, []), plan)
    assert data["jobs"]["s0"]["run_dir"] == "runs/s0" and data["jobs"]["s0"]["status"] == "new"
    changed = plan_jobs(SweepSpec(), ["seed=0,1", "trainer.steps=3"], tmp_path, name="t")
    with pytest.raises(LzeBenchError, match="was run with another config"):
        merge_plan(data, changed)


def test_a_job_missing_from_the_queue_for_a_moment_is_asked_about_again_before_it_fails(tmp_path, monkeypatch):
    """A Slurm job being requeued can drop out of squeue for a moment: a job that was live and vanishes without a
    result is asked about once more (after a pause) before it counts as failed; a job already failed is not."""
    from lze_bench.sweep import submit

    plan = plan_jobs(SweepSpec(), ["seed=0,1", "trainer.steps=2"], tmp_path, name="t")
    data = merge_plan(new_manifest(plan, []), plan)
    data["jobs"]["s0"].update(job_id="41", status="running")
    data["jobs"]["s1"].update(job_id="42", status="failed")
    answers = iter([{}, {"41": "queued"}])
    asked = []
    monkeypatch.setattr(submit, "scheduler_states", lambda kind, ids: asked.append(sorted(ids)) or next(answers))
    statuses = submit.refresh(plan, data, "slurm", recheck_s=0.01)
    assert statuses["s0"] == ("queued", None) and data["jobs"]["s0"]["status"] == "queued"
    assert statuses["s1"][0] == "failed" and asked == [["41", "42"], ["41"]]  # only the live one asked again
    answers = iter([{}, {}])
    asked.clear()
    assert submit.refresh(plan, data, "slurm", recheck_s=0.01)["s0"][0] == "failed" and len(asked) == 2


def test_status_is_derived_from_files(tmp_path):
    entry = {"run_dir": "runs/a", "job_id": None}
    assert derive_status(tmp_path, entry, {}) == ("new", None)
    entry["job_id"] = "123"
    assert derive_status(tmp_path, entry, {"123": "running"}) == ("running", None)
    assert derive_status(tmp_path, entry, None)[0] == "unknown"
    status, error = derive_status(tmp_path, entry, {})
    assert status == "failed" and "left the scheduler" in error
    mark_done(tmp_path / "runs" / "a")
    assert derive_status(tmp_path, entry, {}) == ("done", None)
    # done by its files while the job still runs (it writes after them): running until it has left
    assert derive_status(tmp_path, entry, {"123": "running"}) == ("running", None)
    assert derive_status(tmp_path, entry, None) == ("done", None)  # the scheduler unasked: the files decide


def test_local_sweep_skips_done_reports_failure_and_resubmits(tmp_path):
    """A done job is never resubmitted or touched; a failing job is reported with its error and
    resubmitted by the next run of the same sweep."""
    sweep_dir = tmp_path / "sw"
    plan = plan_jobs(SweepSpec(), ["seed=0,1", *BROKEN], sweep_dir, name="t")
    done_dir = sweep_dir / "runs" / "s0"
    mark_done(done_dir)
    (done_dir / "result.txt").write_text("kept")
    with pytest.raises(LzeBenchError, match="1 of 2 jobs failed"):
        run_sweep(plan, wait=True, poll_s=0.2, command_line=["seed=0,1"])
    data = load_manifest(sweep_dir)
    assert data["jobs"]["s0"]["status"] == "done" and data["jobs"]["s0"]["job_id"] is None
    failed = data["jobs"]["s1"]
    assert failed["status"] == "failed" and failed["attempts"] == 1 and failed["error"]
    assert (sweep_dir / "submitit" / f"{failed['job_id']}_0_log.err").exists()
    outcome = json.loads((sweep_dir / "submitit" / f"{failed['job_id']}_0_outcome.json").read_text())
    assert outcome["outcome"] == "error" and failed["error"] in outcome["error"]  # the traceback's last line
    with pytest.raises(LzeBenchError, match="1 of 2 jobs failed"):
        run_sweep(plan, wait=True, poll_s=0.2)
    data = load_manifest(sweep_dir)
    assert data["jobs"]["s1"]["attempts"] == 2 and data["jobs"]["s0"]["attempts"] == 0
    assert (done_dir / "result.txt").read_text() == "kept"
    assert data["pairs"] and data["launcher"]["name"] == "local"
    watched = runner.invoke(app, ["sweep", "status", str(sweep_dir), "--watch", "--every=0.1"])  # all final: returns
    assert watched.exit_code == 0 and "1 done" in watched.output and "1 failed" in watched.output


class Planted:
    """An object whose unpickling creates `marker` (as a planted file could run anything)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def test_status_never_unpickles_a_result_and_reads_the_jobs_outcome_file(tmp_path):
    """A planted submitit result pickle runs nothing: status reads the job's own JSON outcome file, and of the
    pickle only that it exists (the job ended)."""
    import pickle

    from lze_bench.sweep.manifest import save_manifest

    plan = plan_jobs(SweepSpec(), ["seed=0,1", "trainer.steps=2"], tmp_path, name="t")
    data = merge_plan(new_manifest(plan, []), plan)
    data["jobs"]["s0"]["job_id"], data["jobs"]["s1"]["job_id"] = "900", "901"
    save_manifest(tmp_path, data)
    marker = tmp_path / "marker"
    (tmp_path / "submitit").mkdir()
    for job_id in ("900", "901"):
        (tmp_path / "submitit" / f"{job_id}_0_result.pkl").write_bytes(pickle.dumps(("error", Planted(marker))))
    (tmp_path / "submitit" / "901_0_outcome.json").write_text(json.dumps(
        {"outcome": "error", "error": "Traceback ...\nlze_bench.errors.LzeBenchError: the model is missing\n"}))
    result = runner.invoke(app, ["sweep", "status", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert not marker.exists() and "2 failed" in result.output
    s0, s1 = data["jobs"]["s0"], data["jobs"]["s1"]
    assert derive_status(tmp_path, s0, {}) == (
        "failed", "the job ended without 900_0_outcome.json (its submitit 900_0_result.pkl is not unpickled: it "
                  "could run code); see submitit/900_0_log.err")
    assert derive_status(tmp_path, s1, {"901": "running"}) == (
        "failed", "lze_bench.errors.LzeBenchError: the model is missing")
    assert not marker.exists()


def test_cli_dry_run_lists_jobs_and_sbatch_script(tmp_path):
    result = runner.invoke(app, ["sweep", "--dry-run", "seed=0,1", "trainer.steps=2", "launcher=slurm",
                                 "launcher.partition=debug", f"sweep_dir={tmp_path / 'sw'}"])
    assert result.exit_code == 0, result.output
    assert "2 jobs" in result.output and "s0" in result.output and "s1" in result.output
    assert "#SBATCH --array=0-1%2" in result.output and "#SBATCH --partition=debug" in result.output
    assert "submitit.core._submit" in result.output
    assert not (tmp_path / "sw").exists()  # a dry run writes nothing


def test_cli_status_and_errors(tmp_path):
    plan = plan_jobs(SweepSpec(), ["seed=0,1", "trainer.steps=2"], tmp_path, name="t")
    from lze_bench.sweep.manifest import save_manifest

    save_manifest(tmp_path, merge_plan(new_manifest(plan, []), plan))
    mark_done(tmp_path / "runs" / "s1")
    result = runner.invoke(app, ["sweep", "status", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "s0" in result.output and "new" in result.output and "done" in result.output
    assert json.loads((tmp_path / "manifest.json").read_text())["jobs"]["s1"]["status"] == "new"  # status only reads
    result = runner.invoke(app, ["sweep", "status", str(tmp_path / "nothing")])
    assert result.exit_code == 2 and "no manifest.json" in result.output
    result = runner.invoke(app, ["sweep"])
    assert result.exit_code == 2 and "nothing to sweep" in result.output
    result = runner.invoke(app, ["sweep", "seed=0,1", "wait=false"])
    assert result.exit_code == 2 and "wait=false needs launcher=slurm" in result.output


def test_train_job_requeues_itself_and_skips_a_finished_run(tmp_path):
    """submitit's checkpoint protocol: a time-out/preemption resubmits the same call (the backend resumes)."""
    from lze_bench.sweep.job import TrainJob

    job = TrainJob(["seed=1", "trainer.steps=2"], str(tmp_path / "run"), "abc")
    again = job.checkpoint()
    assert isinstance(again.function, TrainJob) and again.function is not job
    assert (again.function.overrides, again.function.run_dir, again.function.config_hash) == (
        job.overrides, job.run_dir, "abc")
    with pytest.raises(LzeBenchError, match="differs from the one planned"):
        job()  # "abc" is not the hash of this config: code or config changed since planning
    mark_done(tmp_path / "run")
    assert job() == {"run_dir": str(tmp_path / "run"), "resumed": False, "already_done": True}


@pytest.mark.parametrize("args, needle", [
    (["DIR", "--every=abc"], "'abc' is not a number of seconds"),
    (["DIR", "--watch", "--every", "-1"], "'-1' is not a number of seconds"),
    (["DIR", "--bogus"], "No such option: --bogus"),
    ([], "Missing argument"),
    (["DIR", "other"], "unexpected extra argument"),
])
def test_cli_status_mistakes_exit_2_with_one_line(tmp_path, args, needle):
    result = runner.invoke(app, ["sweep", "status", *(str(tmp_path) if a == "DIR" else a for a in args)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0] and "sweep status --help" in lines[0], lines


@pytest.mark.parametrize("damage, needle", [
    (b'{"version": 1, "jobs": \xff}', "is not UTF-8 text (byte 23)"), (b"[1, 2]", "is not a lze-bench sweep manifest"),
    (b'{"jobs": [', "is not valid JSON"),
])
def test_a_damaged_manifest_is_one_line_naming_it(tmp_path, damage, needle):
    (tmp_path / "manifest.json").write_bytes(damage)
    result = runner.invoke(app, ["sweep", "status", str(tmp_path)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert str(tmp_path / "manifest.json") in lines[0] and needle in lines[0], lines[0]


def test_cli_status_is_a_subcommand_and_overrides_still_sweep(tmp_path):
    """`sweep status` takes its options anywhere; `sweep KEY=VALUE... --dry-run` still plans a sweep."""
    plan = plan_jobs(SweepSpec(), ["seed=0,1", "trainer.steps=2"], tmp_path, name="t")
    from lze_bench.sweep.manifest import save_manifest

    save_manifest(tmp_path, merge_plan(new_manifest(plan, []), plan))
    for run in ("s0", "s1"):
        mark_done(tmp_path / "runs" / run)
    watched = runner.invoke(app, ["sweep", "status", "--watch", "--every", "0.1", str(tmp_path)])
    assert watched.exit_code == 0 and "2 done" in watched.output, watched.output
    assert "status" in runner.invoke(app, ["sweep", "--help"]).output
    for args in (["sweep=quickstart", "--dry-run"], ["selector=uniform,lze", "seed=0,1", "--dry-run"]):
        result = runner.invoke(app, ["sweep", *args, f"sweep_dir={tmp_path / 'planned'}"])
        assert result.exit_code == 0, result.output
        words = " ".join(result.output.split())  # the table title wraps at the terminal's width
        assert "jobs ->" in words and "dry run" in words
        assert "4 jobs" in words or "sweep=quickstart" in args


def test_a_second_sweep_on_a_polling_sweep_directory_is_refused_in_one_line(tmp_path):
    """The first `lze-bench sweep` has submitted its job and is polling (poll_s=60): a second one on the
    same directory is refused before it touches the manifest; once the first has ended, it runs."""
    import os
    import signal
    import subprocess
    import sys
    import time

    sweep_dir = tmp_path / "sw"
    args = ["sweep", "seed=0", *BROKEN, f"sweep_dir={sweep_dir}"]
    code = "import sys\nfrom lze_bench.cli import app\nsys.argv[0] = 'lze-bench'\napp()\n"
    # SIGINT restored to its default in the child: a shell's background job starts with it ignored, and the
    # sweep would then sleep out its 60 s poll
    first = subprocess.Popen([sys.executable, "-c", code, *args, "poll_s=60"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, env={**os.environ, "COLUMNS": "200"},
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while not any(job.get("attempts") for job in (load_manifest(sweep_dir) or {"jobs": {}})["jobs"].values()):
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()[0]
            time.sleep(0.2)
        manifest = (sweep_dir / "manifest.json").read_bytes()
        second = runner.invoke(app, [*args, "poll_s=0.2"])
        lines = [line for line in second.output.splitlines() if line.strip()]
        assert second.exit_code == 2 and len(lines) == 1, second.output
        assert lines[0].startswith(f"error: sweep directory {str(sweep_dir)!r} is in use by another lze-bench "
                                   f"sweep (pid {first.pid} ")
        assert (sweep_dir / "manifest.json").read_bytes() == manifest
        assert runner.invoke(app, ["sweep", "status", str(sweep_dir)]).exit_code == 0  # reading is not locked
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=60)
    again = runner.invoke(app, [*args, "poll_s=0.2"])
    assert again.exit_code == 2 and "1 of 1 jobs failed" in again.output, again.output
    assert [job["attempts"] for job in load_manifest(sweep_dir)["jobs"].values()] == [2]


def test_a_requeue_that_stops_its_own_scontrol_is_a_requeue_not_a_failure():
    """submitit's requeue runs `scontrol requeue`, which Slurm's requeue stops (SIGTERM) with the rest of the
    job step: that is the requeue taking effect, so the job leaves without a result (not as a failed job);
    any other failure of the handler is raised."""
    import signal
    import subprocess

    from lze_bench import preemption

    def requeue_stopped(signum, frame):
        raise subprocess.CalledProcessError(-signal.SIGTERM, ["scontrol", "requeue", "9"])

    def requeue_refused(signum, frame):
        raise subprocess.CalledProcessError(1, ["scontrol", "requeue", "9"])

    with pytest.raises(SystemExit) as leaving:
        preemption.forward(requeue_stopped)
    assert leaving.value.code == -1
    with pytest.raises(subprocess.CalledProcessError):
        preemption.forward(requeue_refused)
    with pytest.raises(SystemExit) as plain:  # no handler to hand it to (not a submitit job)
        preemption.forward(signal.SIG_DFL)
    assert plain.value.code == 128 + signal.SIGUSR2


def test_dry_run_on_a_sweep_whose_config_changed_says_the_real_run_refuses(tmp_path):
    """A finished job planned again with another config: the dry run shows it refused (not "done (skip)")
    and exits as the real run does, with one line naming the jobs."""
    from lze_bench.sweep.manifest import save_manifest

    plan = plan_jobs(SweepSpec(), ["seed=0,1", "trainer.steps=2"], tmp_path, name="t")
    save_manifest(tmp_path, merge_plan(new_manifest(plan, []), plan))
    for run in ("s0", "s1"):
        mark_done(tmp_path / "runs" / run)
    same = runner.invoke(app, ["sweep", "--dry-run", "seed=0,1", "trainer.steps=2", f"sweep_dir={tmp_path}"])
    assert same.exit_code == 0 and "done (skip)" in same.output, same.output
    changed = runner.invoke(app, ["sweep", "--dry-run", "seed=0,1", "trainer.steps=4", f"sweep_dir={tmp_path}"])
    words = " ".join(changed.output.split())
    assert changed.exit_code == 2, changed.output
    assert "done (skip)" not in words and "refused" in words
    assert "the real run would refuse: 2 job(s)" in words and "s0, s1" in words
    real = runner.invoke(app, ["sweep", "seed=0,1", "trainer.steps=4", f"sweep_dir={tmp_path}"])
    assert real.exit_code == 2 and "was run with another config" in real.output


def test_a_recipe_with_an_unknown_key_is_one_line_naming_the_file_and_only_fails_when_chosen(tmp_path):
    """A sweep recipe or eval suite in ./sweeps, ./evals with a key its schema lacks: choosing it is one line
    naming the file and the key (exit 2); other commands still run while the file is there."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "sweeps").mkdir()
    (tmp_path / "evals").mkdir()
    (tmp_path / "sweeps" / "bad.yaml").write_text("grid:\n  seed: [0, 1]\ngrd: 3\n")
    (tmp_path / "evals" / "badsuite.yaml").write_text("benchmarks: [gsm8k]\nbogus_key: 1\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "lze_bench.cli", *args], capture_output=True, text=True,
                              cwd=tmp_path, env=env, timeout=300)

    for args, file, key in ((["sweep", "sweep=bad", "--dry-run"], "bad.yaml", "'grd'"),
                            (["eval", "eval=badsuite", "--dry-run"], "badsuite.yaml", "'bogus_key'")):
        out = cli(*args)
        lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
        assert out.returncode == 2 and len(lines) == 1, lines
        assert str(tmp_path / args[0].replace("sweep", "sweeps").replace("eval", "evals") / file) in lines[0]
        assert key in lines[0] and "Traceback" not in lines[0]
    other = cli("sweep", "seed=0,1", "trainer.steps=2", "--dry-run", f"sweep_dir={tmp_path / 'sw'}")
    assert other.returncode == 0, other.stdout + other.stderr
    by_path = runner.invoke(app, ["sweep", f"sweep={tmp_path / 'sweeps' / 'bad.yaml'}", "--dry-run"])
    assert by_path.exit_code == 2 and "bad.yaml: key 'grd'" in by_path.output


def test_watch_ends_when_no_job_can_progress_and_says_why_it_waits_while_a_sweep_runs(tmp_path, monkeypatch):
    """`launcher=slurm` without srun leaves every job new: nothing will submit them, so `--watch` ends and
    says how to submit them; while a sweep holds the directory, new jobs will still be submitted: it says so."""
    import threading

    from lze_bench.runlock import hold_run_dir

    sweep_dir = tmp_path / "sw"
    with monkeypatch.context() as no_slurm:
        no_slurm.setenv("PATH", str(tmp_path))  # no srun on PATH, as on a machine outside the cluster
        failed = runner.invoke(app, ["sweep", "seed=0,1", "trainer.steps=2", "launcher=slurm", "wait=false",
                                     f"sweep_dir={sweep_dir}"])
    assert failed.exit_code == 2 and "no srun on PATH" in failed.output, failed.output
    assert {e["status"] for e in load_manifest(sweep_dir)["jobs"].values()} == {"new"}
    outcome = {}
    watcher = threading.Thread(target=lambda: outcome.update(result=runner.invoke(
        app, ["sweep", "status", str(sweep_dir), "--watch", "--every", "0.1"])), daemon=True)
    watcher.start()
    watcher.join(timeout=60)
    assert not watcher.is_alive(), "the watch kept waiting on jobs nothing will submit"
    words = " ".join(outcome["result"].output.split())
    assert outcome["result"].exit_code == 0, words
    assert "2 job(s) were never submitted and no lze-bench sweep is running" in words and "launcher=slurm" in words
    with hold_run_dir(sweep_dir, "sweep", key=""):  # a sweep that is submitting them
        shown = runner.invoke(app, ["sweep", "status", str(sweep_dir)])
    words = " ".join(shown.output.split())
    assert "waiting: 2 new job(s) are still to be submitted by the running sweep" in words, words


def test_dry_run_shows_each_key_once_with_the_value_in_effect(tmp_path):
    """A recipe's `trainer.steps=2` overridden on the command line by `trainer.steps=4`: the dry run shows 4."""
    recipe = tmp_path / "steps.yaml"
    recipe.write_text("grid:\n  seed: [0, 1]\noverrides: [trainer.steps=2, trainer.eval_every=1]\n")
    result = runner.invoke(app, ["sweep", f"sweep={recipe}", "trainer.steps=4", "--dry-run",
                                 f"sweep_dir={tmp_path / 'sw'}"])
    assert result.exit_code == 0, result.output
    every = [line for line in result.output.splitlines() if line.startswith("every job: ")][0]
    assert "trainer.steps=4" in every and "trainer.eval_every=1" in every
    assert "trainer.steps=2" not in result.output


def test_a_local_sweep_stops_waiting_when_one_of_its_jobs_ends():
    """Between status checks a local sweep waits `poll_s`, but no longer than until a running job (a child
    process) ends, so the next job starts then; a pid that is not its child waits the whole interval."""
    import subprocess
    import sys
    import time

    from lze_bench.sweep.submit import _pause

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    data = {"jobs": {"a": {"job_id": str(child.pid), "status": "running"}, "b": {"job_id": None, "status": "done"}}}
    start = time.monotonic()
    _pause(30.0, "local", data)
    woke_after = time.monotonic() - start
    assert child.poll() == 0  # left for its owner to reap, and reaped here
    assert woke_after < 20.0  # the child's end, not the 30 s interval, ended the wait
    start = time.monotonic()
    _pause(0.5, "local", {"jobs": {"c": {"job_id": "1", "status": "running"}}})  # pid 1: not our child
    assert time.monotonic() - start >= 0.5


def test_a_local_sweep_runs_one_job_of_a_head_building_group_until_one_has_finished(tmp_path):
    """ASTRAL jobs with predictor=trained on the local backend share one cached head, built by the first of them:
    the others wait until one has finished instead of holding a slot on the build's lock."""
    from types import SimpleNamespace

    from lze_bench.sweep.submit import startable

    spec = SweepSpec(name="t", grid={"selector": ["uniform", "astral"], "seed": [0, 1, 2]},
                     overrides=["launcher=local"], selector_overrides={"astral": ["selector.predictor=trained"]})
    groups = {job.name: job.build_group for job in plan_jobs(spec, [], tmp_path, "t").jobs}
    assert {groups[f"uniform-s{s}"] for s in range(3)} == {""}
    assert len({groups[f"astral-s{s}"] for s in range(3)}) == 1 and groups["astral-s0"]

    plan = SimpleNamespace(jobs=[SimpleNamespace(name=n, build_group=g) for n, g in groups.items()])
    data = {"jobs": {n: {"status": "new"} for n in groups}}
    todo = ["astral-s0", "astral-s1", "astral-s2", "uniform-s0", "uniform-s1", "uniform-s2"]
    assert startable(plan, data, todo, 2) == ["astral-s0", "uniform-s0"]
    data["jobs"]["astral-s0"]["status"] = data["jobs"]["uniform-s0"]["status"] = "running"
    assert startable(plan, data, todo[1:3] + todo[4:], 1) == ["uniform-s1"]  # the head is still being built
    data["jobs"]["astral-s0"]["status"] = "done"
    assert startable(plan, data, todo[1:3] + todo[5:], 2) == ["astral-s1", "astral-s2"]
    data["jobs"]["astral-s0"]["status"] = "failed"  # no head: the next one builds it, alone again
    assert startable(plan, data, todo[1:3] + todo[5:], 2) == ["astral-s1", "uniform-s2"]
