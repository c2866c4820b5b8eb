"""A ForgetFS mount as a test resource: start the daemon on a backing
directory, cut the power, "reboot" (a new daemon on the same backing
directory)."""
import ctypes
import ctypes.util
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MNT_DETACH = 2

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def unavailable_reason():
    """Why ForgetFS cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (mount(2) of a FUSE filesystem)"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if ctypes.util.find_library("fuse3") is None:
        return "libfuse3 is not installed (Debian package fuse3)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"mfusepy is not usable: {exc}"
    return None


def lazy_unmount(path):
    if _libc.umount2(os.fsencode(path), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (22, 2):      # EINVAL: not mounted; ENOENT
            raise OSError(err, os.strerror(err), path)


def syncfs(path):
    """The kernel's writeback of everything dirty under path (what its
    flusher threads do every few seconds). FUSE passes no syncfs request on,
    so this only moves data into the daemon, it does not make it durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _libc.syncfs(fd)
    finally:
        os.close(fd)


class ForgetMount:
    def __init__(self, backing, mountpoint, log_path=None):
        self.backing = str(backing)
        self.mountpoint = str(mountpoint)
        self.log_path = log_path or self.backing + ".log"
        self.proc = None
        self.control = os.path.join(self.mountpoint, ".forgetfs")
        os.makedirs(self.backing, exist_ok=True)
        os.makedirs(self.mountpoint, exist_ok=True)

    def start(self, timeout=20):
        lazy_unmount(self.mountpoint)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.powerloss.forgetfs",
                                      self.backing, self.mountpoint],
                                     stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"forgetfs exited with {self.proc.returncode}: {self.log_tail()}")
            if os.path.exists(self.control):
                return self
            time.sleep(0.02)
        raise RuntimeError(f"forgetfs did not mount in {timeout}s: {self.log_tail()}")

    def command(self, text):
        with open(self.control, "w") as f:
            f.write(text)

    def stats(self):
        with open(self.control) as f:
            return f.read()

    def cut(self, mode="drop", seed=0):
        """Lose power: the daemon keeps what `mode` lets through and dies;
        the kernel aborts the mount. Call reboot() (after killing whatever
        used the mount) to get the surviving state mounted again."""
        try:
            self.command(f"cut {mode} {seed}")
        except OSError:
            pass            # the daemon died while answering: that is the point
        self.proc.wait(10)

    def reboot(self):
        lazy_unmount(self.mountpoint)
        return self.start()

    def stop(self):
        """Clean unmount (everything written becomes durable)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            subprocess.run(["umount", self.mountpoint], check=False, capture_output=True)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        lazy_unmount(self.mountpoint)

    def log_tail(self, n=30):
        try:
            with open(self.log_path, "rb") as f:
                return "\n".join(f.read().decode(errors="replace").splitlines()[-n:])
        except FileNotFoundError:
            return ""


def loop_unavailable_reason():
    """Why Ext4OnForget cannot run here, or None."""
    reason = unavailable_reason()
    if reason is not None:
        return reason
    if not os.path.exists("/dev/loop-control"):
        return "no loop devices (/dev/loop-control)"
    for tool in ("losetup", "mkfs.ext4", "e2fsck"):
        if shutil.which(tool, path="/usr/sbin:/sbin:/usr/bin:/bin") is None:
            return f"{tool} is not installed"
    return None


class Ext4OnForget:
    """A real ext4 on a disk whose write cache loses what was not flushed.

    The disk is a loop device over an image file on ForgetFS. The loop driver
    passes each block write on to the file as a write (ForgetFS keeps it,
    volatile) and each cache flush (REQ_PREFLUSH: what fdatasync and a
    journal commit send) as an fsync of the file, which makes every write
    that completed before it durable. So the kernel's ext4 runs as it would
    on a disk with a volatile cache, and a cut loses what such a disk would.
    ForgetFS alone models each file's fsync on its own; this is what tests
    the settled commits (lavinmq/_core/flusher.pyx), which rely on one
    file's fdatasync flushing the cache for another file's completed write."""

    SIZE = 256 << 20

    def __init__(self, workdir, log_path=None):
        self.forget = ForgetMount(os.path.join(workdir, "backing"), os.path.join(workdir, "mnt"),
                                  log_path=log_path)
        self.mountpoint = os.path.join(workdir, "ext4")
        self.image = os.path.join(self.forget.mountpoint, "disk.img")
        self.device = None
        self.fsck_log = []          # what e2fsck found after each cut
        os.makedirs(self.mountpoint, exist_ok=True)

    def start(self):
        self.forget.start()
        if not os.path.exists(self.image):
            with open(self.image, "wb") as f:
                f.truncate(self.SIZE)
            _run("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=1,lazy_journal_init=1", self.image)
            self.forget.command("sync")
        self._attach()
        return self

    def _attach(self):
        self.device = _run("losetup", "--find", "--show", self.image).strip()
        _run("mount", "-t", "ext4", self.device, self.mountpoint)

    def _detach(self):
        """ext4 unmounted and the loop device let go; after a cut their
        writes fail (the disk is gone), which is what a dead machine does."""
        subprocess.run(["umount", self.mountpoint], capture_output=True)
        lazy_unmount(self.mountpoint)
        if self.device is not None:
            subprocess.run(["losetup", "-d", self.device], capture_output=True)
            self.device = None

    def cut(self, mode="drop", seed=0):
        self.forget.cut(mode, seed)

    def command(self, text):
        self.forget.command(text)

    def reboot(self):
        """Power back: the disk as it survived, checked as a boot would
        (e2fsck -p replays the journal and fixes only what is safe to fix;
        anything worse fails the run), then mounted."""
        self._detach()
        self.forget.reboot()
        proc = subprocess.run(["e2fsck", "-p", self.image], capture_output=True, text=True)
        self.fsck_log.append((proc.returncode, (proc.stdout + proc.stderr)[-2000:]))
        if proc.returncode >= 4:
            raise RuntimeError(f"e2fsck -p exited {proc.returncode}: {proc.stdout}{proc.stderr}")
        self._attach()
        return self

    def stop(self):
        self._detach()
        self.forget.stop()

    def log_tail(self, n=30):
        return self.forget.log_tail(n)


def _run(*cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


_SYNC_FILE_RANGE_WRITE = 2
_libc.sync_file_range.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]


def write_back_files(root):
    """The kernel's background writeback of every file under root: dirty
    pages written to the disk, no cache flush (syncfs would send one)."""
    for directory, _, names in os.walk(root):
        for name in names:
            try:
                fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            except OSError:
                continue        # gone meanwhile
            try:
                _libc.sync_file_range(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)
            finally:
                os.close(fd)
