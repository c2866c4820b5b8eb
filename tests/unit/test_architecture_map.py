"""ARCHITECTURE.md's map stays true: every path it names exists, and every
module at the top of lavinmq/ (and of lavinmq/http/) is named in it, a
package by its directory."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEXT = open(os.path.join(ROOT, "ARCHITECTURE.md"), encoding="utf-8").read()
PATHS = set(re.findall(r"`((?:lavinmq|tools|benchmarks|tests|packaging|debian|rpm)/[\w./-]*)`", TEXT))


def test_every_named_path_exists():
    assert len(PATHS) > 40
    missing = sorted(p for p in PATHS if not os.path.exists(os.path.join(ROOT, p)))
    assert missing == []


def _unnamed(package):
    out = []
    base = os.path.join(ROOT, package)
    for entry in sorted(os.listdir(base)):
        path = os.path.join(base, entry)
        rel = f"{package}/{entry}"
        if os.path.isdir(path) and not entry.startswith("__"):
            if rel + "/" not in PATHS and not any(p.startswith(rel + "/") for p in PATHS):
                out.append(rel + "/")
        elif entry.endswith(".py") and entry != "__init__.py" and rel not in PATHS:
            out.append(rel)
    return out


def test_every_module_is_on_the_map():
    assert _unnamed("lavinmq") == []
    assert _unnamed("lavinmq/http") == []
