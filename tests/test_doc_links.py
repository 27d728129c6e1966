"""Every link and file path the docs give resolves inside the repo (and so does every docs/*.md the code names)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([*ROOT.glob("*.md"), *(ROOT / "docs").glob("*.md"), *(ROOT / "bench").glob("*.md"),
               *(ROOT / "hinfer").rglob("*.md"), ROOT / "tests" / "fixtures" / "README.md"])  # fmt: skip
LINK = re.compile(r"\]\(([^)\s]+)\)")  # [text](target)
# a repo path in backticks or bare: hinfer/..., docs/..., tests/..., bench/..., scripts/... with a file suffix
PATH = re.compile(r"(?<![\w/.-])((?:hinfer|docs|tests|bench|scripts)/[\w./-]*\w\.(?:py|md|sh|json|jinja|toml))\b")


def _missing_links(doc: Path) -> list[str]:
    out = []
    for target in LINK.findall(doc.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL or an anchor on the same page
        path = target.split("#", 1)[0]
        if path and not (doc.parent / path).exists():
            out.append(f"{doc.relative_to(ROOT)}: link {target}")
    return out


# a path in backticks with a folder in it, from the repo root or from hinfer/ (`engine/scheduler.py`)
SHORT = re.compile(r"`([\w./-]+/[\w.-]+\.(?:py|md|sh|json))`")


def _missing_paths(doc: Path) -> list[str]:
    text = doc.read_text(encoding="utf-8")
    full = [p for p in PATH.findall(text) if not (ROOT / p).exists()]
    short = []
    if doc.parent in (ROOT, ROOT / "docs", ROOT / "bench"):  # the data READMEs also name files of other repos
        short = [p for p in SHORT.findall(text) if not any((b / p).exists() for b in (ROOT, ROOT / "hinfer"))]
    return [f"{doc.relative_to(ROOT)}: {p}" for p in dict.fromkeys(full + short)]


def test_doc_links_resolve():
    assert [m for d in DOCS for m in _missing_links(d)] == []


def test_doc_paths_exist():
    assert [m for d in DOCS for m in _missing_paths(d)] == []


def test_docs_named_in_the_code_exist():
    named = re.compile(r"\bdocs/[\w.-]+\.md")
    missing = []
    for src in sorted((ROOT / "hinfer").rglob("*.py")):
        for p in named.findall(src.read_text(encoding="utf-8")):
            if not (ROOT / p).exists():
                missing.append(f"{src.relative_to(ROOT)}: {p}")
    assert missing == []
