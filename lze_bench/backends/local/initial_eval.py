"""The held-out eval of an initial policy, computed once per policy and machine and shared by the runs starting there.

Every selector of a seed pair starts from the same warm start, so a sweep of 13 selectors would run the same
greedy eval of the same weights on the same problems 13 times (in the quickstart, 36 of its 39 initial evals).
That eval is a deterministic function of what `key` hashes: the policy's parameters (their bytes) and
vocabulary, the held-out problems and answers, the generation settings (`max_new_tokens`, the chunk size, which
fixes the batches), the grading mode, the transformers version and the machine's numerics
(`warmstart.build_numerics`: torch, device, thread count, kernel ISA, CPU vendor). The first run stores its
result under `<cache>/initial-evals/KEY.json`; a later run with the same key books that result as its initial
eval, marked `"reused": KEY` in heldout.jsonl (with the seconds it took where it was computed), and computes
nothing. The file carries numbers only. A file that cannot be read is computed again and replaced, with a
warning: it is a cache, not a result.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from lze_bench.rundir import atomic_write_json

log = logging.getLogger(__name__)

FOLDER = "initial-evals"
FIELDS = ("accuracy", "by_level", "flops", "time_s", "num_problems")


def key(model, tokenizer, rows: list[dict], *, max_new_tokens: int, chunk_size: int, grading_mode: str,
        numerics: dict) -> str:
    """sha256 (first 16 hex digits) of everything the initial eval's numbers depend on (the module docstring)."""
    import torch
    import transformers

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(str(tensor.dtype).encode())
        # raw bytes (a uint8 view): bfloat16 has no NumPy dtype
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    settings = {"vocab": sorted(tokenizer.get_vocab().items()), "pad": tokenizer.pad_token_id,
                "eos": tokenizer.eos_token_id,
                "rows": [[r["problem"], str(r["answer"]), int(r["level"])] for r in rows],
                "max_new_tokens": int(max_new_tokens), "chunk_size": int(chunk_size), "grading": grading_mode,
                "transformers": transformers.__version__, "numerics": numerics}
    digest.update(json.dumps(settings, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:16]


def load(cache_root: Path, eval_key: str) -> dict | None:
    """The stored result for `eval_key`, or None (none stored, or a file that is not one: then it is recomputed)."""
    path = Path(cache_root) / FOLDER / f"{eval_key}.json"
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if set(record) != set(FIELDS):
            raise ValueError(f"fields {sorted(record)}")
        return record
    except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        log.warning("%s: not a stored initial eval (%s); computing it again", path, exc)
        return None


def store(cache_root: Path, eval_key: str, record: dict) -> None:
    """Write `record` (FIELDS) for `eval_key`, atomically: runs starting at once may both compute and write it."""
    folder = Path(cache_root) / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_json(folder / f"{eval_key}.json", {name: record[name] for name in FIELDS})
