"""Lists what a LavinMQ user calls by name, read from a LavinMQ source tree:
the routes of its HTTP controllers, lavinmqctl's commands and options, and
the broker's flags. tests/parity/test_surface.py checks that this broker
has each of them; rerun this on a newer LavinMQ to see what it added.

    python tools/lavinmq_surface.py /path/to/lavinmq [VERSION] > tests/fixtures/lavinmq-surface.json

VERSION names the source (default: `git describe` in it).
"""
import json
import os
import re
import subprocess
import sys

ROUTE = re.compile(r'^\s*(get|post|put|delete|head|patch) "([^"]*)"', re.M)
CTL_COMMAND = re.compile(r'^\s*when "([a-z_]+)"', re.M)
# @parser.on("-p vhost", "--vhost=vhost", ...) / @parser.on("--durable", ...)
CTL_OPTION = re.compile(r'@parser\.on\("(-[^"]*)"(?:, "(--[^"]*)")?')
COMMAND_BLOCK = re.compile(r'@parser\.on\("([a-z_]+)", ')
BROKER_FLAG = re.compile(r'(?:CliOpt|parser\.on)\("(-[^"]*|)"(?:, "(-[^"]*)")?')


def flag_names(*specs):
    """"-p vhost", "--vhost=vhost" -> ["-p", "--vhost"]."""
    return [re.split(r"[ =]", s, maxsplit=1)[0] for s in specs if s]


def ctl_options(cli):
    """{"global": [...], "create_queue": [...], ...}: each option in the
    block of the command it follows, or among the global ones."""
    out = {"global": []}
    head, _, globals_ = cli.partition("private def global_options")
    current = None
    for line in head.splitlines():
        cmd = COMMAND_BLOCK.search(line)
        if cmd:
            current = cmd.group(1)
            out.setdefault(current, [])
            continue
        if "@parser.separator" in line:
            current = None
        opt = CTL_OPTION.search(line)
        if opt and current:
            out[current] += flag_names(*opt.groups())
    for opt in CTL_OPTION.finditer(globals_.split("\n  end\n", 1)[0]):
        out["global"] += flag_names(*opt.groups())
    return out


def main(root, version=None):
    def show(path):
        with open(os.path.join(root, path)) as f:
            return f.read()
    controllers = os.path.join(root, "src/lavinmq/http/controller")
    routes = sorted({f"{m.upper()} {p}" for name in os.listdir(controllers) if name.endswith(".cr")
                     for m, p in ROUTE.findall(show(os.path.join(controllers, name)))})
    cli = show("src/lavinmqctl/cli.cr")
    commands = sorted(set(CTL_COMMAND.findall(cli)) - {"client_properties"})   # a column, not a command
    flags = set()
    for path in ("src/lavinmq/config/options.cr", "src/lavinmq/config.cr"):
        for short, long in BROKER_FLAG.findall(show(path)):
            flags.update(flag_names(short, long))
    rev = version or subprocess.run(["git", "-C", root, "describe", "--tags", "--always"],
                                    capture_output=True, text=True).stdout.strip()
    json.dump({"lavinmq": rev, "routes": routes, "lavinmqctl_commands": commands,
               "lavinmqctl_options": ctl_options(cli), "lavinmq_flags": sorted(flags)},
              sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(*sys.argv[1:3])
