"""`lze-bench bench grading`: answers graded per second and per CPU-second.

Workloads are built from real benchmark rows (GSM8K, AIME25, AMC23, MATH-500
test files, layout `<root>/<name>/test.jsonl`): each response is a real worked solution (GSM8K `answer` text, MATH-500 `solution`)
whose final `\\boxed{}` holds a model-style answer:

- integer, 8 samples: every GSM8K/AIME25/AMC23 gold, 8 responses per problem
  as a sampled RL group looks: 4 x the gold, 1 x another form of it (`18.0`,
  `1,800`, `\\$18`, `18 \\text{ dollars}`), 2 x a wrong number, 1 x cut off
  before its box. This is the typical load (training rewards, GSM8K/AIME/AMC evals).
- integer, distinct: the same answers with every (answer, gold) pair once.
- math500, 8 samples / distinct: MATH-500 LaTeX golds; 4 x the gold string,
  2 x rewritten (`\\dfrac`, no `\\left`/`\\right`, spacing), 2 x a changed digit.
- adversarial: huge power towers and factorials, 450 nested braces, 60
  nested fractions, 120 nested roots, a 450-term sum (all parsed by
  math-verify), 3,000 nested braces and a 10,000-term sum (over
  MAX_ANSWER_CHARS), a 1 MB response; each must come back wrong within the timeout.

Each workload gets a fresh Grader whose pool is started (and warmed) before
the clock starts; start-up is reported in a note. Per core = answers / CPU
seconds of the calling process plus the pool's workers (Linux /proc).
Options: data=PATH (the benchmark folder; default: env LZE_BENCH_DATA, the
`data.root` every command reads, else the checkout's `tests/data`: a few real
rows per benchmark, enough to run, too few for stable figures; the notes say
which and how many answers), workers=N (0 = one per core), timeout=S.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from lze_bench import env
from lze_bench.bench import BenchResult
from lze_bench.errors import LzeBenchError
from lze_bench.registry import BENCH_COMMANDS

FORMS = ("{}.0", "{:,}", "\\${}", "{} \\text{{ dollars}}")
# Within MAX_ANSWER_CHARS (math-verify runs on them) and beyond it (graded wrong unparsed).
ADVERSARIAL = (
    "2^{2^{2^{2^{30}}}}", "10^{10^{10^{10}}}", "(10^{6})!", "9999999999!", "{" * 450 + "1" + "}" * 450,
    "\\frac{1}{" * 60 + "1" + "}" * 60, "+".join(["x"] * 450), "\\sqrt{" * 120 + "2" + "}" * 120,
    "{" * 3000 + "1" + "}" * 3000, "+".join(["x"] * 10_000),
)


NEEDED = ("gsm8k", "aime25", "amc23", "math500")
# The repository's test slices (tests/data/<name>/SOURCE.md); present in a clone or editable install only.
CHECKOUT_SLICES = Path(__file__).resolve().parents[2] / "tests" / "data"


def _data_root(options: dict) -> Path:
    """data=PATH, else env LZE_BENCH_DATA, else the checkout's test slices; the first given one must hold every file."""
    given = options.get("data") or env.data_root()
    root = Path(given) if given else CHECKOUT_SLICES
    missing = [f"{name}/test.jsonl" for name in NEEDED if not (root / name / "test.jsonl").is_file()]
    if missing:
        how = "data=PATH" if options.get("data") else "LZE_BENCH_DATA" if given else "the default (a checkout's tests/data)"
        raise LzeBenchError(f"bench grading: {root} ({how}) lacks {', '.join(missing)}; pass data=PATH, a folder with "
                            f"{', '.join(n + '/test.jsonl' for n in NEEDED)} (sources: tests/data/<name>/SOURCE.md)")
    return root


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _box(reasoning: str, answer: str | None) -> str:
    return reasoning + ("" if answer is None else f"\nTherefore, the final answer is $\\boxed{{{answer}}}$.")


def integer_groups(root: Path) -> tuple[list[str], list[str]]:
    from lze_bench.grading import normalize_gold

    items = [(r["answer"].split("####")[0], normalize_gold(r["answer"], "gsm8k")) for r in _jsonl(root / "gsm8k/test.jsonl")]
    for name, field in (("aime25", "question"), ("amc23", "problem")):
        items += [(f"We work through: {r[field][:400]}", normalize_gold(r["answer"], "integer"))
                  for r in _jsonl(root / name / "test.jsonl")]
    responses, golds = [], []
    for index, (reasoning, gold) in enumerate(items):
        value = int(gold)
        other = FORMS[index % len(FORMS)].format(value)
        for answer in (gold, gold, gold, gold, other, str(value + 1), str(value * 2 + 3), None):
            responses.append(_box(reasoning, answer))
            golds.append(gold)
    return responses, golds


def _mutate(gold: str) -> str:
    match = re.search(r"\d", gold)
    if match is None:
        return gold + "+1"
    digit = str((int(match.group()) + 1) % 10)
    return gold[: match.start()] + digit + gold[match.end() :]


def latex_groups(root: Path) -> tuple[list[str], list[str]]:
    responses, golds = [], []
    for row in _jsonl(root / "math500/test.jsonl"):
        gold, reasoning = row["answer"], row["solution"].replace("\\boxed", "")
        rewritten = gold.replace("\\frac", "\\dfrac") if "\\frac" in gold else gold.replace(",", ", ")
        plain = gold.replace("\\left", "").replace("\\right", "").replace(" ", "")
        for answer in (gold, gold, gold, gold, rewritten, plain, _mutate(gold), _mutate(gold) + "0"):
            responses.append(_box(reasoning, answer))
            golds.append(gold)
    return responses, golds


def distinct(responses: list[str], golds: list[str]) -> tuple[list[str], list[str]]:
    from lze_bench.grading import extract_answer

    seen, out_r, out_g = set(), [], []
    for response, gold in zip(responses, golds):
        key = (extract_answer(response), gold)
        if key not in seen:
            seen.add(key)
            out_r.append(response)
            out_g.append(gold)
    return out_r, out_g


def adversarial() -> tuple[list[str], list[str]]:
    responses = [_box("Let me compute this carefully.", text) for text in ADVERSARIAL]
    responses.append("x" * 1_000_000 + "\\boxed{")  # 1 MB, unbalanced box
    return responses, ["5"] * len(responses)


def measure(name: str, responses: list[str], golds: list[str], timeout_s: float, workers: int) -> tuple[dict, float]:
    """One workload on a fresh, warmed Grader: (table row, pool start-up seconds)."""
    from lze_bench.grading import Grader

    with Grader(timeout_s=timeout_s, workers=workers) as grader:
        started = time.perf_counter()
        grader.grade(["\\boxed{\\sqrt{2}+1}", "\\boxed{x^3}"], ["1+\\sqrt{2}", "x^2"])  # starts the pool
        startup_s = time.perf_counter() - started
        grader.clear_cache()
        before = dict(grader.stats)
        cpu0, worker_cpu0, wall0 = time.process_time(), grader.worker_cpu_s(), time.perf_counter()
        grades = grader.grade(responses, golds)
        wall = time.perf_counter() - wall0
        cpu = time.process_time() - cpu0 + grader.worker_cpu_s() - worker_cpu0
        stats = {k: grader.stats[k] - before[k] for k in before}
    return {
        "workload": name,
        "answers": len(grades),
        "distinct pairs": stats["fast"] + stats["pool"],
        "math-verify pairs": stats["pool"],
        "accuracy": sum(g.correct for g in grades) / len(grades),
        "timeouts+errors": stats["timeout"] + stats["error"],
        "wall_s": wall,
        "answers/s": len(grades) / wall,
        "cpu_s": cpu,
        "answers/s/core": len(grades) / cpu if cpu > 0 else None,
    }, startup_s


@BENCH_COMMANDS.add("grading")
def bench_grading(options: dict[str, str]) -> BenchResult:
    root = _data_root(options)
    workers = int(options.get("workers", 0))
    timeout_s = float(options.get("timeout", 5.0))
    integer = integer_groups(root)
    latex = latex_groups(root)
    workloads = [
        ("integer, 8 samples (typical)", *integer),
        ("integer, distinct", *distinct(*integer)),
        ("math500, 8 samples", *latex),
        ("math500, distinct", *distinct(*latex)),
        ("adversarial", *adversarial()),
    ]
    rows, startups = [], []
    for name, responses, golds in workloads:
        row, startup_s = measure(name, responses, golds, timeout_s, workers)
        rows.append(row)
        startups.append(startup_s)
    from lze_bench.grading.pool import available_cores

    return BenchResult(
        title=f"grading throughput (timeout {timeout_s:g} s, workers {workers or available_cores()})",
        rows=rows,
        notes=[
            f"data: {root}" + (" (the repository's test slices: a few rows per benchmark; data=PATH for the full files)"
                               if root == CHECKOUT_SLICES else ""),
            f"pool start-up (first answer that needs math-verify): {min(startups):.2f}-{max(startups):.2f} s, not in wall_s",
            "answers/s/core = answers / (CPU s of this process + pool workers); goal >= 2000 on the typical workload",
        ],
    )
