"""The documentation holds together: every relative markdown link of README.md, CONTRIBUTING.md,
CHANGELOG.md and docs/*.md names a file that exists, every ``#anchor`` is a heading of its
target file (GitHub's slugs), and README.md stays short (the manual is docs/)."""

import re
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = sorted(
    [
        REPO / "README.md",
        REPO / "CONTRIBUTING.md",
        REPO / "CHANGELOG.md",
        *(REPO / "docs").glob("*.md"),
    ]
)
README_MAX_LINES = 250

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)


def prose(text: str) -> str:
    """The text without fenced code blocks and code spans (links there are not links)."""
    text = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return _CODE_SPAN.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the text as rendered (markup and link targets dropped),
    lower case, punctuation but ``-`` and ``_`` removed, spaces as ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # [text](target) -> text
    text = re.sub(r"[`*]", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every anchor of a markdown file: its headings' slugs, repeats numbered as GitHub does."""
    seen: dict[str, int] = {}
    out = set()
    for m in _HEADING.finditer(_FENCE.sub("", path.read_text())):
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return frozenset(out)


def links(path: Path) -> list[str]:
    return [m.group(1) for m in _LINK.finditer(prose(path.read_text()))]


def test_the_documents_exist():
    for p in DOCS:
        assert p.is_file(), p
    assert (REPO / "docs" / "README.md") in DOCS  # the manual's index


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_resolves(doc):
    bad = []
    checked = 0
    for target in links(doc):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not checked offline
            continue
        checked += 1
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists():
            bad.append(f"{target}: no such file {dest}")
        elif anchor:
            if dest.suffix != ".md" or dest.is_dir():
                bad.append(f"{target}: an anchor into a file that is not markdown")
            elif anchor not in anchors(dest):
                bad.append(
                    f"{target}: no heading #{anchor} in {dest.relative_to(REPO)} "
                    f"(has {sorted(anchors(dest))})"
                )
        try:
            dest.relative_to(REPO)
        except ValueError:
            bad.append(f"{target}: outside the repository")
    assert not bad, "\n".join(bad)
    if doc.name != "CHANGELOG.md":
        assert checked, f"{doc.name} links to nothing"


def test_slugs_are_githubs():
    assert slug("Crashes and full disks") == "crashes-and-full-disks"
    assert slug("The `rmqfs mount` command") == "the-rmqfs-mount-command"
    assert slug("Follower mount") == "follower-mount"
    assert slug("1.2 TOTALSIZE, V1/V2") == "12-totalsize-v1v2"
    assert slug("[Unreleased]") == "unreleased"
    assert slug("[0.1.0] - 2026-01-02") == "010---2026-01-02"


def test_the_checker_sees_links_and_not_code():
    text = "a [x](y.md) `[not](a.md)` ![img](p.png)\n```\n[no](b.md)\n```\n[z](#h)\n"
    assert [m.group(1) for m in _LINK.finditer(prose(text))] == ["y.md", "p.png", "#h"]


def test_readme_stays_short():
    n = len((REPO / "README.md").read_text().splitlines())
    assert n < README_MAX_LINES, f"README.md has {n} lines: move the manual's text to docs/"
    text = (REPO / "README.md").read_text()
    for must in ("make demo", "make test", "## By hand", "docs/README.md"):
        assert must in text, must
