"""The broker's vhosts, and vhosts.json that lists them (name, directory,
limits): read at start, written atomically when a vhost is added or removed
or its limits change. A dict of name -> VHost to everything that reads it."""
import os
import shutil

import orjson

from lavinmq.clustering import changes
from lavinmq.sync import fsync_dir
from lavinmq.vhost import VHost, sha1


class VHostStore(dict):
    def __init__(self, config, syncer):
        super().__init__()
        self.config = config
        self.syncer = syncer
        self.path = os.path.join(config.data_dir, "vhosts.json")

    def load(self):
        try:
            with open(self.path, "rb") as f:
                entries = orjson.loads(f.read())
        except FileNotFoundError:
            entries = [{"name": "/"}]
        for entry in entries:
            vhost = self[entry["name"]] = self._new(entry["name"])
            vhost.set_limits(entry.get("limits") or {})
        self.save()

    def _new(self, name):
        vhost = VHost(name, self.config.data_dir, self.config.segment_size, self.syncer,
                      consumer_timeout=getattr(self.config, "consumer_timeout", None),
                      consistent_hash_algorithm=getattr(self.config, "default_consistent_hash_algorithm", "ring"))
        vhost.policies.max_instructions = self.config.max_policy_instructions
        vhost.max_dedup_cache_size = self.config.max_deduplication_cache_size
        vhost.definitions.file.compact_after = getattr(self.config, "max_deleted_definitions", 8192)
        return vhost

    def add(self, name):
        if name not in self:
            self[name] = self._new(name)
            self.save()
        return self[name]

    def remove(self, name):
        """-> the closed vhost, its directory removed; None if there was none."""
        vhost = self.pop(name, None)
        if vhost is not None:
            vhost.close()
            shutil.rmtree(vhost.dir, ignore_errors=True)
            changes.removed(vhost.dir)
            self.save()
        return vhost

    def set_limits(self, name, limits):
        """max-connections / max-queues, as RabbitMQ's vhost limits; a
        negative value removes the limit."""
        self[name].set_limits(limits)
        self.save()

    def save(self):
        data = orjson.dumps([{"name": n, "dir": sha1(n), "limits": v.limits} for n, v in self.items()],
                            option=orjson.OPT_INDENT_2)
        try:
            with open(self.path, "rb") as f:
                if f.read() == data:
                    return      # unchanged (every start): nothing to write, also on a full disk
        except FileNotFoundError:
            pass
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fsync_dir(self.config.data_dir)    # the rename, and new vhost directories
        changes.changed(self.path)

    def unmap_idle(self):
        for vhost in self.values():
            vhost.unmap_idle()
