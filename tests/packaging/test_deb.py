"""make deb: the .deb holds the binary and its links, the unit, the
conffile and maintainer scripts, and lintian has nothing unexplained."""
import glob
import os
import subprocess

from tests.packaging.conftest import ROOT


def test_deb_builds_with_the_expected_content():
    subprocess.run(["make", "deb"], cwd=ROOT, check=True, timeout=900, capture_output=True)
    debs = glob.glob(os.path.join(ROOT, "dist", "lavinmq_*_amd64.deb"))
    assert len(debs) == 1
    deb = debs[0]
    listing = subprocess.run(["dpkg-deb", "-c", deb], capture_output=True, text=True, check=True).stdout
    for path in ("./usr/bin/lavinmq", "./usr/bin/lavinmqctl -> lavinmq", "./usr/bin/lavinmqperf -> lavinmq",
                 "./lib/systemd/system/lavinmq.service", "./etc/lavinmq/lavinmq.ini"):
        assert path in listing, path
    info = subprocess.run(["dpkg-deb", "-I", deb], capture_output=True, text=True, check=True).stdout
    assert "libc6 (>= 2.36)" in info and "adduser" in info
    ctrl = subprocess.run(f"dpkg-deb --ctrl-tarfile {deb} | tar -xOf - ./conffiles ./postinst ./postrm",
                          shell=True, capture_output=True, text=True, check=True).stdout
    assert "/etc/lavinmq/lavinmq.ini" in ctrl
    assert "adduser --system" in ctrl and "rm -rf /var/lib/lavinmq" in ctrl
    assert "deb-systemd-invoke" in ctrl          # started after install, stopped on remove
    lint = subprocess.run(["lintian", deb], capture_output=True, text=True)
    problems = [line for line in lint.stdout.splitlines() if line[:2] in ("E:", "W:")]
    assert problems == [], problems
    print(f"\n{os.path.basename(deb)}: {os.path.getsize(deb) / 1e6:.1f} MB")
