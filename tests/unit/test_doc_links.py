"""The documents a newcomer reads first link only inside the repository
(issue 31 item 4): every link in README.md, ARCHITECTURE.md and
benchmarks/README.md is relative and names a file or directory of this
checkout, and no path in them climbs out of it (a `../shared/...` the
clone does not have)."""
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = ["README.md", "ARCHITECTURE.md", "benchmarks/README.md"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")     # [text](target "title")
CLIMB = re.compile(r"(?<![\w.])((?:\.\./)+[\w./-]+)")              # ../x, ../../y/z


def links(doc):
    text = open(os.path.join(ROOT, doc), encoding="utf-8").read()
    return text, LINK.findall(text)


def inside(base, target):
    path = os.path.normpath(os.path.join(ROOT, os.path.dirname(base), target))
    return path, path == ROOT or path.startswith(ROOT + os.sep)


@pytest.mark.parametrize("doc", DOCS)
def test_links_stay_in_the_repository(doc):
    text, found = links(doc)
    bad = []
    for target in found:
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
            bad.append(f"{target}: a link out of the repository")
            continue
        path, ok = inside(doc, target.split("#", 1)[0] or doc)
        if not ok:
            bad.append(f"{target}: outside the repository")
        elif not os.path.exists(path):
            bad.append(f"{target}: no such file in the repository")
    for target in CLIMB.findall(text):
        if not inside(doc, target)[1]:
            bad.append(f"{target}: a path outside the repository")
    assert bad == []


def test_the_check_finds_what_it_looks_for():
    """The patterns catch the links they are for (so an empty list above
    means something)."""
    sample = ("see [design](../shared/DESIGN.md), [map](ARCHITECTURE.md#tools \"the map\"), "
              "[site](https://example.org/) and `../shared/STYLE.md`")
    assert LINK.findall(sample) == ["../shared/DESIGN.md", "ARCHITECTURE.md#tools", "https://example.org/"]
    assert CLIMB.findall(sample) == ["../shared/DESIGN.md", "../shared/STYLE.md"]
    assert inside("README.md", "../shared/DESIGN.md")[1] is False
    assert inside("benchmarks/README.md", "../README.md")[1] is True
    assert len(links("README.md")[1]) >= 1
