"""The federation of one vhost: its upstreams and upstream sets, and the
links that the policies' federation-upstream / federation-upstream-set keys
ask for (a set named "all" is every upstream, without being defined).

The vhost tells it when a policy applies to a queue or exchange, when one
is deleted, when an exchange's bindings change and when a queue gains or
loses consumers (vhost.federation, set only while the vhost has
upstreams: a vhost without federation pays nothing for it)."""
import asyncio
import logging

from lavinmq.federation.link import ExchangeLink, QueueLink
from lavinmq.federation.upstream import with_overrides

log = logging.getLogger("lavinmq.federation")


class Federation:
    def __init__(self, server, vhost):
        self.server = server
        self.vhost = vhost
        self.upstreams = {}         # name -> Upstream
        self.sets = {}              # name -> [(upstream name, overrides)]
        self.links = {}             # (kind, resource, upstream name) -> Link
        self.running = False
        self._tasks = set()

    # -- parameters ---------------------------------------------------------------------

    def set_upstream(self, upstream):
        self.upstreams[upstream.name] = upstream
        self._changed()

    def delete_upstream(self, name):
        if self.upstreams.pop(name, None) is not None:
            self._changed()

    def set_set(self, name, entries):
        self.sets[name] = entries
        self._changed()

    def delete_set(self, name):
        if self.sets.pop(name, None) is not None:
            self._changed()

    def _changed(self):
        self.vhost.federation = self if self.upstreams else None
        if self.running:
            self.reconcile()

    # -- what the policies ask for ---------------------------------------------------------

    def wanted(self, definition):
        """upstream name -> Upstream (set overrides applied) for a policy definition."""
        if not definition:
            return {}
        single = definition.get("federation-upstream")
        if single is not None:
            up = self.upstreams.get(single)
            return {single: up} if up is not None else {}
        set_name = definition.get("federation-upstream-set")
        if set_name is None:
            return {}
        if set_name == "all":
            return dict(self.upstreams)
        out = {}
        for name, overrides in self.sets.get(set_name, ()):
            up = self.upstreams.get(name)
            if up is not None:
                out[name] = with_overrides(up, overrides)
        return out

    def reconcile(self):
        for ex in list(self.vhost.exchanges.values()):
            self._reconcile(ex, "exchange")
        for q in list(self.vhost.queues.values()):
            self._reconcile(q, "queue")
        # links whose exchange or queue is gone
        for (kind, resource, up), link in list(self.links.items()):
            table = self.vhost.exchanges if kind == "exchange" else self.vhost.queues
            if resource not in table:
                self._drop((kind, resource, up), delete=True)

    def _reconcile(self, obj, kind):
        if kind == "exchange" and (obj.name == "" or obj.name.startswith("amq.")):
            return
        if kind == "queue" and (getattr(obj, "exclusive", False) or getattr(obj, "internal", False)):
            return
        wanted = self.wanted(getattr(obj, "effective_policy_definition", None)) if self.running else {}
        for key in [k for k in self.links if k[0] == kind and k[1] == obj.name]:
            link = self.links[key]
            if key[2] not in wanted:
                self._drop(key, delete=True)            # the policy or the upstream went
            elif link.upstream != wanted[key[2]]:
                self._drop(key, delete=False)           # changed: the upstream queue stays
        for name, upstream in wanted.items():
            key = (kind, obj.name, name)
            if key not in self.links:
                link = (ExchangeLink if kind == "exchange" else QueueLink)(self, upstream, obj.name)
                self.links[key] = link
                log.info("%s in vhost %s starting", link.name, self.vhost.name)
                link.start(after=self._stopping_for(key))      # after the link it replaces has stopped

    def _stopping_for(self, key):
        for task in self._tasks:
            if getattr(task, "link_key", None) == key and not task.done():
                return task
        return None

    def _drop(self, key, delete):
        link = self.links.pop(key)
        task = asyncio.get_running_loop().create_task(link.delete() if delete else link.stop())
        task.link_key = key
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- hooks from the vhost ---------------------------------------------------------------

    def policy_applied(self, obj, kind):
        if self.running:
            self._reconcile(obj, kind)

    def removed(self, obj, kind):
        for key in [k for k in self.links if k[0] == kind and k[1] == obj.name]:
            self._drop(key, delete=kind == "exchange")

    def bindings_changed(self, ex):
        for (kind, resource, _), link in self.links.items():
            if kind == "exchange" and resource == ex.name:
                link.bindings_changed()

    def consumers_changed(self, q):
        for (kind, resource, _), link in self.links.items():
            if kind == "queue" and resource == q.name:
                link.consumers_changed()

    # -- life ------------------------------------------------------------------------------

    def start(self):
        self.running = True
        self.reconcile()

    async def stop(self):
        """Shutdown: links disconnect; what they made upstream stays."""
        self.running = False
        self.vhost.federation = None
        links, self.links = list(self.links.values()), {}
        tasks = [asyncio.ensure_future(link.stop()) for link in links] + list(self._tasks)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def listing(self):
        return [link.to_json() for link in self.links.values()]
