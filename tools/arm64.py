#!/usr/bin/env python3
"""arm64 (aarch64, m6g-class) builds and tests on an x86-64 machine, under
emulation. Needs root (chroot, mounts) and Debian.

  tools/arm64.py test [pytest args]     the unit tests and a subset of the
                                        integration tests inside the arm64 root
  tools/arm64.py make TARGET... [VAR=v] `make TARGET` inside the arm64 root
                                        (binary, deb, rpm); what it builds is
                                        copied to dist/ (the binary to dist/aarch64/)
  tools/arm64.py shell                  a shell in the root, the source in /src
  tools/arm64.py host                   only install and register what this
                                        machine needs (qemu, binfmt, the cross gcc)
  tools/arm64.py root                   only make the build root (CI makes it
                                        next to the x86-64 tests)

`make deb ARCH=arm64` and `make rpm ARCH=aarch64` call `make` here.

How: Debian's qemu-user-static registers qemu-aarch64 with binfmt_misc with
the F flag, so aarch64 executables run anywhere, chroots included. The build
root is a bookworm arm64 made once by mmdebstrap (Python 3.11 as on bookworm,
gcc, the packaging tools) and kept in $LAVINMQ_ARM64_CACHE. The source is
copied into its /src, mtimes kept, so that `make` inside sees what changed.
The Cython extensions are compiled here by the cross compiler (Debian's
gcc-aarch64-linux-gnu: the same GCC 12 as the root's gcc) against the root's
headers and libc: the objects the root's own gcc would make, in under a
minute, where gcc under emulation takes many. Everything else (pip, pytest, the
broker, PyInstaller, dpkg-buildpackage, rpmbuild) runs inside the root; a
`./dev setup` there finds the extensions up to date, and on a real arm64
machine it compiles them itself."""
import fcntl
import hashlib
import os
import runpy
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.environ.get("LAVINMQ_ARM64_CACHE", "/var/cache/lavinmq-arm64")
SUITE = "bookworm"
TRIPLET = "aarch64-linux-gnu"
PY = "3.11"                                   # bookworm's python3
EXT_SUFFIX = f".cpython-{PY.replace('.', '')}-{TRIPLET}.so"
HOST_PACKAGES = ["qemu-user-static", "binfmt-support", "mmdebstrap", "arch-test",
                 f"gcc-{TRIPLET}", "libc6-dev-arm64-cross"]
# what building, testing and packaging need inside the root
BUILD_PACKAGES = ["python3", "python3-venv", "python3-dev", "gcc", "libc6-dev", "make", "git",
                  "ca-certificates", "procps", "build-essential", "dpkg-dev", "debhelper", "lintian", "fakeroot", "rpm"]
# a root to install the .deb into: what test_deb.py's roots have but systemd
TARGET_PACKAGES = ["adduser", "procps"]
ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LC_ALL": "C.UTF-8",
       "DEBIAN_FRONTEND": "noninteractive", "LAVINMQ_EXTRAS": "test", "LAVINMQ_PREBUILT": "1",
       "PYTHONDONTWRITEBYTECODE": "1"}
# integration tests run under emulation (a broker takes ~6 s to start there): the
# protocol, queue semantics, routing, persistence and restart paths that
# touch the Cython core's byte handling; the rest is the same Python on both
INTEGRATION = ["tests/integration/test_pika_core.py", "tests/integration/test_protocol.py",
               "tests/integration/test_conformance.py", "tests/integration/test_queue_semantics.py",
               "tests/integration/test_exchange_features.py", "tests/integration/test_restart.py",
               "tests/integration/test_damaged_data.py", "tests/integration/test_deduplication.py",
               "tests/integration/test_delayed.py", "tests/streams"]
# timed for a native broker: windows that a restart under emulation (~5 s)
# overruns, or 30,000 pika round trips (>120 s here); they run on x86-64
TOO_SLOW = ["tests/integration/test_restart.py::test_durable_messages_survive",
            "tests/integration/test_delayed.py::test_delayed_messages_survive",
            "tests/integration/test_exchange_features.py::test_consistent_hash_distribution_follows_weights"]


def say(*a):
    print("arm64:", *a, file=sys.stderr, flush=True)


def run(*cmd, **kw):
    kw.setdefault("check", True)
    return subprocess.run(cmd, **kw)


def ensure_host():
    """qemu-aarch64 registered with binfmt_misc, the cross compiler, mmdebstrap."""
    missing = [p for p in HOST_PACKAGES
               if "ok installed" not in subprocess.run(["dpkg-query", "-W", "-f=${Status}", p],
                                                       capture_output=True, text=True).stdout]
    if missing:
        say("apt-get install", *missing)
        run("apt-get", "update", "-qq")
        run("apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, stdout=subprocess.DEVNULL)
    if not os.path.exists("/proc/sys/fs/binfmt_misc/register"):
        run("mount", "-t", "binfmt_misc", "binfmt_misc", "/proc/sys/fs/binfmt_misc")
    if not os.path.exists("/proc/sys/fs/binfmt_misc/qemu-aarch64"):
        run("update-binfmts", "--enable", "qemu-aarch64")
    with open("/proc/sys/fs/binfmt_misc/qemu-aarch64") as f:
        flags = [line.split()[1] for line in f if line.startswith("flags:")]
    if not flags or "F" not in flags[0]:
        sys.exit("arm64: qemu-aarch64 is registered without the F flag: it cannot run inside a chroot")


def make_root(path, variant, packages, online=True):
    """A bookworm arm64 root at `path`, made once per package list and kept
    as a tarball next to it; returns once `path` holds a fresh copy."""
    os.makedirs(CACHE, exist_ok=True)
    key = hashlib.sha1(f"{SUITE} {variant} {' '.join(packages)}".encode()).hexdigest()[:12]
    tarball = os.path.join(CACHE, f"{SUITE}-arm64-{variant}-{key}.tar")
    with open(tarball + ".lock", "w") as lock:      # parallel runs make it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(tarball):
            t0 = time.monotonic()
            say(f"making the {variant} root (mmdebstrap under emulation, minutes, once)")
            run("mmdebstrap", "--quiet", "--arch=arm64", f"--variant={variant}",
                f"--include={','.join(packages)}", SUITE, tarball + ".tmp", "--format=tar")
            os.rename(tarball + ".tmp", tarball)
            say(f"root made in {time.monotonic() - t0:.0f} s")
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    run("tar", "-C", path, "-xf", tarball)
    if online:
        trust_host(path)


def trust_host(root):
    """The host's name servers and extra CAs (a proxy that signs its own
    certificates), so that pip and apt inside reach what the host reaches."""
    shutil.copy("/etc/resolv.conf", os.path.join(root, "etc/resolv.conf"))
    extra = "/usr/local/share/ca-certificates"
    if os.path.isdir(extra) and os.listdir(extra):
        shutil.copytree(extra, os.path.join(root, extra.lstrip("/")), dirs_exist_ok=True)
        chroot(root, "update-ca-certificates", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def chroot(root, *cmd, env=None, mounts=True, **kw):
    """cmd inside the root, with /proc and /dev mounted in a private mount
    namespace: the mounts go away with the command, whatever happens."""
    inner = ["chroot", root, "env", "-i", *[f"{k}={v}" for k, v in (env or ENV).items()], *cmd]
    if not mounts:
        return run(*inner, **kw)
    script = ('mount -t proc proc "$0/proc" && mount --rbind /dev "$0/dev" && '
              'mount --make-rslave "$0/dev" && exec "$@"')
    return run("unshare", "--mount", "--propagation", "private", "sh", "-c", script, root, *inner, **kw)


def build_root():
    root = os.path.join(CACHE, "build-root")
    stamp = os.path.join(root, ".lavinmq-packages")
    want = " ".join(BUILD_PACKAGES)
    if not os.path.exists(stamp) or open(stamp).read() != want:
        make_root(root, "apt", BUILD_PACKAGES)
        with open(stamp, "w") as f:
            f.write(want)
    return root


def tracked_files():
    out = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=REPO,
                         capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p and os.path.isfile(os.path.join(REPO, p))]


def sync_source(root):
    """The working tree (tracked and untracked, not ignored) into root/src:
    changed files copied with their mtimes, removed ones removed."""
    src = os.path.join(root, "src")
    manifest = os.path.join(src, ".arm64-manifest")
    before = set(open(manifest).read().split("\0")) if os.path.exists(manifest) else set()
    files = tracked_files()
    for rel in files:
        a, b = os.path.join(REPO, rel), os.path.join(src, rel)
        sa = os.stat(a)
        try:
            sb = os.stat(b)
            if sb.st_size == sa.st_size and sb.st_mtime == sa.st_mtime:
                continue
        except FileNotFoundError:
            os.makedirs(os.path.dirname(b), exist_ok=True)
        shutil.copy2(a, b)
    for rel in before - set(files) - {""}:
        try:
            os.unlink(os.path.join(src, rel))
        except FileNotFoundError:
            pass
    with open(manifest, "w") as f:
        f.write("\0".join(files))
    return src


def cross_compile(root, src):
    """Cythonize here (the C is the same for every machine), then compile
    each module with the cross compiler against the root's headers."""
    setup = runpy.run_path(os.path.join(src, "setup.py"), run_name="lavinmq_arm64")
    from Cython.Build import cythonize
    cwd = os.getcwd()
    os.chdir(src)
    try:
        cythonize(setup["extensions"], quiet=True, **setup["CYTHON_OPTIONS"])
    finally:
        os.chdir(cwd)
    jobs = []
    for ext in setup["extensions"]:
        c = os.path.join(src, os.path.splitext(ext.sources[0])[0] + ".c")
        so = os.path.join(src, ext.name.replace(".", "/") + EXT_SUFFIX)
        if os.path.exists(so) and os.path.getmtime(so) >= os.path.getmtime(c):
            continue
        flags = list(ext.extra_compile_args) + [f"-D{k}={v}" for k, v in ext.define_macros]
        jobs.append((so, [f"{TRIPLET}-gcc", f"--sysroot={root}", f"-I{root}/usr/include/python{PY}",
                          "-fPIC", "-fwrapv", "-fno-strict-aliasing", "-DNDEBUG", "-Wall",
                          "-fstack-protector-strong", *flags, "-shared", "-o", so + ".tmp", c]))
    if not jobs:
        return
    say(f"cross-compiling {len(jobs)} extensions for aarch64")
    t0, pending, failed = time.monotonic(), list(jobs), []
    running = []
    while pending or running:
        while pending and len(running) < (os.cpu_count() or 2):
            so, cmd = pending.pop(0)
            running.append((so, subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)))
        so, proc = running.pop(0)
        err = proc.communicate()[1]
        if proc.returncode != 0:
            failed.append(so)
            print(err, file=sys.stderr)
        else:
            os.replace(so + ".tmp", so)
    if failed:
        sys.exit(f"arm64: compiling failed: {', '.join(map(os.path.basename, failed))}")
    say(f"compiled in {time.monotonic() - t0:.0f} s")


def prepare():
    ensure_host()
    root = build_root()
    src = sync_source(root)
    cross_compile(root, src)
    # the root's Python sets up /src/.venv (runtime and test dependencies);
    # LAVINMQ_PREBUILT: the tree's extensions are used, nothing is compiled
    # under emulation
    chroot(root, "sh", "-c", "cd /src && ./dev setup")
    return root, src


def cmd_test(args):
    root, _ = prepare()
    t0 = time.monotonic()
    r = chroot(root, "sh", "-c", 'cd /src && exec .venv/bin/python -m pytest -q -p no:cacheprovider '
               '--timeout 600 "$@"', "pytest", "tests/unit", *INTEGRATION,
               *[f"--deselect={t}" for t in TOO_SLOW], *args, check=False)
    say(f"tests took {time.monotonic() - t0:.0f} s under emulation")
    return r.returncode


def cmd_make(args):
    root, src = prepare()
    chroot(root, "sh", "-c", 'cd /src && exec make -s "$@"', "make", *args)
    dist, out = os.path.join(src, "dist"), os.path.join(REPO, "dist")
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(dist):
        if name.endswith(("_arm64.deb", ".aarch64.rpm")):
            shutil.copy2(os.path.join(dist, name), out)
            say("dist/" + name)
    if os.path.isfile(os.path.join(dist, "lavinmq")) and "binary" in args:
        os.makedirs(os.path.join(out, "aarch64"), exist_ok=True)
        shutil.copy2(os.path.join(dist, "lavinmq"), os.path.join(out, "aarch64", "lavinmq"))
        say("dist/aarch64/lavinmq")
    return 0


def cmd_host(args):
    ensure_host()
    return 0


def cmd_root(args):
    ensure_host()
    build_root()
    return 0


def cmd_shell(args):
    root, _ = prepare()
    return chroot(root, "sh", "-c", "cd /src && exec bash -i", check=False).returncode


def target_root(path):
    """A fresh minimal arm64 root at `path` for installing the .deb into
    (tests/packaging/test_arm64.py)."""
    ensure_host()
    make_root(path, "minbase", TARGET_PACKAGES, online=False)   # installs from a local repository


def main(argv):
    commands = {"test": cmd_test, "make": cmd_make, "shell": cmd_shell, "root": cmd_root,
                "host": cmd_host}
    if not argv or argv[0] not in commands:
        print(__doc__, file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        sys.exit("arm64: needs root (chroot, mounts, apt-get)")
    return commands[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
