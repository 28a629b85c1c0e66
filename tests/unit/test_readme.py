"""The README stays short and true: at most 2,500 words (what does not fit goes to docs/ and is linked), the `make test`
time it states is the one docs/development.md states as measured, and every relative link in it leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DEVELOPMENT = ROOT / "docs" / "development.md"
MAX_WORDS = 2500

TEST_TIME = re.compile(r"<!-- make-test-time -->(.*?)<!-- /make-test-time -->", re.DOTALL)
DURATION = re.compile(r"\b\d+m\d{2}s\b")
MINUTES = re.compile(r"\b\d+\s+minutes\b")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def _words(text: str) -> int:
    """Whitespace-separated tokens, as `wc -w` counts them."""
    return len(text.split())


def _marked_test_time(path: Path) -> str:
    found = TEST_TIME.findall(path.read_text())
    assert len(found) == 1, f"{path.name}: {len(found)} sentences between <!-- make-test-time --> markers, want exactly one"
    return found[0]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but hyphens and underscores dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower())
    return text.replace(" ", "-")


def _outside_fences(text: str) -> list[str]:
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def _anchors(path: Path) -> set[str]:
    """Every anchor a link into `path` may name: its headings' slugs (repeats numbered as GitHub does) and <a id>s."""
    anchors: set[str] = set()
    for line in _outside_fences(path.read_text()):
        heading = HEADING.match(line)
        if heading:
            slug = base = _slug(heading.group(1))
            repeat = 0
            while slug in anchors:
                repeat += 1
                slug = f"{base}-{repeat}"
            anchors.add(slug)
        anchors.update(HTML_ANCHOR.findall(line))
    return anchors


def _relative_links(path: Path) -> list[str]:
    targets = [m.group(1) for line in _outside_fences(path.read_text()) for m in LINK.finditer(line)]
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def test_the_readme_has_at_most_2500_words():
    words = _words(README.read_text())
    assert words <= MAX_WORDS, f"README.md has {words} words (at most {MAX_WORDS}): move detail into docs/ and link it"


def test_the_readme_states_the_measured_test_time():
    stated, measured = _marked_test_time(README), _marked_test_time(DEVELOPMENT)
    assert DURATION.findall(measured), "docs/development.md's make-test-time sentence names no time as NmSSs"
    assert DURATION.findall(stated) == DURATION.findall(measured), (
        f"README.md states {DURATION.findall(stated)} for make test, docs/development.md measured {DURATION.findall(measured)}"
    )


def test_the_readme_states_no_other_test_time():
    outside = TEST_TIME.sub("", README.read_text())
    assert not DURATION.findall(outside) and not MINUTES.findall(outside), (
        "README.md gives a time outside its make-test-time sentence: state it once, between the markers"
    )


@pytest.mark.parametrize("link", sorted(set(_relative_links(README))))
def test_every_relative_link_in_the_readme_leads_somewhere(link):
    file, _, anchor = link.partition("#")
    target = (README.parent / file).resolve() if file else README
    assert target.exists(), f"README.md links {link}: {file} does not exist"
    if anchor:
        assert anchor in _anchors(target), f"README.md links {link}: no heading or <a id> gives #{anchor}"


@pytest.mark.parametrize("page", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_links_from_docs_into_the_readme_find_their_section(page):
    readme_anchors = _anchors(README)
    for link in _relative_links(page):
        file, _, anchor = link.partition("#")
        if anchor and (page.parent / file).resolve() == README:
            assert anchor in readme_anchors, f"docs/{page.name} links {link}: the README has no such section"
