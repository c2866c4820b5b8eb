"""Issue 25 finding 8: the deduplication cache size was the tenant's to
pick. x-cache-size up to 2^31-1: 2^30 reserved 40 GB of address space for
one queue and grew ~2 KB of RSS per distinct id until the queue was
deleted; 2^31-1 answered 541 (the allocation failed) instead of 406."""
import pika
import pytest

from tests.security.conftest import call


def _declare(ch, kind, name, size):
    args = {"x-message-deduplication": True, "x-cache-size": size}
    if kind == "queue":
        ch.queue_declare(name, arguments=args)
    else:
        ch.exchange_declare(name, "direct", arguments=args)


def _vm_size_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmSize")


@pytest.mark.parametrize("kind", ["queue", "exchange"])
def test_cache_size_past_the_cap_is_refused_with_406(make_broker, kind):
    b = make_broker()
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    before = _vm_size_mb(b.proc.pid)
    for size in (2 ** 31 - 1, 2 ** 30, 1_000_001):
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
            _declare(ch, kind, f"big-{size}", size)
        assert err.value.reply_code == 406, err.value
        assert "max_deduplication_cache_size" in err.value.reply_text
    assert conn.is_open
    # up to the cap is fine, and takes what it says (40 bytes an entry), not gigabytes
    _declare(conn.channel(), kind, "at-the-cap", 1_000_000)
    assert _vm_size_mb(b.proc.pid) - before < 200
    conn.close()
    status, body = call(b, "PUT", f"/api/{kind}s/%2F/over-http",
                        {"arguments": {"x-message-deduplication": True, "x-cache-size": 2 ** 31 - 1},
                         **({"type": "direct"} if kind == "exchange" else {})})
    assert status == 400 and "max_deduplication_cache_size" in body["reason"], body


def test_the_cap_is_a_setting_and_boot_cuts_older_definitions(make_broker, tmp_path):
    b = make_broker()
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    ch.queue_declare("dedup-q", durable=True, arguments={"x-message-deduplication": True, "x-cache-size": 5000})
    conn.close()
    # lowered: what exists comes back (cut to the cap), what is new must fit
    (tmp_path / "lavinmq.ini").write_text("[main]\nmax_deduplication_cache_size = 100\n")   # make_broker's -c
    b.restart()
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    ch = conn.channel()
    ch.queue_declare("dedup-q", durable=True, passive=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        ch.queue_declare("another", arguments={"x-message-deduplication": True, "x-cache-size": 101})
    assert err.value.reply_code == 406
    conn.channel().queue_declare("small", arguments={"x-message-deduplication": True, "x-cache-size": 100})
    conn.close()
