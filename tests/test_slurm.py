"""Sweeps through a real Slurm (sbatch, job arrays, squeue), as started by .ci/slurm/start.sh.

Skipped, with the reason, when no Slurm cluster answers here (a laptop without
Slurm); .ci/run installs and starts a single-node cluster before pytest.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from lze_bench.errors import LzeBenchError
from lze_bench.ledger import read_ledger
from lze_bench.rundir import is_done
from lze_bench.sweep import SweepSpec
from lze_bench.sweep.grid import plan_jobs
from lze_bench.sweep.manifest import load_manifest
from lze_bench.sweep.submit import run_sweep


def slurm_unavailable() -> str | None:
    """None when a Slurm node is up; otherwise why not."""
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return ("Slurm is not installed (no sbatch/sinfo on PATH); install and start a single-node cluster: "
                "bash .ci/slurm/install.sh && bash .ci/slurm/start.sh (root, apt-get)")
    try:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "sinfo timed out: the Slurm controller does not answer; start it with .ci/slurm/start.sh"
    if out.returncode != 0:
        return f"sinfo failed ({out.stderr.strip()[:120]}); start the cluster with .ci/slurm/start.sh"
    states = out.stdout.split()
    if not any(s.rstrip("*~#") in ("idle", "mix", "alloc", "comp") for s in states):
        return f"no Slurm node is up (node states: {', '.join(states) or 'none'}); start it with .ci/slurm/start.sh"
    return None


@pytest.fixture(scope="module")
def slurm_up() -> None:
    """Skip, saying why, without a Slurm node; asked once, when the first selected test runs (at import time a
    down controller cost every collection a `sinfo` timeout, ~9 s)."""
    reason = slurm_unavailable()
    if reason is not None:
        pytest.skip(f"real Slurm unavailable: {reason}")


pytestmark = pytest.mark.usefixtures("slurm_up")


def test_slurm_array_reports_failed_jobs_with_their_error(tmp_path):
    """Two jobs as one sbatch array; both fail at start (no such model): the manifest says so, with the error."""
    sweep_dir = tmp_path / "sw"
    overrides = ["seed=0,1", "model=/nonexistent/lze-bench-test-model", "trainer.steps=1", "launcher=slurm"]
    plan = plan_jobs(SweepSpec(), overrides, sweep_dir, name="slurm-fail")
    with pytest.raises(LzeBenchError, match="2 of 2 jobs failed"):
        run_sweep(plan, wait=True, poll_s=0.5)
    data = load_manifest(sweep_dir)
    ids = sorted(entry["job_id"] for entry in data["jobs"].values())
    base = ids[0].split("_")[0]
    assert ids == [f"{base}_0", f"{base}_1"]  # one array, two elements
    assert all(entry["status"] == "failed" and entry["error"] for entry in data["jobs"].values())
    script = (sweep_dir / "submitit" / f"{base}_submission.sh").read_text()
    assert "#SBATCH --array=0-1%" in script and "export OMP_NUM_THREADS=1" in script


# A real but tiny training: no warm start (nothing to cache), small batches, a short held-out set.
TINY = ["backend.warmstart_steps=0", "trainer.batch_size=4", "trainer.n_samples=4", "trainer.max_new_tokens=16",
        "backend.eval_size=20", "launcher=slurm", "launcher.timeout_min=10"]


@pytest.mark.slow  # a sweep through a real Slurm (~22 s)
def test_slurm_sweep_results_land(tmp_path):
    """Real training through sbatch (one array, two jobs): each job's run dir gets its ledger and DONE."""
    sweep_dir = tmp_path / "sw"
    overrides = ["seed=0,1", "trainer.steps=2", "trainer.eval_every=2", *TINY]
    plan = plan_jobs(SweepSpec(), overrides, sweep_dir, name="slurm-ok")
    data = run_sweep(plan, wait=True, poll_s=1.0)
    for job in plan.jobs:
        assert data["jobs"][job.name]["status"] == "done", data["jobs"][job.name]
        assert is_done(job.run_dir)
        assert read_ledger(job.run_dir)["step"].nunique() == 2


def _start_when_requeued(job_id: str, timeout_s: float = 120) -> None:
    """Slurm holds a requeued job for about two minutes (reason BeginTime); start it now instead, once the node
    has finished cleaning up the job's first run (no node COMPLETING) and the clock has moved past the second of
    the requeue. Slurm revokes the first run's job credential at the requeue, to the second: a start granted in
    that same second, or while the node still holds the old step, is killed ("Job credential revoked") and the
    job ends without a result. On a loaded machine the cleanup takes long enough for that to happen."""
    import time

    deadline = time.time() + timeout_s
    while time.time() < deadline:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T %r"], capture_output=True, text=True).stdout
        if "BeginTime" in out:
            break
        time.sleep(0.2)
    else:
        return  # not seen held: Slurm starts it at its own begin time
    held_at = time.time()
    while time.time() < deadline:
        nodes = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True).stdout
        if "COMPLETING" not in nodes.upper() and time.time() - held_at >= 2.0:
            subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], check=True)
            return
        time.sleep(0.2)


@pytest.mark.slow
def test_slurm_requeue_resumes_from_the_last_checkpoint(tmp_path):
    """A job signalled as timed out (USR2, as Slurm does before its time limit) is checkpointed by
    submitit, requeued with `scontrol requeue`, and resumes from its last complete checkpoint."""
    import time

    import submitit

    from lze_bench.rundir import list_checkpoints

    sweep_dir = tmp_path / "sw"
    overrides = ["trainer.steps=8", "trainer.checkpoint_every=2", "trainer.eval_every=8", *TINY]
    plan = plan_jobs(SweepSpec(), overrides, sweep_dir, name="slurm-requeue")
    data = run_sweep(plan, wait=False)
    (entry,) = data["jobs"].values()
    run_dir = plan.jobs[0].run_dir
    deadline = time.time() + 300
    while not list_checkpoints(run_dir) and time.time() < deadline:
        time.sleep(0.5)
    assert list_checkpoints(run_dir), "no checkpoint within 5 minutes"
    submitit.SlurmJob(folder=sweep_dir / "submitit", job_id=entry["job_id"])._interrupt(timeout=True)
    _start_when_requeued(entry["job_id"])
    data = run_sweep(plan, wait=True, poll_s=1.0)  # nothing to submit: waits for the requeued job
    assert data["jobs"][plan.jobs[0].name]["status"] == "done"
    assert data["jobs"][plan.jobs[0].name]["attempts"] == 1  # requeued by Slurm, not resubmitted
    ledger = read_ledger(run_dir)
    assert ledger["step"].tolist() == list(range(8))
    log_text = "".join(p.read_text() for p in (sweep_dir / "submitit").glob("*_log.*"))
    assert "Requeued job" in log_text and "(resume=True)" in log_text  # submitit requeued; the run resumed
    assert "resuming" in log_text  # ... from its last complete checkpoint (the backend's own log line)


@pytest.mark.slow
def test_slurm_preempted_job_saves_the_step_in_hand_and_its_ledger_equals_an_unbroken_runs(tmp_path):
    """Slurm's warning signal (USR2, `launcher.signal_delay_s` before a stop) reaches a training job mid-run,
    with no periodic checkpoint due before its end: it finishes the step in hand, checkpoints it, is requeued
    and resumes there, so at most that step is redone; its ledger equals an unbroken job's."""
    import re
    import time

    import pandas as pd
    import submitit

    from lze_bench.ledger import LEDGER_COLUMNS
    from lze_bench.rundir import list_checkpoints

    overrides = ["trainer.steps=8", "trainer.checkpoint_every=100", "trainer.eval_every=8", *TINY]
    unbroken = plan_jobs(SweepSpec(), overrides, tmp_path / "unbroken", name="slurm-unbroken")
    plan = plan_jobs(SweepSpec(), overrides, tmp_path / "preempted", name="slurm-preempted")
    run_sweep(unbroken, wait=False)
    (entry,) = run_sweep(plan, wait=False)["jobs"].values()
    run_dir = plan.jobs[0].run_dir
    deadline, rows = time.time() + 300, 0
    while rows < 2:
        assert time.time() < deadline, "fewer than 2 steps within 5 minutes"
        time.sleep(0.3)
        rows = len(read_ledger(run_dir)) if (run_dir / "ledger.parquet").exists() else 0
    submitit.SlurmJob(folder=plan.sweep_dir / "submitit", job_id=entry["job_id"])._interrupt(timeout=True)
    _start_when_requeued(entry["job_id"])
    for sweep in (plan, unbroken):
        data = run_sweep(sweep, wait=True, poll_s=1.0)
        assert data["jobs"][sweep.jobs[0].name]["status"] == "done"
    log_text = "".join(p.read_text() for p in (plan.sweep_dir / "submitit").glob("*_log.*"))
    saved = re.search(r"preemption warning: checkpoint step_(\d+) saved", log_text)
    assert saved and "Requeued job" in log_text, log_text[-3000:]
    step = int(saved.group(1))
    assert rows <= step <= rows + 2 < 8 + 2 and f"from checkpoint step_{step:06d}" in log_text
    assert [s for s, _ in list_checkpoints(run_dir)] == [step, 8]
    columns = [c for c in LEDGER_COLUMNS if not c.startswith("time_") and c != "cum_time_s"]
    pd.testing.assert_frame_equal(read_ledger(unbroken.jobs[0].run_dir)[columns], read_ledger(run_dir)[columns])
