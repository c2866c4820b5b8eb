"""ForgetFS's storage model without FUSE: what survives a power cut."""
import random

from tests.powerloss.model import PAGE, Model


def reboot(model, mode="drop", seed=0):
    model.rng = random.Random(seed)
    model.power_cut(mode)
    return Model(model.backing)


def content(model, path):
    node = model.lookup(path)
    return model.read(node, 0, node.size)


def test_synced_data_survives_and_unsynced_data_does_not(tmp_path):
    m = Model(str(tmp_path))
    f = m.create("/f", 0o100644)
    m.fsync_dir(m.lookup("/"))
    m.write(f, 0, b"a" * 5000)
    m.fsync(f)
    m.write(f, 5000, b"b" * 100)          # appended, never synced
    m.write(f, 10, b"X")                  # overwrite inside synced data, never synced
    assert content(m, "/f") == b"a" * 10 + b"X" + b"a" * 4989 + b"b" * 100
    m = reboot(m)
    assert content(m, "/f") == b"a" * 5000


def test_names_need_their_directory_synced(tmp_path):
    m = Model(str(tmp_path))
    m.create("/d", 0o40755, is_dir=True)
    m.fsync_dir(m.lookup("/"))
    kept = m.create("/d/kept", 0o100644)
    m.write(kept, 0, b"k")
    m.fsync(kept)
    m.fsync_dir(m.lookup("/d"))
    lost = m.create("/d/lost", 0o100644)
    m.write(lost, 0, b"l")
    m.fsync(lost)                         # its data is durable, its name is not
    m.unlink("/d/kept")                   # nor is this unlink
    m = reboot(m)
    assert sorted(m.lookup("/d").entries) == ["kept"]
    assert content(m, "/d/kept") == b"k"


def test_rename_is_durable_with_its_directory(tmp_path):
    m = Model(str(tmp_path))
    old = m.create("/defs", 0o100644)
    m.write(old, 0, b"old")
    m.fsync(old)
    m.fsync_dir(m.lookup("/"))
    new = m.create("/defs.tmp", 0o100644)
    m.write(new, 0, b"new")
    m.fsync(new)
    m.rename("/defs.tmp", "/defs")
    assert content(m, "/defs") == b"new"
    assert content(reboot(m), "/defs") == b"old"

    m = Model(str(tmp_path))
    new = m.create("/defs.tmp", 0o100644)
    m.write(new, 0, b"new")
    m.fsync(new)
    m.rename("/defs.tmp", "/defs")
    m.fsync_dir(m.lookup("/"))
    m = reboot(m)
    assert content(m, "/defs") == b"new" and sorted(m.lookup("/").entries) == ["defs"]


def test_truncate_then_extend_reads_zeros_and_syncs_as_such(tmp_path):
    m = Model(str(tmp_path))
    f = m.create("/f", 0o100644)
    m.fsync_dir(m.lookup("/"))
    m.write(f, 0, b"x" * 3 * PAGE)
    m.fsync(f)
    m.truncate(f, 100)
    m.truncate(f, 2 * PAGE)
    assert content(m, "/f") == b"x" * 100 + bytes(2 * PAGE - 100)
    m.fsync(f)
    assert content(reboot(m), "/f") == b"x" * 100 + bytes(2 * PAGE - 100)


def test_a_torn_write_keeps_a_page_aligned_prefix(tmp_path):
    m = Model(str(tmp_path))
    f = m.create("/f", 0o100644)
    m.fsync(f)
    m.fsync_dir(m.lookup("/"))
    m.write(f, 0, b"y" * (4 * PAGE))
    m = reboot(m, "torn", seed=3)
    data = content(m, "/f")
    assert 0 < len(data) < 4 * PAGE and len(data) % PAGE == 0
    assert data == b"y" * len(data)


def test_a_subset_keeps_some_pages_and_leaves_holes(tmp_path):
    m = Model(str(tmp_path))
    f = m.create("/f", 0o100644)
    m.truncate(f, 64 * PAGE)              # preallocated, like a segment
    m.fsync(f)
    m.fsync_dir(m.lookup("/"))
    for page in range(64):
        m.write(f, page * PAGE, bytes([page + 1]) * PAGE)
    m = reboot(m, "subset:0.5", seed=7)
    data = content(m, "/f")
    assert len(data) == 64 * PAGE
    kept = [p for p in range(64) if data[p * PAGE] == p + 1]
    holes = [p for p in range(64) if data[p * PAGE:(p + 1) * PAGE] == bytes(PAGE)]
    assert kept and holes and len(kept) + len(holes) == 64


def test_sync_all_is_a_clean_unmount(tmp_path):
    m = Model(str(tmp_path))
    m.create("/d", 0o40755, is_dir=True)
    f = m.create("/d/f", 0o100644)
    m.write(f, 0, b"all of it")
    m.sync_all()
    assert content(reboot(m), "/d/f") == b"all of it"
