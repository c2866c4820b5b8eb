"""A ForgetFS mount as a test resource: start the daemon on a backing
directory, cut the power, "reboot" (a new daemon on the same backing
directory)."""
import ctypes
import ctypes.util
import os
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
