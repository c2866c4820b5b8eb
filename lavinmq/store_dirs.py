"""A deleted queue's (or exchange's) directory: renamed aside in one step,
then removed. The name is free again at once, so a queue declared again
under the same name starts in a directory of its own, and a removal cut
short by a crash leaves a tombstone that the next boot sweeps, never a
half-emptied directory under a live queue's name."""
import logging
import os
import secrets
import shutil

log = logging.getLogger("lavinmq.store")

TOMBSTONE = ".deleted."     # <sha1>.deleted.<hex>: what remove() leaves while it works


def remove(path):
    """Rename `path` aside, then remove it and everything in it."""
    aside = f"{path}{TOMBSTONE}{secrets.token_hex(4)}"
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    except OSError as exc:      # e.g. a read-only file system: remove it where it is
        log.warning("could not rename %s aside (%s): removing it in place", path, exc)
        aside = path
    shutil.rmtree(aside, ignore_errors=True)


def sweep(parent):
    """Remove the tombstones a crash left in `parent` (a vhost's directory):
    their queues were deleted before the crash. -> how many."""
    try:
        entries = os.listdir(parent)
    except OSError:
        return 0
    n = 0
    for entry in entries:
        if TOMBSTONE in entry:
            shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)
            n += 1
    return n
