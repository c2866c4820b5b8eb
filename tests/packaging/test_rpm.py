"""The .rpm for real: `dnf install lavinmq` from a local repository into a
fresh root (--installroot), the broker run from it, an upgrade over an
edited conffile, erase."""
import os
import shutil
import stat

from tests.packaging.conftest import ChrootBroker, get_one, in_root, passwd, roundtrip, sh

# The root is Debian's, so its rpm database starts empty. This package tells
# dnf what the root really has (each checked below), so that lavinmq's
# Requires resolve as on an rpm distribution: a root with an older glibc
# than the build machine's would still refuse it.
PROVIDES_SPEC = """\
Name: test-root-provides
Version: 1
Release: 1
Summary: What the Debian test root provides
License: Apache-2.0
BuildArch: noarch
Provides: glibc = {glibc}
Provides: shadow-utils
Provides: /bin/sh
Provides: /usr/bin/kill
%description
Test only.
%files
"""


def root_provides_rpm(root, workdir):
    for path in ("usr/sbin/useradd", "usr/sbin/groupadd", "usr/bin/getent", "bin/sh", "usr/bin/kill"):
        assert (root / path).exists(), path
    glibc = in_root(root, "getconf", "GNU_LIBC_VERSION").stdout.split()[1]
    spec = workdir / "provides.spec"
    spec.write_text(PROVIDES_SPEC.format(glibc=glibc))
    sh("rpmbuild", "-bb", "--quiet", "--define", f"_topdir {workdir / 'rpmbuild'}", str(spec))
    return next((workdir / "rpmbuild/RPMS/noarch").glob("*.rpm"))


def publish_repo(repo, *rpms):
    repo.mkdir(exist_ok=True)
    for rpm in rpms:
        shutil.copy(rpm, repo)
    sh("createrepo_c", "--quiet", "--update", str(repo))


def dnf(root, repo, *args):
    # our repository only, re-read each time (it changes between calls); the
    # release version given, as the root has no release package to tell it
    return sh("dnf", "-y", "-q", "--refresh", f"--installroot={root}", "--releasever=1",
              "--setopt=reposdir=/nonexistent", "--setopt=install_weak_deps=False",
              f"--repofrompath=lavinmq-test,file://{repo}", "--setopt=lavinmq-test.gpgcheck=0", *args)


def rpm_q(root, *args):
    return sh("rpm", f"--root={root}", "-q", *args, check=False)


def test_rpm_requires_the_build_machines_glibc(artefacts):
    glibc = sh("getconf", "GNU_LIBC_VERSION").stdout.split()[1]
    requires = sh("rpm", "-qpR", artefacts["rpm"][0]).stdout.splitlines()
    assert f"glibc >= {glibc}" in requires and "shadow-utils" in requires and "/usr/bin/kill" in requires
    assert not [r for r in requires if ".so" in r], "the bundled libraries are not dependencies"
    files = sh("rpm", "-qplv", artefacts["rpm"][0]).stdout
    assert "drwxr-x---" in next(line for line in files.splitlines() if line.endswith(" /var/lib/lavinmq"))
    for path in ("/usr/lib/lavinmq/lavinmq", "/usr/bin/lavinmqctl -> ../lib/lavinmq/lavinmq",
                 "/usr/lib/systemd/system/lavinmq.service", "/etc/lavinmq/lavinmq.ini",
                 "/usr/share/man/man1/lavinmqperf.1.gz"):
        assert path in files, path
    print(f"\n{os.path.basename(artefacts['rpm'][0])}: {os.path.getsize(artefacts['rpm'][0]) / 1e6:.1f} MB")


def test_dnf_install_run_upgrade_erase(root, artefacts, tmp_path):
    v1, v2 = artefacts["version"]
    repo = tmp_path / "rpmrepo"
    publish_repo(repo, root_provides_rpm(root, tmp_path), artefacts["rpm"][0])
    dnf(root, repo, "install", "test-root-provides", "lavinmq")
    assert rpm_q(root, "--qf", "%{VERSION}", "lavinmq").stdout == v1
    assert rpm_q(root, "--verify", "lavinmq").returncode == 0, "files as packaged"

    # %pre made the user, rpm gave it the data directory, %post enabled the unit
    user = passwd(root, "lavinmq")
    assert user and int(user[2]) < 1000 and user[5] == "/var/lib/lavinmq"
    st = os.stat(root / "var/lib/lavinmq")
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (int(user[2]), 0o750)
    assert os.readlink(root / "usr/bin/lavinmq") == "../lib/lavinmq/lavinmq"
    wants = root / "etc/systemd/system/multi-user.target.wants/lavinmq.service"
    assert wants.is_symlink() and os.readlink(wants).endswith("/lavinmq.service")
    assert "/etc/lavinmq/lavinmq.ini" in rpm_q(root, "-c", "lavinmq").stdout

    with ChrootBroker(root) as broker:
        roundtrip(broker.port)              # leaves one message behind
        broker.stop()

    # %config(noreplace): an upgrade keeps the admin's edit
    ini = root / "etc/lavinmq/lavinmq.ini"
    ini.write_text(ini.read_text().replace(";log_level = info", "log_level = debug"))
    publish_repo(repo, artefacts["rpm"][1])
    dnf(root, repo, "upgrade", "lavinmq")
    assert rpm_q(root, "--qf", "%{VERSION}", "lavinmq").stdout == v2
    assert "\nlog_level = debug\n" in ini.read_text()
    assert wants.is_symlink(), "an upgrade keeps the unit enabled"
    assert passwd(root, "lavinmq") == user
    with ChrootBroker(root) as broker:
        assert get_one(broker.port) == b"left in the data dir"
        assert " DEBUG " in broker.stop()

    # erase: %preun disables the unit; rpm has no purge, so the data stays
    dnf(root, repo, "remove", "lavinmq")
    assert rpm_q(root, "lavinmq").returncode != 0
    assert not (root / "usr/bin/lavinmq").exists() and not (root / "usr/lib/lavinmq").exists()
    assert not wants.exists()
    assert (root / "var/lib/lavinmq/users.json").exists()
    assert (root / "etc/lavinmq/lavinmq.ini.rpmsave").exists(), "the edited conffile is saved"
