"""Issue 14 item 15: property-based fuzzing of the management API from its
own OpenAPI document (schemathesis): valid and invalid requests to every
operation; no input may get a 500 or kill the broker. The budget is set
for CI (HTTP_FUZZ_EXAMPLES per operation and mode, ~1 minute); raise it
for a longer run: HTTP_FUZZ_EXAMPLES=1000 pytest tests/security/test_http_fuzz.py"""
import base64
import os

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode

from lavinmq.http.openapi import DOCUMENT
from tests.security.conftest import call

EXAMPLES = int(os.environ.get("HTTP_FUZZ_EXAMPLES", "25"))
AUTH = {"Authorization": "Basic " + base64.b64encode(b"fuzzer:fuzz-pw").decode()}


def _streams(op):
    """An answer that does not end (/api/livelog's event stream): not fuzzed."""
    spec = DOCUMENT["paths"][op.path][op.method.lower()]
    return any("text/event-stream" in (r.get("content") or {}) for r in spec["responses"].values())


def operations():
    schema = schemathesis.openapi.from_dict(DOCUMENT)
    return [op for op in (r.ok() for r in schema.get_all_operations()) if not _streams(op)]


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    from tests.security.conftest import start_broker
    b = start_broker(tmp_path_factory.mktemp("fuzz"), "[mgmt]\nread_timeout = 5\n")
    # an administrator of its own, so that a fuzzed delete of guest doesn't lock the fuzzer out
    assert call(b, "PUT", "/api/users/fuzzer", {"password": "fuzz-pw", "tags": "administrator"})[0] == 201
    yield b
    assert b.proc.poll() is None, "the broker died under fuzzing:\n" + b.log_tail()
    assert b.stop() == 0
    b.check_clean()


# names that exist, so that half the cases reach past the 404s
KNOWN = {"vhost": "/", "queue": "fuzz-q", "exchange": "amq.direct", "source": "amq.direct",
         "destination": "fuzz-q", "user": "fuzz-victim", "node": "lavinmq@localhost", "props": "~"}


def restore(b):
    """Fuzzing deletes what it finds: put back the vhost, queue and users the cases use."""
    fuzzer = dict(user="fuzzer", password="fuzz-pw")
    call(b, "PUT", "/api/vhosts/%2F", {}, **fuzzer)
    call(b, "PUT", "/api/permissions/%2F/fuzzer", {"configure": ".*", "write": ".*", "read": ".*"}, **fuzzer)
    call(b, "PUT", "/api/queues/%2F/fuzz-q", {}, **fuzzer)
    call(b, "PUT", "/api/users/fuzz-victim", {"password": "x", "tags": "management"}, **fuzzer)


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=lambda m: m.value)
def test_no_input_gets_a_500(target, mode):
    from hypothesis import strategies as st
    session = requests.Session()
    failures = []
    statuses = {}
    ops = operations()
    for op in ops:
        restore(target)
        names = {p.name: KNOWN[p.name] for p in op.path_parameters if p.name in KNOWN}
        strategy = op.as_strategy(generation_mode=mode)
        if names and len(names) == len(list(op.path_parameters)):
            strategy = st.one_of(strategy, op.as_strategy(generation_mode=mode, path_parameters=names))

        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                  phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
        @given(case=strategy)
        def run(case):
            # the fuzzer's credentials, not a generated Authorization (wrong ones only
            # teach the login back-off about 127.0.0.1: tests/security/test_logins.py)
            case.headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}
            try:
                resp = case.call(base_url=target.http_url, session=session, headers=AUTH, timeout=10)
            except requests.RequestException as exc:
                failures.append((op.label, repr(exc), case.path_parameters, case.query, case.body))
                return
            statuses[resp.status_code] = statuses.get(resp.status_code, 0) + 1
            if resp.status_code >= 500:
                failures.append((op.label, resp.status_code, resp.text[:200], case.path_parameters,
                                 case.query, case.body))

        run()
        assert target.proc.poll() is None, f"broker died at {op.label}:\n{target.log_tail()}"
        # cases without credentials are 401 by design; the fuzzer itself must still get in
        assert call(target, "GET", "/api/whoami", user="fuzzer", password="fuzz-pw")[0] == 200, op.label
    print(mode.value, sorted(statuses.items()))
    assert sum(n for status, n in statuses.items() if status < 300) > len(ops) * 2, statuses
    assert not failures, "\n".join(map(str, failures[:20]))
