"""Warm starts shipped with the package: one initial policy on every machine.

A warm start's weights depend on the machine that builds it (thread count, processor; warmstart.py), so
the recipes the committed reports use ship their weights: `warmstarts/<recipe key>/` beside this file
holds the HF checkpoint directory a build wrote (and ASTRAL's labelling snapshots where the recipe keeps
them), its `warmstart.json` (recipe, the machine it was built on, held-out accuracy) and `SHA256SUMS`,
one line per file. A run whose recipe key is shipped starts from these files, checked against their
checksums first; `lze-bench warmstart check` rebuilds a shipped recipe on this machine and says whether
the rebuilt weights equal the shipped ones; `lze-bench warmstart ship DIR` adds a built warm start.
Env LZE_BENCH_WARMSTARTS=DIR reads (and ships into) another folder of the same layout instead.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from lze_bench import env
from lze_bench.errors import LzeBenchError

PACKAGE_STORE = Path(__file__).resolve().parent / "warmstarts"
SUMS_FILE = "SHA256SUMS"
INFO_FILE = "warmstart.json"
_VERIFIED: set[Path] = set()  # checked once per process


def store() -> Path:
    return Path(env.warmstart_store() or PACKAGE_STORE)


def shipped_keys() -> list[str]:
    root = store()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / INFO_FILE).is_file())


def find_shipped(key: str) -> Path | None:
    """The shipped directory of recipe key `key`, its files checked against SHA256SUMS; None if not shipped."""
    directory = store() / key
    if not (directory / INFO_FILE).is_file():
        return None
    if directory not in _VERIFIED:
        bad = mismatched_files(directory)
        if bad:
            raise LzeBenchError(f"shipped warm start {directory}: {bad[0]} does not match {SUMS_FILE}; reinstall "
                                "lze-bench (pip install --force-reinstall), or build it here with backend.warmstart=build")
        _VERIFIED.add(directory)
    return directory


def file_digests(directory: Path) -> dict[str, str]:
    """sha256 of every file under `directory` but SHA256SUMS itself, by path relative to it."""
    out = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file() and p.name != SUMS_FILE):
        out[path.relative_to(directory).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def weight_digests(directory: Path) -> dict[str, str]:
    """The digests of the weight files alone (what `check` compares: metadata such as build times differ)."""
    return {name: digest for name, digest in file_digests(directory).items() if name.endswith(".safetensors")}


def read_sums(directory: Path) -> dict[str, str]:
    sums = {}
    for line in (directory / SUMS_FILE).read_text().splitlines():
        digest, _, name = line.partition("  ")
        if name:
            sums[name] = digest
    return sums


def mismatched_files(directory: Path) -> list[str]:
    try:
        expected = read_sums(directory)
    except OSError:
        return [SUMS_FILE]
    actual = file_digests(directory)
    return sorted(name for name in set(expected) | set(actual) if expected.get(name) != actual.get(name))


def read_info(directory: Path) -> dict:
    return json.loads((Path(directory) / INFO_FILE).read_text())


def describe(key: str) -> str:
    """One line about shipped warm start `key` (`lze-bench warmstart list`)."""
    info = read_info(store() / key)
    recipe, built = info.get("recipe", {}), info.get("built_on", {})
    snaps = f", snapshots {recipe['snapshots']}" if recipe.get("snapshots") else ""
    return (f"{key}  init_seed {recipe.get('init_seed')}, {recipe.get('steps')} steps{snaps}, held-out "
            f"{float(info.get('heldout_accuracy', float('nan'))):.3f}; built on {built.get('cpu_model')} "
            f"({built.get('cpu_capability')}, {built.get('threads')} thread(s), torch {built.get('torch')})")


def ship(built: Path, root: Path | None = None) -> Path:
    """Copy a built warm-start directory into the store under its recipe key, with SHA256SUMS.

    Refuses to replace a shipped recipe whose weights differ: the committed reports started from those.
    """
    built, root = Path(built), Path(root or store())
    try:
        info = read_info(built)
        key = info["recipe_key"]
    except (OSError, ValueError, KeyError) as exc:
        raise LzeBenchError(f"{built}: not a warm start built by this version of lze-bench ({exc}); pass a "
                            "<cache>/warmstart/<key> directory written by `lze-bench train`") from exc
    target = root / key
    if (target / INFO_FILE).exists():
        if weight_digests(target) == weight_digests(built):
            return target
        raise LzeBenchError(f"{target}: recipe {key} is already shipped with other weights; the committed reports "
                            "start from them. Delete that folder first if they are meant to be replaced")
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{key}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(built, tmp)
    sums = file_digests(tmp)
    (tmp / SUMS_FILE).write_text("".join(f"{digest}  {name}\n" for name, digest in sums.items()))
    tmp.rename(target)
    return target
