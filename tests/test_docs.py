"""Every reference to the design documents resolves inside the repository.

Docstrings, recipes, tests and reports cite `design.md "Equal compute"`,
`selectors.md §3`, `openrlhf.md §9 "Entry point"`: each must name a file in
`docs/`, a cited § must be a numbered section of it, and a quoted name must be
a heading of design.md or appear in the cited section. No file points outside
the repository (a clone has nothing beside it); only the CI script may look for
the full benchmark files beside our own checkout, for its optional full_data step.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
SCANNED = ("lze_bench", "tests", "sweeps", "evals", "docs", ".ci", "reports/quickstart")
TOP_FILES = ("README.md", "pyproject.toml", "setup.py", "MANIFEST.in")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".toml", ".in", ""}  # "": .ci/run
REFERENCE = re.compile(r'\b([a-z_]+)\.md(?: ?§ ?(\d+))?(?: "([^"]+)")?')
DOC_NAMES = ("design", "selectors", "openrlhf")
OUTSIDE = ("shared/" + "specs", "../" + "shared", "/" + "work/")  # split so this file does not match itself


def scanned_files() -> list[Path]:
    files = [REPO / name for name in TOP_FILES if (REPO / name).is_file()]
    for folder in SCANNED:
        files += [p for p in sorted((REPO / folder).rglob("*")) if p.is_file() and p.suffix in SUFFIXES
                  and "__pycache__" not in p.parts]
    return files


def flat(text: str) -> str:
    """One line: escaped quotes unescaped, comment markers at line starts and runs of whitespace removed."""
    text = text.replace('\\"', '"')
    text = re.sub(r"(?m)^\s*#+\s?", " ", text)
    return re.sub(r"\s+", " ", text)


def sections(doc: str) -> dict[str, str]:
    """Section number -> its text (from its `## N.` heading to the next one)."""
    parts = re.split(r"(?m)^## (\d+)\.", doc)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def references() -> list[tuple[str, str, str | None, str | None]]:
    found = []
    for path in scanned_files():
        for name, number, quoted in REFERENCE.findall(flat(path.read_text(encoding="utf-8", errors="replace"))):
            if name in DOC_NAMES or name == "style":
                found.append((str(path.relative_to(REPO)), name, number or None, quoted or None))
    return found


REFERENCES = references()


def test_the_references_are_found():
    """The scan sees the citations it must check (so an empty scan cannot pass)."""
    cited = {name for _, name, _, _ in REFERENCES}
    assert cited >= set(DOC_NAMES) and len(REFERENCES) > 100


@pytest.mark.parametrize("name", sorted({name for _, name, _, _ in REFERENCES}))
def test_every_cited_document_is_in_docs(name):
    assert (DOCS / f"{name}.md").is_file(), [where for where, n, _, _ in REFERENCES if n == name][:5]


def test_every_cited_section_and_name_exists():
    wrong = []
    for where, name, number, quoted in REFERENCES:
        path = DOCS / f"{name}.md"
        if not path.is_file():
            continue  # reported by the test above
        doc = path.read_text(encoding="utf-8")
        numbered = sections(doc)
        if number is not None and number not in numbered:
            wrong.append(f"{where}: {name}.md §{number} (sections: {', '.join(numbered)})")
            continue
        if quoted is not None:
            if number is not None:
                haystack = flat(numbered[number])
            elif name == "design":
                haystack = " ".join(re.findall(r"(?m)^#+ (.*)$", doc))  # design.md names are its headings
            else:
                haystack = flat(doc)
            if quoted.lower() not in haystack.lower():
                wrong.append(f'{where}: {name}.md{" §" + number if number else ""} "{quoted}"')
    assert not wrong, "\n".join(wrong)


def test_nothing_points_outside_the_repository():
    me = Path(__file__).resolve()
    files = [path for path in scanned_files() if path.resolve() != me and path.parts[len(REPO.parts)] != ".ci"]
    hits = [f"{path.relative_to(REPO)}: {marker}" for path in files
            for marker in OUTSIDE if marker in path.read_text(encoding="utf-8", errors="replace")]
    assert not hits, "\n".join(hits)


def test_every_relative_link_of_the_readme_and_the_docs_pages_resolves():
    """The README links to the reference pages under docs/; a page moved or renamed must not leave a dead link."""
    pages = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
    dead = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            path = target.split("#")[0]
            if path and not path.startswith(("http://", "https://", "mailto:")) and not (page.parent / path).exists():
                dead.append(f"{page.relative_to(REPO)}: {target}")
    assert not dead, "links to nothing:\n" + "\n".join(dead)
