"""`make deb` / `make rpm` check their Debian tools before building
anything (issue 31 item 5): with the tools out of PATH, make stops at once,
names the missing packages and the command that installs them; with them
present it goes on to the build (make -n: only printed)."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# what the Makefile itself runs while it is read
BASICS = ["sh", "python3", "dpkg", "uname", "getconf", "cut", "git", "find", "id"]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")


def make(tmp_path, *args, tools=()):
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for name in [*BASICS, *tools]:
        path = shutil.which(name)
        if path and not (bindir / name).exists():
            (bindir / name).symlink_to(path)
    return subprocess.run([shutil.which("make"), "-n", *args], cwd=ROOT, capture_output=True, text=True,
                          env={"PATH": str(bindir), "HOME": str(tmp_path)}, timeout=60)


def test_deb_without_its_tools_stops_before_building(tmp_path):
    r = make(tmp_path, "deb")
    assert r.returncode != 0
    assert r.stdout == ""           # nothing was going to run: not even ./dev setup
    assert ("make deb needs Debian packages that are missing: debhelper dpkg-dev fakeroot lintian. "
            "Install them with: make deps") in r.stderr
    assert "apt-get install --no-install-recommends debhelper dpkg-dev fakeroot lintian" in r.stderr


def test_rpm_without_rpmbuild(tmp_path):
    r = make(tmp_path, "rpm")
    assert r.returncode != 0 and r.stdout == ""
    assert "make rpm needs Debian packages that are missing: rpm." in r.stderr


def test_with_the_tools_the_build_goes_on(tmp_path):
    tools = ["dpkg-buildpackage", "dh", "lintian", "fakeroot"]
    if any(shutil.which(t) is None for t in tools):
        pytest.skip("the deb tools are not installed here (make deps)")
    r = make(tmp_path, "deb", tools=tools)
    assert r.returncode == 0, r.stderr
    assert "needs Debian packages" not in r.stderr
    if not os.path.exists(os.path.join(ROOT, "dist", "lavinmq")):      # else it may all be made already
        assert "./dev setup" in r.stdout and "pyinstaller.spec" in r.stdout
