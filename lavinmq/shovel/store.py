"""The shovels of one vhost, made from its `shovel` parameters. A paused
shovel stays paused across restarts: a file in the vhost's directory says
so (LavinMQ's shovels.<sha1 of the name>.paused)."""
import asyncio
import hashlib
import logging
import os

from lavinmq.shovel.runner import Shovel

log = logging.getLogger("lavinmq.shovel")


class ShovelStore:
    def __init__(self, server, vhost, on_finished):
        self.server = server
        self.vhost = vhost
        self.shovels = {}
        self.on_finished = on_finished      # (name): a src-delete-after shovel is done
        self._stopping = set()              # tasks of shovels being stopped

    def __iter__(self):
        return iter(list(self.shovels.values()))

    def get(self, name):
        return self.shovels.get(name)

    def paused_path(self, name):
        return os.path.join(self.vhost.dir, f"shovels.{hashlib.sha1(name.encode()).hexdigest()}.paused")

    def _stop_task(self, shovel, state="terminated"):
        task = asyncio.get_running_loop().create_task(shovel.stop(state))
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)
        return task

    def define(self, name, config):
        """A new or changed definition: (re)start it, after the old one
        has stopped (its exclusive consumer would refuse the new one)."""
        old = self.shovels.get(name)
        after = self._stop_task(old) if old is not None else None
        shovel = self.shovels[name] = Shovel(self, name, config)
        if os.path.exists(self.paused_path(name)):
            shovel.state = "paused"
        else:
            shovel.start(after)
        return shovel

    def remove(self, name):
        shovel = self.shovels.pop(name, None)
        try:
            os.unlink(self.paused_path(name))
        except FileNotFoundError:
            pass
        if shovel is not None:
            return self._stop_task(shovel)
        return None

    def pause(self, name):
        shovel = self.shovels[name]
        with open(self.paused_path(name), "w") as f:
            f.write(name)
        log.info("shovel %s in vhost %s paused", name, self.vhost.name)
        shovel.state = "paused"
        return self._stop_task(shovel, "paused")

    def resume(self, name):
        shovel = self.shovels[name]
        try:
            os.unlink(self.paused_path(name))
        except FileNotFoundError:
            pass
        log.info("shovel %s in vhost %s resumed", name, self.vhost.name)
        shovel.start()

    def restart(self, name):
        """Reconnect now (RabbitMQ's restart): a paused shovel stays paused."""
        shovel = self.shovels[name]
        if shovel.state == "paused":
            return
        self.define(name, shovel.config)

    def finished(self, shovel):
        if self.shovels.get(shovel.name) is shovel:
            del self.shovels[shovel.name]
            self.on_finished(shovel.name)

    async def stop_all(self):
        tasks = [self._stop_task(s) for s in self.shovels.values()]
        tasks += list(self._stopping)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
