"""A vhost's durable definitions (definitions.amqp, lavinmq.definitions'
format): replayed through the vhost's own methods at boot, appended as
declarations change, compacted from the live state when removals pile up.
Queue directories no durable queue owns are set aside at boot."""
import logging
import os
import shutil

from lavinmq import definitions as defs, store_dirs
from lavinmq.errors import ResourceError
from lavinmq.exchange import DefaultExchange, Exchange

log = logging.getLogger("lavinmq.vhost")

INTERNAL_PREFIX = "amq.delayed."    # vhost.attach_delay_queue's queues: never declared by a client


class DefinitionsStore:
    def __init__(self, vhost, syncer):
        self.vhost = vhost
        self.file = defs.DefinitionsFile(os.path.join(vhost.dir, "definitions.amqp"), syncer)

    def load(self):
        """Replay the file at boot, write back what survived, open it for appends.
        Two reads: the first finds what the log leaves standing, the second
        declares just that (defs.live_frames says why no removal is replayed)."""
        live = defs.live_frames(self.file.frames())
        for i, (key, args) in enumerate(self.file.frames()):
            if i not in live:
                continue
            try:
                self._replay(key, args)
            except Exception as exc:
                log.warning("vhost %s: skipping definition %s %r: %s", self.vhost.name, key, args, exc)
        # what survived is written back compactly: replays stop growing the file
        try:
            self.file.rewrite(self.live_frames())
        except OSError as exc:      # e.g. a full disk: the file as read is still good
            log.warning("vhost %s: definitions not compacted: %s", self.vhost.name, exc)
        self._set_aside_orphans()
        self.file.open()

    def _set_aside_orphans(self):
        """Queue directories that no durable queue owns (a definition lost
        to a bug or a damaged file) are reported and moved out of the way to
        orphaned/, never silently deleted: they may hold the only copy of
        confirmed messages."""
        swept = store_dirs.sweep(self.vhost.dir)
        if swept:
            log.info("vhost %s: removed %d directories of queues deleted before a crash", self.vhost.name, swept)
        owned = {os.path.basename(q.store.dir) for q in self.vhost.queues.values()}
        owned.update(os.path.basename(ex.persist.store.dir) for ex in self.vhost.exchanges.values()
                     if ex.persist is not None)
        try:
            entries = os.listdir(self.vhost.dir)
        except OSError:
            return
        for entry in entries:
            if len(entry) != 40 or entry in owned or not all(c in "0123456789abcdef" for c in entry):
                continue
            path = os.path.join(self.vhost.dir, entry)
            if not os.path.isdir(path):
                continue
            segments = [f for f in os.listdir(path) if f.startswith("msgs.")]
            if not segments:
                shutil.rmtree(path, ignore_errors=True)
                log.warning("vhost %s: removed empty queue directory %s that no queue owns", self.vhost.name, entry)
                continue
            dest = os.path.join(self.vhost.dir, "orphaned", entry)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            os.replace(path, dest)
            log.error("vhost %s: queue directory %s (%d segment files) belongs to no queue: moved to %s",
                      self.vhost.name, entry, len(segments), dest)

    def _replay(self, key, args):
        """One standing declaration or binding (never a removal)."""
        vhost = self.vhost
        if key == defs.EXCHANGE_DECLARE:
            _, name, type_name, _, durable, auto_delete, internal, _, arguments = args
            vhost.declare_exchange(name, type_name, durable, auto_delete, internal, arguments, persist=False)
        elif key == defs.QUEUE_DECLARE:
            _, name, _, durable, exclusive, auto_delete, _, arguments = args
            if name.startswith(INTERNAL_PREFIX):
                # a delayed exchange's store, written by a compaction of an
                # older version: it comes back with its exchange (or not at all)
                return
            vhost.declare_queue(name, durable, None, auto_delete, arguments, persist=False)
        elif key == defs.QUEUE_BIND:
            _, queue, exchange, rk, _, arguments = args
            vhost.bind_queue(queue, exchange, rk, arguments, persist=False)
        elif key == defs.EXCHANGE_BIND:
            _, dest, src, rk, _, arguments = args
            vhost.bind_exchange(dest, src, rk, arguments, persist=False)

    def live_frames(self):
        """The frames that declare what is durable now (a compacted file)."""
        vhost = self.vhost
        out = []
        for ex in vhost.exchanges.values():
            if ex.durable and not isinstance(ex, DefaultExchange) and not ex.name.startswith("amq."):
                out.append((defs.EXCHANGE_DECLARE, (0, ex.name, ex.type, False, True, ex.auto_delete,
                                                    ex.internal, False, ex.arguments)))
        for q in vhost.queues.values():
            if q.durable and not q.exclusive and not getattr(q, "internal", False):
                out.append((defs.QUEUE_DECLARE, (0, q.name, False, True, False, q.auto_delete, False,
                                                 q.arguments)))
        for ex in vhost.exchanges.values():
            for b in ex.bindings.values():
                if vhost.binding_durable(ex, b.destination):
                    if isinstance(b.destination, Exchange):
                        out.append((defs.EXCHANGE_BIND, (0, b.destination.name, ex.name, b.routing_key,
                                                         False, b.arguments)))
                    else:
                        out.append((defs.QUEUE_BIND, (0, b.destination.name, ex.name, b.routing_key,
                                                      False, b.arguments)))
        return out

    def append(self, key, args):
        """On disk before it is live: a declare-ok never outruns its definition."""
        try:
            self.file.append(key, args)
        except OSError as exc:
            raise ResourceError(f"cannot store the definition: {exc.strerror or exc}", *key) from None

    def compact_if_needed(self):
        """After a removal has changed the live state (never before: the
        rewrite is made from it)."""
        if self.file.needs_compaction():
            try:
                self.file.rewrite(self.live_frames())
            except OSError as exc:
                log.warning("vhost %s: definitions not compacted: %s", self.vhost.name, exc)

    def close(self):
        self.file.close()
