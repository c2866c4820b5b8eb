"""The management UI from the frozen build: the browser tests' core run
against the onedir broker the packages install, and the .deb and .rpm
carry the UI's files."""
import os
import subprocess
import sys

from tests.packaging.conftest import ROOT, sh

DIST = os.path.join(ROOT, "dist")
ASSET = "lavinmq/http/static/js/main.js"
# log in, every page, a queue's life, closing a connection, the chart under load
SUBSET = "login or every_page or queue_lifecycle or close_connection or chart_draws"


def test_ui_tests_pass_against_the_frozen_broker(tmp_path):
    sh("make", "-s", "binary", cwd=ROOT)
    broker = os.path.join(DIST, "lavinmq-dir", "lavinmq")
    assert os.path.isfile(os.path.join(DIST, "lavinmq-dir", "_internal", ASSET))
    shots = os.environ.get("LAVINMQ_UI_ARTEFACTS") or str(tmp_path / "shots")
    env = dict(os.environ, LAVINMQ_UI_BINARY=broker, LAVINMQ_UI_ARTEFACTS=shots)
    env.pop("LAVINMQ_PACKAGING_TESTS", None)
    out = subprocess.run([sys.executable, "-m", "pytest", "tests/ui/test_ui.py", "-k", SUBSET, "-q",
                          "-p", "no:cacheprovider"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert "6 passed" in out.stdout, out.stdout[-2000:]          # "login" picks two tests
    assert "skipped" not in out.stdout.splitlines()[-1], out.stdout[-2000:]
    taken = sorted(f for f in os.listdir(shots) if f.startswith("frozen-"))
    assert "frozen-overview.png" in taken and "frozen-queue.png" in taken, taken
    print("\nfrozen-broker screenshots:", ", ".join(taken))


def test_packages_carry_the_ui(artefacts):
    deb = sh("dpkg-deb", "-c", artefacts["deb"][0]).stdout
    assert f"./usr/lib/lavinmq/_internal/{ASSET}" in deb
    rpm = sh("rpm", "-qlp", artefacts["rpm"][0]).stdout
    assert f"/usr/lib/lavinmq/_internal/{ASSET}" in rpm.splitlines()
