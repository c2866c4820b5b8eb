"""lavinmqctl as LavinMQ's (src/lavinmqctl/cli.cr): its commands, global
options (-p/--vhost before or after the command, --hostname/--port/
--scheme, -n), the flags of create_queue and create_exchange, and its
output (the "Listing ..." line, a header, key: value lines), run as a user
runs it against a real broker."""
import json
import urllib.parse

import pika

from tests.conftest import unique
from tests.parity.helpers import api, ctl


def enc(s):
    return urllib.parse.quote(s, safe="")


def test_create_queue_and_exchange_flags_with_the_global_vhost(broker):
    v = unique("v")
    ctl(broker, "add_vhost", v)
    try:
        q, s, x = unique("q"), unique("s"), unique("x")
        # -p before the command and after it, as LavinMQ's parser takes it
        ctl(broker, "-p", v, "create_queue", q, "--durable", "--max-length", "5", "--message-ttl", "1000",
            "--expires", "60000", "--delivery-limit", "3", "--reject-on-overflow",
            "--dead-letter-exchange", "dlx", "--dead-letter-routing-key", "dead")
        ctl(broker, "create_queue", s, "--durable", "--stream-queue", "-p", v)
        ctl(broker, "create_exchange", "direct", x, "--durable", "--delayed", "--alternate-exchange", "ae",
            "--persist-messages", "10", "--persist-ms", "100", "--vhost", v)
        got = api(broker, "GET", f"/api/queues/{enc(v)}/{q}")[1]
        assert got["durable"] is True and got["arguments"] == {
            "x-max-length": 5, "x-message-ttl": 1000, "x-expires": 60000, "x-delivery-limit": 3,
            "x-overflow": "reject-publish", "x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dead"}
        assert api(broker, "GET", f"/api/queues/{enc(v)}/{s}")[1]["type"] == "stream"
        ex = api(broker, "GET", f"/api/exchanges/{enc(v)}/{x}")[1]
        assert ex["type"] == "direct" and ex["durable"] is True
        assert ex["arguments"] == {"x-alternate-exchange": "ae", "x-persist-messages": 10, "x-persist-ms": 100,
                                   "x-delayed-exchange": True}
        assert api(broker, "GET", f"/api/queues/{enc(v)}/amq.delayed.{x}")[0] == 200     # it delays
        # the vhost's limits
        ctl(broker, "-p", v, "set_vhost_limits", '{"max-connections": 10, "max-queues": 20}')
        assert api(broker, "GET", f"/api/vhost-limits/{enc(v)}")[1] == [
            {"vhost": v, "value": {"max-connections": 10, "max-queues": 20}}]
        p = ctl(broker, "-p", v, "set_vhost_limits", '{"other": 1}', check=False)
        assert p.returncode == 2 and "max-queues or max-connections required" in p.stderr
        # LavinMQ's output: the Listing line, a header, the rows; -q keeps the header, -s drops it
        out = ctl(broker, "-p", v, "list_queues").stdout.splitlines()
        assert out[0] == f"Listing queues for vhost {v} ..." and out[1].startswith("name\tmessages")
        assert sorted(line.split("\t")[0] for line in out[2:]) == sorted([q, s, f"amq.delayed.{x}"])
        assert ctl(broker, "-p", v, "-q", "list_queues").stdout.splitlines()[0].startswith("name\tmessages")
        assert ctl(broker, "-p", v, "-s", "list_exchanges").stdout.splitlines()[0].split("\t")[0] != "name"
        rows = json.loads(ctl(broker, "-p", v, "-f", "json", "list_exchanges").stdout)
        assert {"name": x, "type": "direct", "durable": True, "auto_delete": False, "internal": False} in rows
    finally:
        ctl(broker, "delete_vhost", v)


def test_connections_status_and_server_commands(broker):
    v = unique("v")
    ctl(broker, "add_vhost", v)
    ctl(broker, "-p", v, "set_permissions", "guest", ".*", ".*", ".*")
    conn = pika.BlockingConnection(pika.URLParameters(broker.url.rsplit("/", 1)[0] + "/" + enc(v)))
    try:
        # LavinMQ's default columns, and any columns asked for
        out = ctl(broker, "list_connections").stdout.splitlines()
        assert out[:2] == ["Listing connections ...", "user\tpeer_host\tpeer_port\tstate"]
        assert any(line.startswith("guest\t127.0.0.1\t") for line in out[2:])
        out = ctl(broker, "-s", "list_connections", "vhost", "client_properties").stdout.splitlines()
        mine = [line for line in out if line.startswith(v + "\t")]
        assert len(mine) == 1 and mine[0].split("\t")[1].startswith('[{"product","Pika Python Client Library"}')
        # close_all_connections -p VHOST: that vhost's connections
        out = ctl(broker, "-p", v, "close_all_connections", "maintenance").stdout.splitlines()
        assert out[0].startswith("Closing connection ") and out[1] == "closed_connections" and len(out) == 3
        try:
            conn.process_data_events(1)
            raise AssertionError("the connection stays open")
        except pika.exceptions.ConnectionClosedByBroker as exc:
            assert exc.reply_code == 320 and "maintenance" in exc.reply_text
    finally:
        if conn.is_open:
            conn.close()
        ctl(broker, "delete_vhost", v)
    # status: LavinMQ's keys, "Key: value"
    lines = dict(line.split(": ", 1) for line in ctl(broker, "status").stdout.splitlines())
    assert list(lines)[:4] == ["Version", "Node", "Uptime", "Connections"] and "Messages_unacked" in lines
    st = json.loads(ctl(broker, "-f", "json", "status").stdout)
    assert isinstance(st["Uptime"], int) and isinstance(st["Queues"], int)
    cluster = json.loads(ctl(broker, "-f", "json", "cluster_status").stdout)
    assert [row["role"] for row in cluster] == ["single node"]
    gc = dict(line.split(": ", 1) for line in ctl(broker, "gc_collect").stdout.splitlines())
    assert int(gc["gc_no"]) > 0
    for noop in ("stop_app", "start_app"):
        assert ctl(broker, noop).stdout == ""
    # -n (a node name) is accepted and changes nothing
    assert "/" in ctl(broker, "-n", "rabbit@localhost", "-s", "list_vhosts").stdout.split()


def test_hostname_port_scheme_and_their_conflicts(broker):
    import subprocess
    import sys
    from tests.conftest import ROOT
    port = broker.http_url.rsplit(":", 1)[1]

    def run(*argv):
        return subprocess.run([sys.executable, "-m", "lavinmq.ctl", *argv], capture_output=True, text=True,
                              cwd=ROOT, timeout=60)
    p = run("--hostname", "127.0.0.1", "--port", port, "--scheme", "http", "-s", "list_vhosts")
    assert p.returncode == 0 and "/" in p.stdout.split()
    p = run("--uri", broker.http_url, "--hostname", "127.0.0.1", "list_vhosts")
    assert p.returncode == 2 and "invalid args when using uri: hostname" in p.stderr
    p = run("-H", broker.http_url, "-s", "list_vhosts")          # the deprecated --host
    assert p.returncode == 0
    assert run("-v").stdout.strip()
    assert run("--build-info").stdout.startswith("lavinmq ")


def test_definitions_from_a_data_directory(broker):
    """lavinmqctl definitions DATA_DIR reads the files (no broker needed);
    what it gives imports back."""
    q, x = unique("dq"), unique("dx")
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.exchange_declare(x, "topic", durable=True)
    ch.queue_declare(q, durable=True, arguments={"x-max-length": 7})
    ch.queue_bind(q, x, "a.#")
    ch.queue_unbind(q, x, "a.#")
    ch.queue_bind(q, x, "b.*")
    conn.close()
    assert api(broker, "PUT", f"/api/policies/%2F/{q}", {"pattern": "^" + q, "definition": {"max-length": 3}})[0] == 201
    try:
        defs = json.loads(ctl(broker, "definitions", broker.data_dir).stdout)
        assert {"name": q, "vhost": "/", "durable": True, "auto_delete": False,
                "arguments": {"x-max-length": 7}} in defs["queues"]
        assert any(e["name"] == x and e["type"] == "topic" for e in defs["exchanges"])
        mine = [b for b in defs["bindings"] if b["source"] == x]
        assert [b["routing_key"] for b in mine] == ["b.*"]
        assert any(p["name"] == q and p["definition"] == {"max-length": 3} for p in defs["policies"])
        assert any(u["name"] == "guest" and u["password_hash"] for u in defs["users"])
        # into a fresh vhost it imports as it is
        v = unique("imp")
        ctl(broker, "add_vhost", v)
        body = {k: [{**i, "vhost": v} for i in defs[k] if i.get("vhost") == "/" and q in (i.get("name"),
                                                                                         i.get("destination"))
                    or i.get("name") == x]
                for k in ("queues", "exchanges", "bindings")}
        assert api(broker, "POST", "/api/definitions", body)[0] in (200, 201, 204)
        assert api(broker, "GET", f"/api/queues/{enc(v)}/{q}")[1]["arguments"] == {"x-max-length": 7}
        ctl(broker, "delete_vhost", v)
    finally:
        api(broker, "DELETE", f"/api/policies/%2F/{q}")
        api(broker, "DELETE", f"/api/queues/%2F/{q}")
        api(broker, "DELETE", f"/api/exchanges/%2F/{x}")


def test_shovel_and_federation_commands(broker):
    """LavinMQ's add_shovel / list_shovels / delete_shovel and the federation
    upstream commands, over /api/parameters (its defaults filled in)."""
    import time
    src, dest, name, up = unique("shsrc"), unique("shdst"), unique("shovel"), unique("upstream")
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    for q_ in (src, dest):
        ch.queue_declare(q_, durable=True)
    ch.confirm_delivery()
    for i in range(5):
        ch.basic_publish("", src, b"%d" % i)
    amqp = broker.url
    ctl(broker, "add_shovel", name, "--src-uri", amqp, "--src-queue", src, "--dest-uri", amqp, "--dest-queue", dest)
    value = api(broker, "GET", f"/api/parameters/shovel/%2F/{name}")[1]["value"]
    assert value["src-prefetch-count"] == 1000 and value["ack-mode"] == "on-confirm" and value["reconnect-delay"] == 5
    deadline = time.monotonic() + 10
    while ch.queue_declare(dest, passive=True).method.message_count < 5:
        assert time.monotonic() < deadline, "the shovel moved nothing"
        time.sleep(0.1)
    rows = json.loads(ctl(broker, "-f", "json", "list_shovels").stdout)
    assert {"name": name, "vhost": "/", "state": "running"} in rows
    ctl(broker, "delete_shovel", name)
    assert api(broker, "GET", f"/api/parameters/shovel/%2F/{name}")[0] == 404
    p = ctl(broker, "add_shovel", name, "--src-uri", amqp, check=False)
    assert p.returncode == 2
    # a federation upstream: --uri after the command is the upstream's
    ctl(broker, "add_federation", up, "--uri", amqp, "--max-hops", "2")
    value = api(broker, "GET", f"/api/parameters/federation-upstream/%2F/{up}")[1]["value"]
    assert value["uri"] == amqp and value["max-hops"] == 2 and value["prefetch-count"] == 1000
    assert up in ctl(broker, "-s", "list_federations").stdout.split()
    ctl(broker, "delete_federation", up)
    assert api(broker, "GET", f"/api/parameters/federation-upstream/%2F/{up}")[0] == 404
    for q_ in (src, dest):
        ch.queue_delete(q_)
    conn.close()
