"""The repository explains itself: every citation points at pipeline/REFERENCE.md (a section that
exists) or at a paper number it lists, and nothing points outside the repository."""
from __future__ import annotations

import re
from pathlib import Path

from models.encodings import ENCODINGS
from pipeline import report

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = (ROOT / "pipeline" / "REFERENCE.md").read_text(encoding="utf-8")
SKIP = {".git", ".venv", "data", "work", "__pycache__", ".dvc", ".seqpe", ".pytest_cache", ".hypothesis"}


def text_files() -> list[Path]:
    out = []
    for path in ROOT.rglob("*"):
        if SKIP & set(path.relative_to(ROOT).parts) or path.name.endswith(".egg-info"):
            continue
        if path.is_file() and path.suffix in {".py", ".md", ".yaml", ".toml", ".sh"}:
            out.append(path)
    return out


def test_nothing_points_outside_the_repository():
    outside = re.compile(r"PROTOCOLS\.md|/work/shared|\.\./shared|shared/papers|shared/datasets")
    assert len(text_files()) > 50
    hits = [f"{p.relative_to(ROOT)}:{n}" for p in text_files() if p.name != "test_reference.py"
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if outside.search(line)]
    assert hits == []


def test_every_cited_section_exists():
    sections = set(re.findall(r"^## §(\d+) ", REFERENCE, flags=re.M))
    assert sections == {str(n) for n in range(1, 10)}
    cited = {(p.relative_to(ROOT).as_posix(), m) for p in text_files()
             for m in re.findall(r"REFERENCE\.md\)? ?§(\d+)", p.read_text(encoding="utf-8"))}
    assert len(cited) > 20 and {m for _, m in cited} <= sections, sorted(c for c in cited if c[1] not in sections)


def test_every_paper_number_is_listed_with_its_title():
    listed = dict(re.findall(r"^\| (00\d) \| (.+?\*.+?\*)", REFERENCE, flags=re.M))
    assert set(listed) == {"000", "001", "003", "004"}
    assert "Exploiting Positional Information for Session-based Recommendation" in listed["000"]
    assert "Contextual-Aware Position Encoding" in listed["001"]
    cited = {m for spec in ENCODINGS.values() for m in re.findall(r"\b(00\d)\b", spec.paper)}
    assert cited and cited <= set(listed)


def test_report_footer_and_readme_point_into_the_repository():
    assert "pipeline/REFERENCE.md §5" in report.TIE_NOTE
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "pipeline/REFERENCE.md" in readme and "§8" in readme
    assert "dvc metrics show" in readme and "fraction" in readme
