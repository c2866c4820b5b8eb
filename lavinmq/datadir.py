"""The data directory's lock: one broker per data directory."""
import fcntl
import os

from lavinmq.errors import ConfigError


class DataDirLock:
    def __init__(self, data_dir):
        self.path = os.path.join(data_dir, ".lock")
        self.fd = None

    def acquire(self):
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise ConfigError(f"data directory {os.path.dirname(self.path)} is locked by another "
                              f"lavinmq process (pid {pid})") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self.fd = fd
        return self

    def release(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
