"""A rich progress bar on stderr for the warm start and the training loop.

Stderr, so stdout carries only the CLI's final line. `LZE_BENCH_PROGRESS=0`
turns it off (sweeps writing to log files).
"""

from __future__ import annotations

import contextlib

from lze_bench import env


@contextlib.contextmanager
def progress_bar(description: str, total: int, completed: int = 0):
    """Yields `advance(status: str = "")`, which adds one step and shows `status`."""
    if not env.progress_shown():
        yield lambda status="": None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TimeRemainingColumn(), TextColumn("{task.fields[status]}"), console=Console(stderr=True),
    )
    with progress:
        task = progress.add_task(description, total=total, completed=completed, status="")

        def advance(status: str = "") -> None:
            progress.update(task, advance=1, status=status)

        yield advance
