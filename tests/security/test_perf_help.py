"""Issue 13 item 15: every lavinmqperf option shows its default in --help."""
import argparse

from lavinmq.perf.cli import build_parser


def test_every_option_shows_its_default():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        assert "amqp://guest:guest@127.0.0.1:5672/%2F)" in p.format_help(), name
        formatter = p._get_formatter()
        for action in p._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert "%(default)" in formatter._get_help_string(action), (name, action.option_strings)
