"""tools/gen_man.py: the manual pages list every option and command of the
three programs and render without groff warnings."""
import argparse
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import gen_man  # noqa: E402


def flags(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield name
                yield from flags(sub)
        else:
            yield from action.option_strings


@pytest.mark.parametrize("name,build", [("lavinmq", gen_man.broker_parser), ("lavinmqctl", gen_man.ctl.build_parser),
                                        ("lavinmqperf", gen_man.perf_parser)])
def test_pages_cover_every_option(tmp_path, name, build):
    gen_man.main(str(tmp_path))
    page = (tmp_path / f"{name}.1").read_text()
    assert page.startswith(f".TH {name.upper()} 1")
    for flag in set(flags(build())):
        assert gen_man.roff(flag) in page, flag
    if shutil.which("groff"):
        r = subprocess.run(["groff", "-man", "-ww", "-z", str(tmp_path / f"{name}.1")], capture_output=True,
                           text=True, env={**os.environ, "LC_ALL": "C.UTF-8"})
        assert r.returncode == 0 and r.stderr == "", r.stderr
