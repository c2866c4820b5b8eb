"""Runtime parameters (RabbitMQ's and LavinMQ's /api/parameters): per vhost,
kept in parameters.json in the vhost's directory as LavinMQ keeps them
([{"component", "name", "value"}]), and applied by their component:
`shovel` (lavinmq.shovel), `federation-upstream` and
`federation-upstream-set` (lavinmq.federation).

A value is checked by its component before it is stored, so a stored
parameter always applies; a broken parameters.json is reported and left in
place (renamed aside), never half-applied."""
import logging
import os

import orjson

from lavinmq.sync import replace_file

log = logging.getLogger("lavinmq.parameters")

FILE = "parameters.json"


class ParameterError(ValueError):
    """A value its component refuses (400)."""


def check(component, name, value, user=None):
    """The value as its component takes it; ParameterError (400) or
    PermissionError (403) says why not. user: who sets it (None: the broker
    itself, e.g. at boot)."""
    if not isinstance(name, str) or not name or len(name.encode("utf-8", "surrogateescape")) > 255:
        raise ParameterError("a parameter name must be a string of 1 to 255 bytes")
    if component == "shovel":
        from lavinmq.shovel.config import ShovelConfigError, check as check_shovel, check_access
        try:
            cfg = check_shovel(value)
        except ShovelConfigError as exc:
            raise ParameterError(str(exc)) from None
        check_access(cfg, user)
        return cfg
    if component in ("federation-upstream", "federation-upstream-set"):
        from lavinmq.federation.upstream import UpstreamError, check_set, check_upstream
        try:
            return check_upstream(name, value) if component == "federation-upstream" else check_set(value)
        except UpstreamError as exc:
            raise ParameterError(str(exc)) from None
    raise ParameterError(f"component {component!r} is not supported (shovel, federation-upstream, "
                         f"federation-upstream-set are)")


class ParameterStore:
    """component -> name -> value, in one file."""

    def __init__(self, directory):
        self.path = os.path.join(directory, FILE)
        self.values = {}
        try:
            with open(self.path, "rb") as f:
                entries = orjson.loads(f.read())
            for e in entries:
                self.values.setdefault(e["component"], {})[e["name"]] = e["value"]
        except FileNotFoundError:
            pass
        except (ValueError, KeyError, TypeError) as exc:
            aside = self.path + ".broken"
            os.replace(self.path, aside)
            log.error("%s is damaged (%s): moved to %s, no parameters loaded", self.path, exc, aside)
            self.values = {}

    def items(self, component=None):
        for comp, named in self.values.items():
            if component is None or comp == component:
                for name, value in named.items():
                    yield comp, name, value

    def get(self, component, name):
        return self.values.get(component, {}).get(name)

    def set(self, component, name, value):
        self.values.setdefault(component, {})[name] = value
        self.save()

    def delete(self, component, name):
        named = self.values.get(component, {})
        if name not in named:
            return False
        del named[name]
        if not named:
            del self.values[component]
        self.save()
        return True

    def save(self):
        data = orjson.dumps([{"component": c, "name": n, "value": v} for c, n, v in self.items()],
                            option=orjson.OPT_INDENT_2)
        replace_file(self.path, data)


class VHostParameters:
    """The parameters of one vhost and what they run."""

    def __init__(self, server, vhost):
        from lavinmq.federation.manager import Federation
        from lavinmq.shovel.store import ShovelStore
        self.server = server
        self.vhost = vhost
        self.store = ParameterStore(vhost.dir)
        self.shovels = ShovelStore(server, vhost, self._shovel_finished)
        self.federation = Federation(server, vhost)

    def check(self, component, name, value, user=None):
        return check(component, name, value, user)

    # -- changes ------------------------------------------------------------------------

    def set(self, component, name, value, user=None):
        """-> True if it replaced a value."""
        checked = self.check(component, name, value, user)
        existed = self.store.get(component, name) is not None
        self.store.set(component, name, value)
        self._apply(component, name, checked)
        return existed

    def delete(self, component, name):
        if not self.store.delete(component, name):
            return False
        if component == "shovel":
            self.shovels.remove(name)
        elif component == "federation-upstream":
            self.federation.delete_upstream(name)
        elif component == "federation-upstream-set":
            self.federation.delete_set(name)
        return True

    def _apply(self, component, name, checked):
        if component == "shovel":
            self.shovels.define(name, checked)
        elif component == "federation-upstream":
            self.federation.set_upstream(checked)
        elif component == "federation-upstream-set":
            self.federation.set_set(name, checked)

    def _shovel_finished(self, name):
        self.store.delete("shovel", name)

    def start(self):
        """At boot: what the stored parameters define starts running."""
        for component, name, value in list(self.store.items()):
            try:
                self._apply(component, name, self.check(component, name, value))
            except (ParameterError, PermissionError) as exc:
                log.error("vhost %s: parameter %s/%s not applied: %s", self.vhost.name, component, name, exc)
        self.federation.start()

    async def stop(self):
        await self.shovels.stop_all()
        await self.federation.stop()

    def listing(self, component=None):
        return [{"name": n, "vhost": self.vhost.name, "component": c, "value": v}
                for c, n, v in self.store.items(component)]

    def restore(self, component, name, value):
        """Undo of an import: the value back as it was (None: none)."""
        if value is None:
            self.delete(component, name)
        else:
            self.set(component, name, value)


class Parameters:
    """The server's: one VHostParameters per vhost, started once the broker runs."""

    def __init__(self, server):
        self.server = server
        self.vhosts = {}
        self.running = False

    def of(self, vhost):
        vp = self.vhosts.get(vhost.name)
        if vp is None or vp.vhost is not vhost:
            vp = self.vhosts[vhost.name] = VHostParameters(self.server, vhost)
            if self.running:
                vp.start()
        return vp

    def start(self):
        for vhost in list(self.server.vhosts.values()):
            self.of(vhost)
        self.running = True
        for vp in list(self.vhosts.values()):
            vp.start()

    def vhost_deleted(self, name):
        vp = self.vhosts.pop(name, None)
        if vp is not None:
            import asyncio
            asyncio.get_running_loop().create_task(vp.stop())

    async def stop(self):
        self.running = False
        for vp in list(self.vhosts.values()):
            await vp.stop()
