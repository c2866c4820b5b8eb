"""The data directory's lock: one broker per data directory.

flock(2) on <data_dir>/.lock, which also holds the owner's pid for the error
message. The kernel drops the lock when the process dies, however it dies,
so a stale file never blocks a restart. The file itself is never deleted:
unlinking it while another process waits on the old inode would let two
brokers each hold "the" lock."""
import fcntl
import os

from lavinmq.errors import ConfigError


class DataDirLock:
    def __init__(self, data_dir):
        self.data_dir = data_dir
        self.path = os.path.join(data_dir, ".lock")
        self.fd = None

    @property
    def locked(self) -> bool:
        return self.fd is not None

    def check_free(self):
        """ConfigError when another process holds the lock; creates and
        writes nothing (a missing directory or lock file is free)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            raise ConfigError(f"data directory {self.data_dir} (--data-dir / [main] data_dir) is locked by "
                              f"another lavinmq process (pid {pid})") from None
        except OSError:
            return          # acquire() says what is wrong
        finally:
            os.close(fd)    # drops the shared lock, if it was had

    def acquire(self) -> "DataDirLock":
        if self.fd is not None:
            return self
        try:
            # not inherited by children (Python's default), so a spawned
            # process can't keep the lock after we exit
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ConfigError(f"cannot create lock file {self.path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ConfigError(f"data directory {self.data_dir} (--data-dir / [main] data_dir) is locked by "
                              f"another lavinmq process (pid {pid})") from None
        except OSError as exc:
            os.close(fd)
            raise ConfigError(f"cannot lock {self.path}: {exc.strerror}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd
        return self

    def release(self):
        if self.fd is None:
            return
        try:
            os.ftruncate(self.fd, 0)   # while still locked: no stale pid left behind
        except OSError:
            pass
        os.close(self.fd)               # closing the last fd drops the flock
        self.fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
