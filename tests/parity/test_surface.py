"""Everything a LavinMQ user calls by name is here: each route of LavinMQ's
HTTP controllers, each lavinmqctl command and option, each broker flag, as
listed from LavinMQ's source by tools/lavinmq_surface.py
(tests/fixtures/lavinmq-surface.json). That they behave as LavinMQ's is for
the other tests (tests/parity/, tests/integration/); this one fails on a
name that is missing, so that a newer LavinMQ's list shows what it added."""
import json
import os
import re

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from lavinmq import config, ctl
from tests.conftest import ROOT

with open(os.path.join(ROOT, "tests", "fixtures", "lavinmq-surface.json")) as f:
    SURFACE = json.load(f)


def test_the_list_is_lavinmqs_whole_surface():
    # the numbers issue 30 counted in LavinMQ 2.9: a broken extraction shows here
    assert SURFACE["lavinmq"].startswith("2.9.")
    assert (len(SURFACE["routes"]), len(SURFACE["lavinmqctl_commands"]), len(SURFACE["lavinmq_flags"])) == \
        (116, 41, 55)


class _Server:
    """build_app only files the server away; resolving a route needs none."""


# the broker's app keys are strings: aiohttp warns, which pytest makes an error here
@pytest.mark.filterwarnings("ignore::aiohttp.web_exceptions.NotAppKeyWarning")
async def test_every_route_of_lavinmqs_controllers():
    from lavinmq.http.app import build_app
    app = build_app(_Server())
    missing = []
    for route in SURFACE["routes"]:
        method, pattern = route.split(" ", 1)
        # LavinMQ's :param and *glob segments, filled in with sample values
        path = re.sub(r"[:*]([A-Za-z_]+)", lambda m: "x" + m.group(1), pattern)
        match = await app.router.resolve(make_mocked_request(method, path, app=app))
        if not isinstance(match, web.UrlMappingMatchInfo) or match.http_exception is not None:
            missing.append(route)
            continue
        # routes of several methods dispatch through helpers.methods(): its table says which
        handler = match.handler
        cells = dict(zip(handler.__code__.co_freevars, (c.cell_contents for c in handler.__closure__ or ())))
        if "table" in cells and cells["table"].get(method) is None:
            missing.append(route)
    assert missing == []


def _options(parser):
    return set(parser._option_string_actions)


def test_every_lavinmqctl_command_and_option():
    parser = ctl.build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    assert sorted(set(SURFACE["lavinmqctl_commands"]) - set(commands)) == []
    options = SURFACE["lavinmqctl_options"]
    assert sorted(set(options["global"]) - _options(parser)) == []
    for name, opts in options.items():
        if name != "global":
            # a command's own options, and LavinMQ's global -p after the command too
            assert sorted(set(opts) - _options(commands[name])) == [], name
            assert "-p" in _options(commands[name]), name


def test_every_lavinmq_flag():
    assert sorted(set(SURFACE["lavinmq_flags"]) - _options(config.build_parser())) == []


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["--build-info"]])
def test_informational_flags_exit_cleanly(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        config.parse_args(argv)
    assert exc.value.code == 0 and capsys.readouterr().out.strip()
