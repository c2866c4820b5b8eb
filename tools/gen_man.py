"""Manual pages for lavinmq, lavinmqctl and lavinmqperf, written from
their argparse parsers so that they cannot drift from --help.

    python tools/gen_man.py OUTDIR      writes OUTDIR/{lavinmq,lavinmqctl,lavinmqperf}.1
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import lavinmq  # noqa: E402
from lavinmq import ctl  # noqa: E402
from lavinmq.config import build_parser as broker_parser  # noqa: E402
from lavinmq.perf.cli import build_parser as perf_parser  # noqa: E402

EXTRA = {
    "lavinmq": [
        ("CONFIGURATION", "Settings are read from the defaults, then the ini file (\\fB-c\\fR, by default "
         "/etc/lavinmq/lavinmq.ini), then the environment, then the command line; each later source wins. "
         "The packaged /etc/lavinmq/lavinmq.ini documents every setting. A bad value stops the start with a "
         "message naming the key. SIGHUP re-reads the settings that can change while running "
         "(\\fBsystemctl reload lavinmq\\fR)."),
        ("FILES", "/etc/lavinmq/lavinmq.ini \\- configuration.\n.br\n/var/lib/lavinmq \\- messages, "
         "definitions and users; lavinmqctl.sock, the control socket.\n.br\n"
         "/lib/systemd/system/lavinmq.service \\- the systemd unit."),
    ],
    "lavinmqctl": [
        ("CONNECTING", "lavinmqctl talks to the broker's HTTP API: over \\fB--socket\\fR, else "
         "$LAVINMQCTL_SOCKET, else the first of /var/lib/lavinmq/lavinmqctl.sock and /tmp/lavinmqctl.sock "
         "that exists, else \\fB--uri\\fR (default http://127.0.0.1:15672)."),
        ("EXIT STATUS", "0 on success, 1 when the broker refuses the request, 2 on a usage error, "
         "69 when the broker cannot be reached, 77 when the user is not authorised."),
    ],
    "lavinmqperf": [],
}


def roff(text):
    """Escape text for roff: backslashes, and leading dots or quotes."""
    text = (text or "").replace("\\", "\\e").replace("-", "\\-")
    return "\n".join("\\&" + line if line[:1] in (".", "'") else line for line in text.splitlines())


def usage(parser):
    """argparse's usage line, unwrapped: roff fills it."""
    return roff(" ".join(parser.format_usage().replace("usage: ", "", 1).split()))


def options(parser, sub=False):
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
            continue
        if sub and isinstance(action, argparse._HelpAction):    # said once, for the command
            continue
        if action.option_strings:
            if action.nargs == 0:
                flags = ", ".join(f"\\fB{roff(s)}\\fR" for s in action.option_strings)
            else:
                metavar = action.metavar or action.dest.upper()
                flags = ", ".join(f"\\fB{roff(s)}\\fR \\fI{roff(str(metavar))}\\fR" for s in action.option_strings)
        else:
            flags = f"\\fI{roff(str(action.metavar or action.dest))}\\fR"
        out.append(f".TP\n{flags}\n{roff(action.help % vars(action) if action.help and '%(' in action.help else action.help)}")
    return out


def commands(parser, prefix):
    """Each command, and each command of a command (lavinmqperf mqtt throughput)."""
    out = []
    for subs in [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)][:1]:
        helps = {c.dest: c.help for c in subs._choices_actions}
        for cmd, sub in subs.choices.items():
            out += [f".SS {roff(prefix + cmd)}", roff(helps.get(cmd) or ""), ".PP", usage(sub)]
            out += options(sub, sub=True)
            out += commands(sub, prefix + cmd + " ")
    return out


def page(name, parser):
    lines = [f'.TH {name.upper()} 1 "" "lavinmq {lavinmq.__version__}" "User Commands"',
             ".SH NAME", f"{name} \\- {roff(parser.description or '')}",
             ".SH SYNOPSIS", usage(parser),
             ".SH OPTIONS", *options(parser)]
    if any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
        lines.append(".SH COMMANDS")
        lines += commands(parser, "")
    for title, text in EXTRA[name]:
        lines += [f".SH {title}", text]
    others = [n for n in EXTRA if n != name]
    lines += [".SH SEE ALSO", ", ".join(f"\\fB{n}\\fR(1)" for n in others)]
    return "\n".join(lines) + "\n"


def main(outdir):
    os.makedirs(outdir, exist_ok=True)
    # usage lines wrap at the terminal's width: fix it for reproducible pages
    os.environ["COLUMNS"] = "80"
    for name, parser in (("lavinmq", broker_parser()), ("lavinmqctl", ctl.build_parser()),
                         ("lavinmqperf", perf_parser())):
        with open(os.path.join(outdir, f"{name}.1"), "w") as f:
            f.write(page(name, parser))


if __name__ == "__main__":
    main(sys.argv[1])
