"""Single-line mutation check of the selector rules (run by hand, not part of `pytest`).

    python3 tests/mutation/mutate_selectors.py [--files lze.py,greso.py] [--json out.json] [--jobs 2]
    python3 tests/mutation/mutate_selectors.py --rerun out.json     # only the survivors of an earlier run
    python3 tests/mutation/mutate_selectors.py --since REV          # only lines changed since git REV

For every selector module (lze_bench/selectors/*.py but the speed kernels of
`topk.py`, which tests/test_selector_kernels.py checks against the plain
formulas), each token that carries a rule is mutated alone, one
mutant per token: comparison swaps (`<` `<=` `>` `>=` `==` `!=`), arithmetic
swaps (`+` `-`, `*` `/`, `//` `/`), `max` / `min` (and the `np.` forms),
`floor` / `ceil`, `and` / `or`, `True` / `False`, a removed `abs` / `not`,
numeric constants (0 -> 1, 1 -> 0 and 2, k -> k + 1, x -> 2x for floats) and
the `on_exhaust` default. Skipped lines, which hold no spec rule: docstrings
and comments (never tokens of code), imports, `def`/`class` lines, config
validation (`require(...)`), error messages (`raise ...` and f-strings) and
type annotations.

Each mutant is written into a private copy of the checkout (the working tree
is never touched) and the selector tests run against it, fastest first, with
`-x -q -p no:cacheprovider`, in a child forked from a process that has
already imported the heavy dependencies; property tests are capped at
HYPOTHESIS_EXAMPLES derandomized examples (speed, and the same verdict on
every run). A mutant that no test fails *survives*. The
report lists every survivor with its line; a survivor is either a missing
test (add one) or an equivalent mutant (the same behaviour; give the reason
in EQUIVALENT below, keyed by file and the mutated line's text).
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import sys
import tempfile
import time
import tokenize
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SELECTORS = REPO / "lze_bench" / "selectors"
SKIP_FILES = {"__init__.py", "topk.py"}
TESTS = ["tests/test_selectors_ragged.py", "tests/test_selectors_pods.py", "tests/test_selectors_curricula.py", "tests/test_selectors_spec.py", "tests/test_selectors.py", "tests/test_selector_contracts.py",
         "tests/test_replay.py", "tests/test_step_rounds.py", "tests/test_selector_kernels.py",
         "tests/test_predictor.py"]

HYPOTHESIS_EXAMPLES = 15  # per property test and mutant; the default suite runs the full numbers
DESELECT = ["tests/test_selectors.py::test_bench_selectors_measures_every_selector",  # a timing command, not a rule
            # the head's training and a training run: torch work of lze_bench/predictor, not a selector rule
            "tests/test_predictor.py::test_training_learns_difficulty_the_kernel_cannot_see",
            "tests/test_predictor.py::test_trained_head_run_records_its_offline_cost_and_a_checkpoint_run_reuses_the_head"]
SWAPS = {
    "<": ["<="], "<=": ["<"], ">": [">="], ">=": [">"], "==": ["!="], "!=": ["=="],
    "+": ["-"], "-": ["+"], "*": ["/"], "/": ["*"], "//": ["/"], "**": ["*"],
    "max": ["min"], "min": ["max"], "maximum": ["minimum"], "minimum": ["maximum"],
    "floor": ["ceil"], "ceil": ["floor"], "and": ["or"], "or": ["and"], "True": ["False"], "False": ["True"],
    "abs": [""], "not": [""], '"partial"': ['"error"'],
}
SKIP_LINE_STARTS = ("import ", "from ", "def ", "class ", "@", "raise ", "require(", "return f\"", "#")

# (file, stripped original line, mutation) -> why that mutant behaves exactly like the original
EQUIVALENT = {
    ("mopps.py", "inside = np.flatnonzero((sampled >= cfg.lower) & (sampled <= cfg.upper))", ">= -> >"):
        "a Beta draw equals the interval's bound with probability 0 (continuous distribution)",
    ("mopps.py", "inside = np.flatnonzero((sampled >= cfg.lower) & (sampled <= cfg.upper))", "<= -> <"):
        "a Beta draw equals the interval's bound with probability 0 (continuous distribution)",
    ("mopps.py", "if inside.size >= budget:  # L55-57: a uniform random `budget` of those in range", ">= -> >"):
        "exactly `budget` in range: the nearest-to-the-interval branch picks them too (distance 0), the same set",
    ("adarft.py", "if short < tied.size:", "< -> <="):
        "short == tied.size: top_k_mask of all the tied keeps them all, as skipping the cut does",
    ("sec.py", "self.queue = np.zeros(0, dtype=np.int64)  # every arm's queue, arm after arm", "0 -> 1"):
        "the initial queue is never read: q_pos = q_end = 0 make every arm's window empty until the first refill",
    ("sec.py", "_, first = np.unique(window[: 2 * take], return_index=True)  # a repeat is the refill's, <= take apart",
     "2 -> 3"): "any window of >= 2 take pops holds the first `take` distinct prompts; a longer one finds the same",
    ("base.py", "replay: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), dtype=np.int64))", "2 -> 3"):
        "__post_init__ reshapes replay to (-1, 2): an empty (0, 3) default becomes the same empty (0, 2)",
    ("base.py", "self.replay = np.asarray(self.replay, dtype=np.int64).reshape(-1, 2)", "1 -> 2"):
        "numpy reads any negative size in reshape as 'infer this one': reshape(-2, 2) == reshape(-1, 2)",
    ("base.py", "if round_index >= 1:", "1 -> 0"):
        "round 0 then appends a 0: numpy's SeedSequence gives [seed, step, tag, 0] the stream of [seed, step, tag]",
    ("lze.py", "self.update_pruner(ids, p >= SOLVED)", ">= -> >"):
        "pass rates are multiples of 1/n: none equals 1 - 1e-8 (n < 10^8), so > and >= solve the same groups",
    ("lze.py", 'st.cache_card = -np.abs(st.ema[ids] - 0.5) if cfg.variant == "card" else np.zeros(0)', "0 -> 1"):
        "cache_card is read only by variant='card', which always caches a card of its own",
    ("greso_state.py", "keep = np.where(easy > 0, np.maximum(self.p_easy ** easy.astype(np.float64), floor), keep)",
     "> -> >="): "easy_run == 0 then gives max(p_easy ** 0, floor) = 1, the default keep probability",
    ("astral.py", "if pid.size == 0:", "0 -> 1"): "a one-entry buffer is already deduplicated: returned unchanged",
    ("astral.py", "last = np.full(num_prompts, -1, dtype=np.int64)", "1 -> 0"):
        "only last[pid] is read, each overwritten by np.maximum.at with an index >= 0 >= the initial value",
    ("astral.py", "last = np.full(num_prompts, -1, dtype=np.int64)", "1 -> 2"):
        "only last[pid] is read, each overwritten by np.maximum.at with an index >= 0 > the initial value",
    ("astral.py", "self.ref_ids, self.y_ref, self.round_ids = empty, np.zeros(0), empty", "0 -> 1"):
        "y_ref is read only when ref_ids is non-empty, i.e. after observe_probe / load_state_dict, which replace it",
    ("astral.py", "self.drawn_round, self.round_fresh = -1, 0", "1 -> 2"):
        "start-up sentinel: -2, like -1, is no round index (rounds are >= 0), so the first call draws",
    ("astral.py", "self.drawn_round, self.round_fresh = -1, 0", "0 -> 1"):
        "round_fresh is set by the draw that the sentinel drawn_round forces before any slice is read",
    ("astral.py", "self.budget = -1 if batch_size is None else int(batch_size)  # -1: not known yet", "1 -> 2"):
        "placeholder: _budget() only tests budget < 0; -2 is unknown too",
    ("astral.py", "replay = np.zeros((0, 2), dtype=np.int64)", "2 -> 3"):
        "UpdateDecision reshapes replay to (-1, 2): an empty (0, 3) array becomes the same empty (0, 2)",
    ("astral.py", "if pid.size > cap:", "> -> >="): "pid.size == cap >= 0 gives cut = 0: nothing removed",
    ("astral.py", "if int(step) // self.config.mu >= 1:", "// -> /"):
        "integers step >= 0, mu >= 1: step / mu >= 1 <=> step >= mu <=> step // mu >= 1",
    ("astral.py", "self.buf_split = 0", "0 -> 1"):
        "the initial buffer is empty: any split gives the same empty pool",
    ("astral.py", "if self.budget >= 0:", ">= -> >"):
        "with budget 0, cap' = buffer_size - 0 >= 0: there is nothing to refuse at construction",
    ("astral.py", "if self.budget >= 0:", "0 -> 1"):
        "with budget 0, cap' = buffer_size - 0 >= 0: there is nothing to refuse at construction",
    ("astral.py", 'features("head_calibration", self.ref_ids[:0]),', "0 -> 1"):
        "the calibration weights are one array for every prompt: the feature ignores the ids",
    ("astral.py", "if split < 0:", "< -> <="):
        "split 0: the buffer is one appended batch (distinct prompts), which both paths deduplicate and filter alike",
    ("astral.py", "if split < 0:", "0 -> 1"):
        "split 0: the buffer is one appended batch (distinct prompts), which both paths deduplicate and filter alike",
    ("astral_predict.py", "w1, b1, w2, b2 = weights[:20].reshape(10, 2), weights[20:30], weights[30:50].reshape(2, 10), "
     "weights[50:52]", "52 -> 53"): "the packed array has 52 entries: slicing to 53 gives the same two",
    ("greso_state.py", "arrays[key] = value.astype(np.int32, copy=True)", "True -> False"):
        "the loaded arrays are copied into the record array; no view of the caller's state is kept",
    ("hive.py", "if value.dtype != np.float32:  # float32 stays: its values compare exactly against a float64 median",
     "!= -> =="): "float32 then goes to float64 and float64 stays: either way V is compared in float64 with the median",
    ("astral_predict.py", "CHUNK_ROWS = 8192  # rows of similarities held at once: 8192 x ref_size float32",
     "8192 -> 8193"): "chunk size of a row-wise loop: every chunk computes the same rows (test: rows beyond one chunk)",
    ("astral_predict.py", "return vectors / np.where(norms > 0, norms, 1.0)  # a zero embedding stays zero (similarity 0)",
     "1.0 -> 2.0"): "the divisor is used only for zero rows: 0 / 2 = 0 / 1 = 0",
    ("pods.py", "square = squares[:, i] + squares[:, n] - squares[:, n - m + i]", "+ -> -"):
        "the first +: squares[:, n] (a group's Σr² over all n) is one number per group, so -Σ instead of +Σ shifts "
        "every candidate's score by the same -2mΣ and the chosen i is the same (the other + -> - is killed)",
    ("astral_predict.py", "slope = float(np.dot(centered, y_ref - y_ref.mean())) / variance", "- -> +"):
        "centered sums to 0, so dot(centered, y + m) = dot(centered, y - m) up to rounding (~1e-16)",
}


# (substring of the line, mutation) -> reason, for every file
EQUIVALENT_PATTERNS = {
    ("if low >= 0 and high < 4 * ids.size + 1024:", "*"):
        "chooses bincount or np.unique for the same duplicate test (dataset ids are >= 0; tests cover both)",
    ("low, high = int(ids.min()), int(ids.max())", "*"):
        "bounds that only choose bincount or np.unique for the same duplicate test (ids >= 0)",
    ("BLOCK = 1 << 16", "*"): "block size of a blocked loop: every block computes the same values",
    ("SOLVED = 1.0 - 1e-8", "1e-8 -> 2e-08"): "pass rates are multiples of 1/n: no p lies in [1 - 2e-8, 1 - 1e-8) for n < 5e7",
    ("(self.batch_size or 0) // 4)", "// -> /"): "int() of a positive quotient is its floor; max(1, x < 1) is 1",
    ("(self.batch_size or 0) // 4)", "0 -> 1"): "without a batch size, 0 // 4 and 1 // 4 are both 0: max(1, .) = 1",
    ("or raw == 0 or raw == int(total_responses)", "0 -> 1"):
        "raw = 0 gives count 0 >= raw (no cut) anyway; raw = 1 is always one whole unit",
    ("count = (raw // unit) * unit or min(unit, raw)", "min -> max"):
        "that branch runs only when raw < unit, where min and max both give count >= raw: nothing is cut",
    ("reshape(-1)", "1 -> 2"): "numpy reads any negative size as 'infer': reshape(-2) is reshape(-1)",
    ("~(draws < ", "< -> <="): "a uniform draw equals the skip probability with probability 0 (2^-53 per draw)",
    ("k = max(max(1, int(np.floor(groups * ratio))), max(1, int(np.floor(groups * ratio_min))))", "1 -> 0"):
        "the other inner max(1, ...) still keeps k >= 1",
    ("if np.count_nonzero(passed) > budget:", "> -> >="):
        "with exactly `budget` passing, the top-`budget` cap picks the same prompts",
}


def equivalent_reason(name: str, code: str, what: str) -> str | None:
    if (name, code, what) in EQUIVALENT:
        return EQUIVALENT[(name, code, what)]
    return next((why for (part, mutation), why in EQUIVALENT_PATTERNS.items()
                 if part in code and mutation in (what, "*")), None)


def mutants(path: Path):
    """(line number, original line, mutated line, description) for every single-token mutation of `path`."""
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    depth = 0  # bracket depth, to tell an annotation colon from a slice / dict colon
    skip_rows = set()
    for index, tok in enumerate(tokens):  # rows of a multi-line `require(...)` / `raise ...` call
        if tok.start[0] <= len(lines) and tok.type == tokenize.NAME and tok.string in ("require", "raise") and tok.start[1] == len(
                lines[tok.start[0] - 1]) - len(lines[tok.start[0] - 1].lstrip()):
            level, end = 0, tok.start[0]
            for later in tokens[index + 1:]:
                if later.string in "([{" and later.type == tokenize.OP:
                    level += 1
                elif later.string in ")]}" and later.type == tokenize.OP:
                    level -= 1
                end = later.end[0]
                if level == 0 and later.type in (tokenize.NEWLINE, tokenize.NL):
                    break
            skip_rows.update(range(tok.start[0], end + 1))
    for tok in tokens:
        row, col = tok.start
        if row > len(lines):
            continue
        line = lines[row - 1]
        stripped = line.strip()
        if tok.type == tokenize.OP and tok.string in "([{":
            depth += 1
        elif tok.type == tokenize.OP and tok.string in ")]}":
            depth -= 1
        if row in skip_rows or stripped.startswith(SKIP_LINE_STARTS) or tok.start[0] != tok.end[0]:
            continue
        if tok.type == tokenize.STRING and tok.string != '"partial"':
            continue
        if ":" in stripped and stripped.split(":")[0].strip().isidentifier() and depth == 0 and "=" in stripped \
                and tok.type == tokenize.NAME and tok.string not in ("True", "False"):
            continue  # `name: type = default` annotations (the default's constants are still mutated)
        replacements = []
        if tok.string in SWAPS and tok.type in (tokenize.OP, tokenize.NAME, tokenize.STRING):
            replacements = SWAPS[tok.string]
        elif tok.type == tokenize.NUMBER:
            replacements = number_mutations(tok.string)
        for new in replacements:
            mutated = line[:col] + new + line[tok.end[1]:]
            if new == "" and tok.string == "not":
                mutated = line[:col] + line[tok.end[1]:].lstrip()
            yield row, line, mutated, f"{tok.string!s} -> {new or '(removed)'}"


def number_mutations(text: str) -> list[str]:
    try:
        value = int(text, 0)
    except ValueError:
        value = float(text)
        return [repr(value * 2) if value else "1.0"]
    if value == 0:
        return ["1"]
    if value == 1:
        return ["0", "2"]
    return [str(value + 1)]


def preload() -> None:
    """Import the heavy third-party modules once; each mutant's test run forks from here (lze_bench is not
    imported in the parent, so every child imports the mutated code)."""
    import hypothesis  # noqa: F401
    import numpy  # noqa: F401
    import omegaconf  # noqa: F401
    import pandas  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    import pytest  # noqa: F401
    import rich.console  # noqa: F401
    import torch  # noqa: F401  (tests/test_predictor.py: ASTRAL's head)
    import typer  # noqa: F401
    from hydra import compose  # noqa: F401


def cap_hypothesis() -> None:
    """At most HYPOTHESIS_EXAMPLES derandomized examples per property test (speed; the same verdict each run)."""
    import hypothesis

    original = hypothesis.settings.__init__

    def capped(self, parent=None, **kwargs):
        kwargs["max_examples"] = min(kwargs.get("max_examples", HYPOTHESIS_EXAMPLES), HYPOTHESIS_EXAMPLES)
        kwargs["derandomize"] = True
        kwargs.pop("database", None)
        original(self, parent, database=None, **kwargs)

    hypothesis.settings.__init__ = capped
    hypothesis.settings.register_profile("mutation", max_examples=HYPOTHESIS_EXAMPLES, derandomize=True,
                                         database=None)
    hypothesis.settings.load_profile("mutation")


def run_tests(root: Path) -> int:
    """pytest's exit code for the selector tests of the copy at `root`, in a forked child."""
    import os

    pid = os.fork()
    if pid == 0:  # child: quiet, the copy first on sys.path, run, exit without cleanup
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            os.chdir(root)
            sys.path.insert(0, str(root))
            os.environ["PYTHONPATH"] = str(root)
            sys.dont_write_bytecode = True
            cap_hypothesis()
            import pytest

            code = pytest.main(["-x", "-q", "-p", "no:cacheprovider", "--no-header", *TESTS,
                                *(f"--deselect={t}" for t in DESELECT)])
        except BaseException:  # noqa: BLE001  (any crash counts as a failing test run)
            code = 99
        os._exit(int(code))
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def run_mutant(root: Path, rel: str, row: int, mutated: str, original: list[str]) -> bool:
    """True if some selector test fails on the mutant (killed)."""
    lines = list(original)
    lines[row - 1] = mutated
    target = root / rel
    target.write_text("".join(lines))
    try:
        return run_tests(root) != 0
    finally:
        target.write_text("".join(original))


def changed_rows(path: Path, since: str) -> set[int]:
    """Line numbers of `path` added or changed since git revision `since` (every line of a new file)."""
    import subprocess

    diff = subprocess.run(["git", "diff", "-U0", since, "--", str(path)], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout
    rows = set()
    for line in diff.splitlines():
        if line.startswith("@@"):  # @@ -a,b +c,d @@: d lines from c (d omitted = 1)
            start, _, count = line.split()[2][1:].partition(",")
            rows.update(range(int(start), int(start) + int(count or 1)))
    return rows


def copy_checkout(dest: Path) -> Path:
    for name in ("lze_bench", "tests", "sweeps", "evals", "pyproject.toml", "README.md"):
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif src.exists():
            shutil.copy2(src, dest / name)
    return dest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", default="", help="comma-separated selector files (default: all but kernels)")
    parser.add_argument("--json", default=None, help="write the full result here")
    parser.add_argument("--jobs", type=int, default=1, help="mutants run at once (each in its own copy)")
    parser.add_argument("--list", action="store_true", help="only list the mutants")
    parser.add_argument("--since", default=None,
                        help="a git revision: mutate only the lines added or changed since it (a new file: all)")
    parser.add_argument("--rerun", default=None,
                        help="a previous --json result: run only its survivors (matched by file, code, mutation; "
                             "its equivalent mutants are not run again)")
    args = parser.parse_args()
    files = [SELECTORS / f for f in args.files.split(",") if f] or sorted(
        p for p in SELECTORS.glob("*.py") if p.name not in SKIP_FILES)
    work = [(path, *m) for path in files for m in mutants(path)]
    if args.since:
        changed = {path: changed_rows(path, args.since) for path in files}
        work = [w for w in work if w[1] in changed[w[0]]]
    if args.rerun:
        previous = json.loads(Path(args.rerun).read_text())["mutants"]
        wanted = {(r["file"], r["code"], r["mutation"]) for r in previous if r["status"] == "survived"}
        work = [w for w in work if (w[0].name, w[2].strip(), w[4]) in wanted]
    if args.list:
        for path, row, line, _, what in work:
            print(f"{path.name}:{row}: {what}: {line.strip()}")
        print(f"{len(work)} mutants")
        return 0
    started = time.time()
    preload()
    roots = [copy_checkout(Path(tempfile.mkdtemp(prefix="lze-mutant-"))) for _ in range(max(1, args.jobs))]
    results = []

    def one(item):
        index, (path, row, line, mutated, what) = item
        root = roots[index % len(roots)]
        rel = str(path.relative_to(REPO))
        killed = run_mutant(root, rel, row, mutated, (root / rel).read_text().splitlines(keepends=True))
        reason = equivalent_reason(path.name, line.strip(), what)
        status = "killed" if killed else ("equivalent" if reason else "survived")
        print(f"[{index + 1}/{len(work)}] {status:10s} {path.name}:{row}: {what}: {line.strip()}", flush=True)
        return {"file": path.name, "line": row, "mutation": what, "code": line.strip(), "status": status,
                "reason": reason}

    try:
        if len(roots) == 1:
            results = [one(item) for item in enumerate(work)]
        else:  # one worker per copy: mutant i always runs in copy i % jobs
            with ThreadPoolExecutor(len(roots)) as pool:
                chunks = [[item for item in enumerate(work) if item[0] % len(roots) == k] for k in range(len(roots))]
                results = [r for chunk in pool.map(lambda c: [one(i) for i in c], chunks) for r in chunk]
    finally:
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)
    counts = {s: sum(r["status"] == s for r in results) for s in ("killed", "equivalent", "survived")}
    print(f"\n{len(results)} mutants in {time.time() - started:.0f} s: {counts['killed']} killed, "
          f"{counts['equivalent']} equivalent, {counts['survived']} survived")
    for r in results:
        if r["status"] != "killed":
            print(f"  {r['status']}: {r['file']}:{r['line']}: {r['mutation']}: {r['code']}"
                  + (f"  ({r['reason']})" if r["reason"] else ""))
    if args.json:
        Path(args.json).write_text(json.dumps({"counts": counts, "mutants": results}, indent=1))
    return 1 if counts["survived"] else 0


if __name__ == "__main__":
    sys.exit(main())
