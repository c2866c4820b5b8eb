"""lavinmqperf command line (LavinMQ's flags)."""
import argparse
import asyncio
import sys

import lavinmq

# every option's help ends with its default (issue 13: "--uri shows its default")
DEFAULTS = argparse.ArgumentDefaultsHelpFormatter


def add_throughput(sub):
    p = sub.add_parser("throughput", help="publish/consume throughput", formatter_class=DEFAULTS)
    p.add_argument("--uri", default="amqp://guest:guest@127.0.0.1:5672/%2F", help="broker to load")
    p.add_argument("-x", "--publishers", type=int, default=1, help="publishing connections")
    p.add_argument("-y", "--consumers", type=int, default=1, help="consuming connections")
    p.add_argument("-s", "--size", type=int, default=16, help="message body size in bytes")
    p.add_argument("-V", "--verify", action="store_true", help="check every body against what was published")
    p.add_argument("-a", "--ack", type=int, default=0, help="ack every N messages (0: no-ack)")
    p.add_argument("-c", "--confirm", type=int, default=0, help="max unconfirmed publishes")
    p.add_argument("-t", "--transaction", type=int, default=0, help="publishes per transaction")
    p.add_argument("-T", "--transaction-acks", type=int, default=0,
                   help="ack in transactions, committing every N acks (needs -a)")
    p.add_argument("-u", "--queue", default="perf-test", help="queue to publish to and consume from")
    p.add_argument("-k", "--routing-key", default=None,
                   help="routing key (default: the queue name); with --routing-keys, {i} in it is the key number")
    p.add_argument("-e", "--exchange", default="", help="exchange to publish to ('' = the default exchange)")
    p.add_argument("--routing-keys", metavar="N|PATTERN:N", default=None,
                   help="publish round robin over N routing keys: PATTERN with {i} (e.g. dev.{i}.temp:10000), "
                        "else -k with {i}, else -k.{i}")
    p.add_argument("--queues", type=int, default=1,
                   help="spread consumers over N queues (QUEUE-1 .. QUEUE-N); publishers cycle their routing "
                        "key over the queue names unless --routing-keys is given")
    p.add_argument("--queue-pattern", default=None, help="queue names, %% replaced by a number (LavinMQ)")
    p.add_argument("--queue-pattern-from", type=int, default=1)
    p.add_argument("--queue-pattern-to", type=int, default=1)
    p.add_argument("--exchange-type", default=None,
                   help="declare the -e exchange with this type (direct, topic, headers, x-consistent-hash...)")
    p.add_argument("--exchange-args", default=None, help="JSON object: arguments of that exchange")
    p.add_argument("--bindings", default=None,
                   help='JSON list of {"key": ..., "args": {...}, "count": N} bound from each queue to -e; '
                        '{i} counts 0..N-1, {queue} is the queue name (default: the routing key, or the queue '
                        'name with --queues)')
    p.add_argument("--properties", default=None,
                   help="JSON object: message properties (headers...); {i} in string values follows the "
                        "routing key number")
    p.add_argument("-r", "--rate", type=int, default=0, help="max publish rate per publisher")
    p.add_argument("-R", "--consumer-rate", type=int, default=0, help="max consume rate per consumer")
    p.add_argument("-p", "--persistent", action="store_true", help="delivery_mode 2")
    p.add_argument("-P", "--prefetch", type=int, default=0, help="consumer prefetch (0: unlimited)")
    p.add_argument("-g", "--poll", action="store_true", help="basic.get instead of consume")
    p.add_argument("-j", "--json", action="store_true", help="print the summary as JSON")
    p.add_argument("-z", "--time", type=float, default=0, help="seconds to run")
    p.add_argument("-q", "--quiet", action="store_true", help="only the summary")
    p.add_argument("-C", "--pmessages", type=int, default=0, help="messages per publisher")
    p.add_argument("-D", "--cmessages", type=int, default=0, help="messages per consumer")
    p.add_argument("--queue-args", default=None, help="JSON object")
    p.add_argument("--consumer-args", default=None, help="JSON object")
    p.add_argument("-l", "--measure-latency", action="store_true", help="report publish-to-deliver latency")
    p.add_argument("--processes", type=int, default=1,
                   help="share the publishers and consumers over N load-generator processes")
    return p


def add_churn(sub):
    from lavinmq.perf.churn import SCENARIOS
    for name in SCENARIOS:
        p = sub.add_parser(name, help=name.replace("-", " "), formatter_class=DEFAULTS)
        p.add_argument("--uri", default="amqp://guest:guest@127.0.0.1:5672/%2F", help="broker to load")
        p.add_argument("-z", "--time", type=float, default=10, help="seconds to run (churn)")
        p.add_argument("-q", "--quiet", action="store_true", help="only the summary")
        p.add_argument("--pid", type=int, default=0, help="broker pid for RSS (default: found by port)")
        if name.endswith("-count"):
            p.add_argument("-c", "--count", type=int, default=1000, help="how many to open")
            p.add_argument("--report-every", type=int, default=1000, help="print progress every N")
            p.add_argument("--hold", type=float, default=0, help="seconds to keep them before closing")
        if name.startswith("queue"):
            p.add_argument("--durable", action="store_true", help="durable queues")
        if name == "queue-count":
            p.add_argument("--delete", action="store_true", help="delete the queues afterwards")


def build_parser():
    parser = argparse.ArgumentParser(prog="lavinmqperf", description="Load generator and benchmarks for "
                                     "AMQP 0-9-1 brokers (lavinmqperf [amqp] COMMAND), and for MQTT "
                                     "(lavinmqperf mqtt throughput -h).")
    parser.add_argument("-v", "--version", action="version", version=f"lavinmqperf {lavinmq.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_throughput(sub)
    add_churn(sub)
    from lavinmq.perf.mqtt import add_scenarios
    add_scenarios(sub.add_parser("mqtt", help="MQTT scenarios: lavinmqperf mqtt throughput -h"))
    return parser


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    # LavinMQ's form: lavinmqperf [amqp|mqtt] SCENARIO ...; amqp is the default
    if argv[:1] == ["mqtt"]:
        from lavinmq.perf import mqtt
        return mqtt.main(argv[1:])
    if argv[:1] == ["amqp"]:
        argv = argv[1:]
    parser = build_parser()
    opts = parser.parse_args(argv)
    if opts.command == "throughput" and opts.verify and opts.measure_latency:
        parser.error("-V/--verify and -l/--measure-latency cannot be combined (latency stamps the body)")
    if opts.command == "throughput" and opts.transaction_acks and not opts.ack:
        parser.error("-T/--transaction-acks needs -a/--ack")
    if opts.command == "throughput":
        from lavinmq.perf import topology
        try:
            topology.queue_names(opts)
            variants = len(topology.routing_keys(opts))
            for q in topology.queue_names(opts)[:1]:
                topology.bindings(opts, q)
        except (topology.TopologyError, ValueError) as exc:
            parser.error(str(exc))
        if opts.measure_latency and (variants > 1 or (opts.properties and "{i}" in opts.properties)):
            parser.error("-l/--measure-latency works with one routing key and fixed properties")
    import uvloop
    if opts.command == "throughput" and opts.processes > 1:
        from lavinmq.perf.throughput import run_processes
        task = lambda: run_processes(opts)          # noqa: E731 - forks before any loop exists
    elif opts.command == "throughput":
        from lavinmq.perf.throughput import run
        task = lambda: uvloop.run(run(opts))        # noqa: E731
    else:
        from lavinmq.perf.churn import SCENARIOS
        task = lambda: uvloop.run(SCENARIOS[opts.command](opts))   # noqa: E731
    try:
        task()
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        print(f"lavinmqperf: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
