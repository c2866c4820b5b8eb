"""ForgetFS mounted for real: the kernel's page cache above it, shared
writable mmap through it, and a power cut that only synced data survives."""
import ctypes
import mmap
import os

from tests.powerloss.mount import syncfs

SEGMENT = 1 << 20


def fsync_path(path, directory=False):
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd) if directory else os.fdatasync(fd)
    finally:
        os.close(fd)


def test_mmap_writes_survive_only_when_synced(forget_mount):
    mnt = forget_mount.mountpoint
    os.makedirs(os.path.join(mnt, "q"))
    path = os.path.join(mnt, "q", "seg")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, SEGMENT)            # preallocated like a segment
    os.pwrite(fd, b"HDR!", 0)
    m = mmap.mmap(fd, SEGMENT)
    os.close(fd)                         # the map keeps the file, as the broker's do
    m[4:9004] = b"a" * 9000              # spans pages
    m[500000:500005] = b"bbbbb"
    fsync_path(path)
    fsync_path(os.path.join(mnt, "q"), directory=True)
    fsync_path(mnt, directory=True)
    m[9004:9010] = b"unsync"             # never synced...
    syncfs(mnt)                          # ...though written back to the daemon
    with open(os.path.join(mnt, "q", "acks"), "ab") as f:
        f.write(b"\x01\x00\x00\x00")     # a new file, name never synced
    assert m[9004:9010] == b"unsync"
    stats = forget_mount.stats()
    assert '"fsyncs": 1' in stats and '"fsyncdirs": 2' in stats

    forget_mount.cut("drop")
    m.close()
    forget_mount.reboot()
    assert sorted(os.listdir(os.path.join(mnt, "q"))) == ["seg"]
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) == SEGMENT
    assert data[:9004] == b"HDR!" + b"a" * 9000
    assert data[9004:9010] == bytes(6)
    assert data[500000:500005] == b"bbbbb"


def test_syncfs_is_not_durable_through_fuse(forget_mount):
    # the kernel forwards syncfs(2) to virtiofs only: a FUSE daemon sees the
    # writeback but no request to persist it, so ForgetFS cannot honour it
    mnt = forget_mount.mountpoint
    with open(os.path.join(mnt, "f"), "wb") as f:
        f.write(b"data")
    fsync_path(os.path.join(mnt, "f"))
    fsync_path(mnt, directory=True)
    with open(os.path.join(mnt, "f"), "ab") as f:
        f.write(b" and more")
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
    assert libc.syncfs(fd) == 0
    os.close(fd)
    forget_mount.cut("drop")
    forget_mount.reboot()
    with open(os.path.join(mnt, "f"), "rb") as f:
        assert f.read() == b"data"


def test_clean_unmount_keeps_everything(forget_mount):
    mnt = forget_mount.mountpoint
    os.makedirs(os.path.join(mnt, "d"))
    with open(os.path.join(mnt, "d", "f"), "wb") as f:
        f.write(b"x" * 10000)
    os.rename(os.path.join(mnt, "d", "f"), os.path.join(mnt, "d", "g"))
    forget_mount.stop()
    forget_mount.start()
    with open(os.path.join(mnt, "d", "g"), "rb") as f:
        assert f.read() == b"x" * 10000
