"""The arm64 packages for real: `make deb ARCH=arm64` and `make rpm
ARCH=aarch64` build them inside an arm64 Debian root under emulation
(tools/arm64.py); the .deb is installed with apt into a fresh minimal arm64
root and the broker it installed serves pika from this machine, across a
restart. Slow (minutes: qemu), root needed: the packaging step."""
import os
import shutil
import sys

import pytest

from tests.packaging.conftest import ROOT, ChrootBroker, get_one, in_root, passwd, roundtrip, sh, version
from tests.packaging.test_deb import apt, installed_version, publish_repo

sys.path.insert(0, os.path.join(ROOT, "tools"))
import arm64  # noqa: E402

pytestmark = pytest.mark.skipif(os.uname().machine == "aarch64",
                                reason="on arm64 the other packaging tests are the native ones")


def machine_of(path):
    """ELF machine of an executable, as readelf names it."""
    out = sh("readelf", "-h", str(path)).stdout
    return next(line.split(":", 1)[1].strip() for line in out.splitlines() if "Machine:" in line)


@pytest.fixture(scope="module")
def arm64_artefacts():
    v = version()
    sh("make", "-s", "deb", "ARCH=arm64", cwd=ROOT, timeout=1800)
    sh("make", "-s", "rpm", "ARCH=aarch64", cwd=ROOT, timeout=1800)
    out = {"deb": os.path.join(ROOT, "dist", f"lavinmq_{v}_arm64.deb"),
           "rpm": os.path.join(ROOT, "dist", f"lavinmq-{v}-1.aarch64.rpm")}
    for path in out.values():
        assert os.path.isfile(path), path
    return out


@pytest.fixture
def arm64_root(tmp_path):
    path = tmp_path / "arm64-root"
    arm64.target_root(str(path))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_arm64_deb_installs_and_serves_pika(arm64_artefacts, arm64_root, tmp_path):
    deb = arm64_artefacts["deb"]
    assert sh("dpkg-deb", "-f", deb, "Architecture").stdout.strip() == "arm64"
    sh("dpkg-deb", "-x", deb, str(tmp_path / "x"))
    assert machine_of(tmp_path / "x/usr/lib/lavinmq/lavinmq") == "AArch64"
    cores = list((tmp_path / "x/usr/lib/lavinmq").rglob("lavinmq/_core/segment*.so"))
    assert cores and all(machine_of(p) == "AArch64" for p in cores), cores

    publish_repo(arm64_root, deb)
    apt(arm64_root, "install", "lavinmq")
    assert installed_version(arm64_root) == version()
    assert passwd(arm64_root, "lavinmq")
    assert in_root(arm64_root, "uname", "-m").stdout.strip() == "aarch64"
    assert in_root(arm64_root, "/usr/bin/lavinmq", "--version").stdout.strip() == f"lavinmq {version()}"
    with ChrootBroker(arm64_root) as broker:
        roundtrip(broker.port, leave=b"kept across a restart on arm64")
        broker.stop()
    # the data it wrote, read back by a second start
    with ChrootBroker(arm64_root) as broker:
        assert get_one(broker.port) == b"kept across a restart on arm64"
        broker.stop()


def test_arm64_rpm(arm64_artefacts, tmp_path):
    rpm = arm64_artefacts["rpm"]
    assert sh("rpm", "-qp", "--qf", "%{ARCH}", rpm).stdout.strip() == "aarch64"
    sh("sh", "-c", f"rpm2archive - < {rpm} | tar -xz", cwd=str(tmp_path))     # rpm2cpio's package
    assert machine_of(tmp_path / "usr/lib/lavinmq/lavinmq") == "AArch64"
    assert (tmp_path / "usr/lib/systemd/system/lavinmq.service").is_file()
