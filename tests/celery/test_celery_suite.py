"""Celery's own integration suite (celery 5.6.3 `t/integration`, kombu 5.7.0)
against this broker, with a real prefork worker (Celery's session worker)
and Debian's redis-server as the result backend (tests/celery/suite.py).

Four runs, each on a fresh broker:
- classic: Celery's defaults (classic queues, a direct exchange);
- quorum: `task_default_queue_type = "quorum"` with a topic default
  exchange and publisher confirms, as Celery documents for quorum queues:
  countdowns then go through native delayed delivery (celery_delayed_0..27,
  TTLs up to 134,217,728,000 ms, dead-lettering), and the worker turns
  global QoS off;
- quorum-files: Celery's own quorum-queue files (native delayed delivery
  bindings read back from the management API, retries through the delayed
  queues, acks_late and task_reject_on_worker_lost workers), each in a
  pytest process of its own: they start workers of their own beside the
  session worker, and after one another they time out on any broker;
- isolated: files that change the session worker for the tests after them
  (test_dedup_chain_dispatch starts a second worker with the same node
  name, acks_late redeliveries; the 40 tests after it then fail on any
  broker), a process each.

By default a subset runs (a few minutes): tasks, ETA and countdown,
retries, revocation, acks_late redelivery, chords, groups and chains, and
`celery inspect`/`control` over pidbox, with both queue types. With
LAVINMQ_CELERY_FULL=1 every test of the suite runs, in both queue types (an
hour or more on two busy cores: the first 156 tests of test_canvas alone took
31 min at load 8, 146 passed, 7 xfailed and the 3 chord tests below failed,
as on RabbitMQ 3.10). EXCLUDED lists what never runs and why; KNOWN lists
the tests that fail on RabbitMQ 3.10 as well (the suite's own troubles;
checked there), allowed to fail in the full run only; the subset holds none
of them. Every other test must pass (or skip, or xfail, as the suite marks
it). The full quorum run has not been classified yet: a failure there that
RabbitMQ 3.10 shares belongs in KNOWN_QUORUM.

The same runs go against another broker with LAVINMQ_CELERY_BROKER (an
amqp:// URL) and LAVINMQ_CELERY_HTTP (its management API, http://host:port),
e.g. RabbitMQ 3.10 to check what is expected: its queues and exchanges are
deleted through the API before each run."""
import base64
import json
import os
import time
import urllib.parse
import urllib.request

import pytest

from tests.celery import suite
from tests.conftest import BrokerProcess

FULL = os.environ.get("LAVINMQ_CELERY_FULL") == "1"
EXTERNAL = os.environ.get("LAVINMQ_CELERY_BROKER")

T = "t/integration/"
# never run, in either mode
EXCLUDED = {
    T + "test_rabbitmq_default_queue_type_fallback.py":
        "needs pytest-celery's docker containers (its rabbitmq fixture) and tests Celery's own routing "
        "(a strict xfail: Celery makes a classic queue whatever task_default_queue_type says)",
    T + "test_backend.py": "Azure Blob Storage (skips without AZUREBLOCKBLOB_URL)",
    T + "test_django_settings.py": "Django's settings, no broker involved",
}
QUORUM_FILES = [T + "test_native_delayed_delivery_binding.py", T + "test_rabbitmq_quorum_queue_cycle_detection.py",
                T + "test_quorum_queue_qos_cluster_simulation.py", T + "test_rabbitmq_chord_unlock_routing.py"]
ISOLATED = [T + "test_dedup_chain_dispatch.py", T + "test_prefork_shutdown.py"]

TASKS = T + "test_tasks.py::"
INSPECT = T + "test_inspect.py::test_Inspect::"
CANVAS = T + "test_canvas.py::"
# fail on RabbitMQ 3.10 too (checked there): allowed to fail in the full run
KNOWN_BOTH = {
    TASKS + "test_trace_log_arguments::test_task_success":
        "reads the worker's log through caplog within 1 s",
    TASKS + "test_trace_log_arguments::test_task_failed":
        "reads the worker's log through caplog within 1 s",
    # subtests that wait for a result which must not come expect the builtin
    # TimeoutError and get redis-py's ("Timeout reading from socket")
    CANVAS + "test_chord::test_nested_chord_header_link_error": "redis-py's TimeoutError, not the builtin one",
    CANVAS + "test_chord::test_enabling_flag_allow_error_cb_on_chord_header": "the same",
    CANVAS + "test_chord::test_disabling_flag_allow_error_cb_on_chord_header": "the same",
}
# quorum mode only: these assert Celery's classic defaults, or retry with a
# countdown under 1 s, which native delayed delivery rounds to nothing
KNOWN_QUORUM = {
    TASKS + "test_tasks::test_task_retried_once": "retries with countdown 0.1 s: times out on RabbitMQ 3.10 too",
    TASKS + "test_tasks::test_task_retried_headers": "retries with countdown 0.1 s: times out on RabbitMQ 3.10 too",
    INSPECT + "test_active_queues": "expects the classic queue and direct exchange Celery makes by default",
    INSPECT + "test_scheduled": "expects the worker to hold the ETA task; native delayed delivery keeps it in "
                                "the broker",
    INSPECT + "test_query_task": "expects Celery's default delivery_info (direct exchange)",
    INSPECT + "test_active": "expects Celery's default delivery_info (direct exchange)",
}
KNOWN = {"classic": KNOWN_BOTH, "quorum": {**KNOWN_BOTH, **KNOWN_QUORUM}, "quorum-files": {}, "isolated": {}}

SUBSET_COMMON = [
    TASKS + "test_class_based_tasks::test_class_based_task_retried",
    *(TASKS + "test_tasks::" + t for t in (
        "test_simple_call", "test_basic_task", "test_ignore_result", "test_eta", "test_fail", "test_revoked",
        "test_wrong_arguments", "test_task_accepted", "test_unicode_task", "test_properties")),
    TASKS + "test_apply_tasks::test_apply_nested_parent_child_relationship",
    TASKS + "test_task_replacement::test_replaced_task_nesting_chain",
    *(INSPECT + t for t in ("test_ping", "test_revoked", "test_registered", "test_stats")),
    *(CANVAS + t for t in (
        "test_chain::test_simple_chain", "test_chain::test_chain_on_error",
        "test_chain::test_chain_error_handler_with_eta", "test_group::test_parent_ids",
        "test_chord::test_parent_ids", "test_chord::test_nested_chord", "test_chord::test_parallel_chords",
        "test_chord::test_chord_on_error")),
]
SUBSET = {
    "classic": SUBSET_COMMON + [
        *(TASKS + "test_tasks::" + t for t in ("test_task_retried_once", "test_task_retried_headers",
                                                "test_task_retried_priority")),
        *(INSPECT + t for t in ("test_active_queues", "test_scheduled", "test_query_task", "test_active",
                                "test_report", "test_clock", "test_conf")),
    ],
    "quorum": SUBSET_COMMON,
    # the chord_unlock stress test is xfail (non-strict) and takes a minute: the full run has it
    "quorum-files": QUORUM_FILES[:3],
    "isolated": ISOLATED[:1],
}
CONFIG = {
    "classic": None,
    "quorum": {"task_default_queue_type": "quorum", "task_default_exchange_type": "topic",
               "broker_transport_options": {"confirm_publish": True}},
    "quorum-files": None,
    "isolated": None,
}
# seconds a pytest process may take before it counts as hung
TIMEOUT = 5400 if FULL else 900


@pytest.fixture(scope="module")
def celery_tree():
    problem = suite.missing()
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(problem)
        pytest.skip(problem)
    return suite.obtain()


@pytest.fixture(scope="module")
def redis(tmp_path_factory, celery_tree):
    r = suite.Redis(tmp_path_factory.mktemp("redis")).start()
    yield r
    r.stop()


def _api(http_url, method, path):
    u = urllib.parse.urlparse(http_url)
    req = urllib.request.Request(http_url.rstrip("/") + path, method=method)
    user, password = u.username or "guest", u.password or "guest"
    req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    with urllib.request.urlopen(req, timeout=30) as resp:
        text = resp.read()
        return json.loads(text) if text else None


def clean_vhost(http_url):
    """Another broker starts each run empty: its queues and own exchanges go."""
    for q in _api(http_url, "GET", "/api/queues/%2F"):
        _api(http_url, "DELETE", "/api/queues/%2F/" + urllib.parse.quote(q["name"], safe=""))
    for x in _api(http_url, "GET", "/api/exchanges/%2F"):
        if x["name"] and not x["name"].startswith("amq."):
            _api(http_url, "DELETE", "/api/exchanges/%2F/" + urllib.parse.quote(x["name"], safe=""))


def selection(mode):
    """-> the pytest processes of a run, each a list of node ids or files."""
    if mode in ("quorum-files", "isolated"):
        files = {"quorum-files": QUORUM_FILES, "isolated": ISOLATED}[mode]
        return [[f] for f in (files if FULL else SUBSET[mode])]
    if not FULL:
        return [SUBSET[mode]]
    skip = set(EXCLUDED) | set(ISOLATED) | set(QUORUM_FILES)
    files = sorted(f for f in os.listdir(os.path.join(suite.CACHE, "tree", T))
                   if f.startswith("test_") and f.endswith(".py"))
    return [[T + f for f in files if T + f not in skip]]


@pytest.mark.timeout(6000)
@pytest.mark.parametrize("mode", ["classic", "quorum", "quorum-files", "isolated"])
def test_celery_integration_suite(mode, celery_tree, redis, tmp_path):
    failures, report = {}, []
    for i, chosen in enumerate(selection(mode)):
        redis.flush()
        broker = None
        if EXTERNAL:
            amqp_url, http_url = EXTERNAL, os.environ["LAVINMQ_CELERY_HTTP"]
            clean_vhost(http_url)
        else:
            broker = BrokerProcess(tmp_path / f"broker-{i}").start()
            amqp_url = f"pyamqp://guest:guest@{broker.host}:{broker.port}//"
            http_url = f"http://guest:guest@{broker.host}:{broker.http_port}"
        try:
            tree = suite.workdir(celery_tree, tmp_path / f"tree-{i}", CONFIG[mode])
            env = suite.environment(amqp_url, http_url.replace("guest:guest@", ""), redis.port)
            junit, log = tmp_path / f"junit-{i}.xml", tmp_path / f"celery-{mode}.log"
            started = time.monotonic()
            rc = suite.run(str(tree), chosen, env, str(junit), str(log), TIMEOUT)
            assert rc is not None, f"Celery's suite ({mode}) hung; its output: {log}"
            assert junit.exists(), f"Celery's suite ({mode}) exited with {rc}:\n{log.read_text()[-5000:]}"
            got = suite.outcomes(str(junit))
            assert got, f"Celery's suite ({mode}) ran nothing:\n{log.read_text()[-3000:]}"
            counts = {}
            for node, outcome in got.items():
                counts[outcome] = counts.get(outcome, 0) + 1
                if outcome in ("failed", "error") and not (FULL and node in KNOWN[mode]):
                    failures[node] = outcome
            report.append(f"{mode} {' '.join(chosen)[:80]}: {counts} in {time.monotonic() - started:.0f} s")
        finally:
            if broker is not None:
                broker.stop()
                broker.check_clean()
    print("\n".join(report))
    assert not failures, f"Celery's suite ({mode}) failed these (output in {tmp_path}):\n" + \
        "\n".join(f"  {n}: {o}" for n, o in sorted(failures.items()))
