"""What the parity tests share: the management API over real HTTP and the
real lavinmqctl (a subprocess) against a real broker."""
import base64
import contextlib
import io
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

from tests.conftest import ROOT


def api(broker, method, path, body=None, user="guest", password="guest", raw=None, headers=None):
    """-> (status, decoded JSON body or text)."""
    auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    hdrs = {"Authorization": auth, "Content-Type": "application/json", **(headers or {})}
    req = urllib.request.Request(broker.http_url + path, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, text = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read()
    try:
        return status, json.loads(text) if text else None
    except ValueError:
        return status, text.decode(errors="replace")


def ctl(broker, *argv, check=True, process=False):
    """lavinmqctl's main() with --uri to the broker -> CompletedProcess;
    process=True runs it as a user does, in a process of its own (slower:
    most calls stay in this one)."""
    argv = ["--uri", broker.http_url, *argv]
    if process:
        env = {**os.environ, "PYTHONPATH": ROOT}
        p = subprocess.run([sys.executable, "-m", "lavinmq.ctl", *argv],
                           capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
    else:
        from lavinmq import ctl as lavinmqctl
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                rc = lavinmqctl.main(argv, out=out)
            except SystemExit as exc:       # argparse: a usage error (2), --help, --version
                rc = exc.code if isinstance(exc.code, int) else 0
        p = subprocess.CompletedProcess(argv, rc, out.getvalue(), err.getvalue())
    if check:
        assert p.returncode == 0, (argv, p.returncode, p.stdout, p.stderr)
    return p
