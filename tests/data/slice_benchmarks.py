"""Cut the benchmark slices under tests/data from the full benchmark files.

    python3 tests/data/slice_benchmarks.py FULL_DIR [--check]

FULL_DIR holds the full files in the layout `<name>/test.jsonl` (the sources and
checksums are in each `tests/data/<name>/SOURCE.md`). `tests/data/slices.json`
names, per file, the 1-based lines (parquet: rows) kept, in order, and the full
file's row count and sha256. A `.jsonl` slice is those lines byte for byte; a
`.parquet` slice is the same rows with the same schema, written by pyarrow (so
its bytes differ from the original's). `--check` writes nothing and exits 1 if
a slice differs from what it would write. Needs no network; the tests use the
slices only (tests/conftest.py), the full files are optional (`-m full_data`).
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SLICES = HERE / "slices.json"


def load_spec() -> dict[str, dict]:
    return json.loads(SLICES.read_text(encoding="utf-8"))


def cut(full_dir: Path, name: str, entry: dict) -> bytes:
    """The slice's bytes from the full file; fails if the full file is not the recorded one."""
    data = (full_dir / name).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry["full_sha256"]:
        raise SystemExit(f"{full_dir / name}: sha256 {digest}, expected {entry['full_sha256']} (see its SOURCE.md)")
    if name.endswith(".jsonl"):
        lines = data.decode("utf-8").splitlines(keepends=True)
        return "".join(lines[i - 1] for i in entry["lines"]).encode("utf-8")
    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(data)).take([i - 1 for i in entry["lines"]])
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__)
        return 2
    full_dir, check = Path(argv[0]), "--check" in argv[1:]
    stale = []
    for name, entry in load_spec().items():
        body, target = cut(full_dir, name, entry), HERE / name
        if name.endswith(".parquet") and target.exists():
            import pyarrow.parquet as pq

            same = pq.read_table(target).equals(pq.read_table(io.BytesIO(body)))
        else:
            same = target.exists() and target.read_bytes() == body
        if not same:
            stale.append(name)
            if not check:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(body)
    print(("differ: " if check else "written: ") + (", ".join(stale) or "none"))
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
