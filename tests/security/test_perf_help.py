"""Issue 13 item 15: every lavinmqperf option shows its default in --help.

`lavinmqperf mqtt` is a group of its own (MQTT scenarios, an mqtt:// URI);
its scenarios are checked the same way."""
import argparse

from lavinmq.perf.cli import build_parser


def _subcommands(parser):
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices.items()


def _assert_defaults_shown(name, p, uri):
    assert f"{uri})" in p.format_help(), name
    formatter = p._get_formatter()
    for action in p._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert "%(default)" in formatter._get_help_string(action), (name, action.option_strings)


def test_every_option_shows_its_default():
    seen = []
    for name, p in _subcommands(build_parser()):
        if name == "mqtt":
            for scenario, sp in _subcommands(p):
                _assert_defaults_shown(f"mqtt {scenario}", sp, "mqtt://guest:guest@127.0.0.1:1883")
                seen.append(f"mqtt {scenario}")
            continue
        _assert_defaults_shown(name, p, "amqp://guest:guest@127.0.0.1:5672/%2F")
        seen.append(name)
    assert "mqtt throughput" in seen and "throughput" in seen, seen
