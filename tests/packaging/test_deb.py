"""The .deb for real: what `make deb` builds, then `apt-get install lavinmq`
from a local repository into a fresh Debian root, the broker run from it,
remove, purge, and upgrades over an edited conffile."""
import os
import shutil
import stat

from tests.packaging.conftest import (ChrootBroker, get_one, in_root, passwd, roundtrip, sh)

REPO = "srv/lavinmq-repo"      # inside the root, so that apt in the chroot sees it


def test_deb_content_and_lintian(artefacts, tmp_path):
    deb = artefacts["deb"][0]
    listing = sh("dpkg-deb", "-c", deb).stdout
    for path in ("./usr/lib/lavinmq/lavinmq", "./usr/lib/lavinmq/_internal/libpython3.11.so.1.0",
                 "./usr/bin/lavinmq -> ../lib/lavinmq/lavinmq", "./usr/bin/lavinmqctl -> ../lib/lavinmq/lavinmq",
                 "./usr/bin/lavinmqperf -> ../lib/lavinmq/lavinmq", "./lib/systemd/system/lavinmq.service",
                 "./etc/lavinmq/lavinmq.ini", "./usr/share/man/man1/lavinmqctl.1.gz"):
        assert path in listing, path
    glibc = sh("getconf", "GNU_LIBC_VERSION").stdout.split()[1]
    depends = sh("dpkg-deb", "-f", deb, "Depends").stdout.strip()
    assert depends == f"libc6 (>= {glibc}), adduser, procps"
    # no build-machine library paths inside the bundle
    sh("dpkg-deb", "-x", deb, str(tmp_path))
    libs = list((tmp_path / "usr/lib/lavinmq").rglob("*.so*"))
    assert len(libs) > 20, libs
    for lib in libs:
        out = sh("readelf", "-d", str(lib)).stdout
        assert "RUNPATH" not in out and "RPATH" not in out, lib
    # no errors or warnings; the accepted ones are explained in debian/lavinmq.lintian-overrides
    r = sh("lintian", "--fail-on", "error,warning", deb, check=False)
    assert r.returncode == 0 and not [line for line in r.stdout.splitlines() if line[:2] in ("E:", "W:")], r.stdout
    print(f"\n{os.path.basename(deb)}: {os.path.getsize(deb) / 1e6:.1f} MB")


def publish_repo(root, *debs):
    """A flat repository holding `debs`, the root's only apt source."""
    repo = root / REPO
    shutil.rmtree(repo, ignore_errors=True)
    repo.mkdir(parents=True)
    for deb in debs:
        shutil.copy(deb, repo)
    # a flat repository needs Packages and no Release (an empty one breaks apt)
    (repo / "Packages").write_text(sh("dpkg-scanpackages", "--multiversion", ".", cwd=repo).stdout)
    (root / "etc/apt/sources.list").write_text(f"deb [trusted=yes] file:/{REPO} ./\n")
    for extra in (root / "etc/apt/sources.list.d").iterdir():
        extra.unlink()
    in_root(root, "apt-get", "update", "-q")


def apt(root, *args):
    # non-interactive upgrades keep an edited conffile (confold) and take
    # the package's version of an unedited one (confdef)
    return in_root(root, "apt-get", "-y", "-q", "-o", "Dpkg::Options::=--force-confdef",
                   "-o", "Dpkg::Options::=--force-confold", *args)


def installed_version(root):
    r = in_root(root, "dpkg-query", "-W", "-f=${Status} ${Version}", "lavinmq", check=False)
    return r.stdout.split()[-1] if r.stdout.startswith("install ok installed") else None


def test_apt_install_run_remove_purge(root, artefacts):
    publish_repo(root, artefacts["deb"][0])
    apt(root, "install", "lavinmq")
    assert installed_version(root) == artefacts["version"][0]

    # the lavinmq system user and its private data directory
    user = passwd(root, "lavinmq")
    assert user and int(user[2]) < 1000 and user[5] == "/var/lib/lavinmq" and user[6].endswith("nologin")
    data = root / "var/lib/lavinmq"
    st = os.stat(data)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (int(user[2]), 0o750)
    # the unit is enabled (started too where systemd runs: test_service.py)
    wants = root / "etc/systemd/system/multi-user.target.wants/lavinmq.service"
    assert os.readlink(wants) == "/lib/systemd/system/lavinmq.service"
    assert "/etc/lavinmq/lavinmq.ini" in in_root(root, "dpkg-query", "-W", "-f=${Conffiles}", "lavinmq").stdout
    in_root(root, "systemd-analyze", "verify", "--man=no", "lavinmq.service")
    # no Python in the root: the package brings everything it runs
    assert not (root / "usr/bin/python3").exists()
    out = in_root(root, "lavinmq", "--version", user="lavinmq").stdout
    assert out.strip() == f"lavinmq {artefacts['version'][0]}"

    with ChrootBroker(root) as broker:
        roundtrip(broker.port)
        # lavinmqctl as the lavinmq user: finds the control socket in /var/lib/lavinmq
        out = in_root(root, "lavinmqctl", "-s", "list_queues",
                      user="lavinmq").stdout
        assert out.startswith("packaging-test\t1\t"), out
        broker.stop()
    assert {os.stat(p).st_uid for p in data.rglob("*")} == {int(user[2])}, "every file is the lavinmq user's"
    assert (data / "users.json").exists()

    apt(root, "remove", "lavinmq")
    assert installed_version(root) is None
    assert not (root / "usr/bin/lavinmq").exists() and not (root / "usr/lib/lavinmq").exists()
    assert not wants.exists(), "remove disables the unit"
    assert (data / "users.json").exists(), "remove keeps the data"
    assert (root / "etc/lavinmq/lavinmq.ini").exists(), "remove keeps the conffile"

    apt(root, "purge", "lavinmq")
    assert not data.exists(), "purge deletes the data"
    assert not (root / "etc/lavinmq").exists()
    assert passwd(root, "lavinmq") is None, "purge removes the system user"
    assert in_root(root, "dpkg-query", "-W", "lavinmq", check=False).returncode != 0


def repack(deb, version, out, ini_extra):
    """`deb` as `version` with a changed lavinmq.ini, as a later release that
    edits the example would be."""
    tree = out.parent / "repack"
    sh("dpkg-deb", "-R", str(deb), str(tree))
    ini = tree / "etc/lavinmq/lavinmq.ini"
    ini.write_text(ini.read_text() + ini_extra)
    control = tree / "DEBIAN/control"
    control.write_text("".join(f"Version: {version}\n" if line.startswith("Version:") else line
                               for line in control.read_text().splitlines(True)))
    md5 = sh("md5sum", "etc/lavinmq/lavinmq.ini", cwd=tree).stdout
    sums = tree / "DEBIAN/md5sums"
    sums.write_text("".join(md5 if line.endswith(" etc/lavinmq/lavinmq.ini\n") else line
                            for line in sums.read_text().splitlines(True)))
    sh("dpkg-deb", "-Zgzip", "-z1", "--root-owner-group", "-b", str(tree), str(out))
    shutil.rmtree(tree)
    return out


def test_upgrade_keeps_edited_conffile_and_data(root, artefacts, tmp_path):
    v1, v2 = artefacts["version"]
    publish_repo(root, artefacts["deb"][0])
    apt(root, "install", "lavinmq")
    ini = root / "etc/lavinmq/lavinmq.ini"
    ini.write_text(ini.read_text().replace(";log_level = info", "log_level = debug"))
    with ChrootBroker(root) as broker:
        roundtrip(broker.port)
        broker.stop()

    # v2: `make deb LAVINMQ_VERSION=...`, the same conffile
    publish_repo(root, artefacts["deb"][1])
    apt(root, "install", "lavinmq")
    assert installed_version(root) == v2
    assert "\nlog_level = debug\n" in ini.read_text()

    # v3: the package's conffile changed as well: the admin's edit stays and
    # the new version is put beside it
    v3 = v2 + ".1"
    new = repack(artefacts["deb"][1], v3, tmp_path / f"lavinmq_{v3}.deb", "; added by a later release\n")
    publish_repo(root, new)
    apt(root, "install", "lavinmq")
    assert installed_version(root) == v3
    assert "\nlog_level = debug\n" in ini.read_text()
    assert "; added by a later release" in (root / "etc/lavinmq/lavinmq.ini.dpkg-dist").read_text()
    user = passwd(root, "lavinmq")
    assert user and os.stat(root / "var/lib/lavinmq").st_uid == int(user[2])

    with ChrootBroker(root) as broker:
        assert get_one(broker.port) == b"left in the data dir", "the message survived two upgrades"
        out = broker.stop()
    assert " DEBUG " in out, "the edited log_level is in effect"
