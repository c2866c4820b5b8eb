"""The control plane of an exchange: its bindings as Python objects (for
the management API and definitions), mirrored into the type's Cython
matcher, which is all a publish touches."""
from lavinmq._core.routing import Exchange as CoreExchange
from lavinmq.errors import PreconditionFailed


def freeze(value):
    """A hashable, order-independent form of binding arguments."""
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return value


class Binding:
    __slots__ = ("source", "destination", "routing_key", "arguments", "key")

    def __init__(self, source, destination, routing_key, arguments):
        self.source = source
        self.destination = destination
        self.routing_key = routing_key
        self.arguments = arguments or {}
        self.key = (destination, routing_key, freeze(self.arguments))


def bind_error(destination, text):
    """PRECONDITION_FAILED on queue.bind or exchange.bind, whichever it was."""
    if isinstance(destination, CoreExchange):
        return PreconditionFailed(text, 40, 30)
    return PreconditionFailed(text, 50, 20)


def encode_key(routing_key):
    return routing_key.encode("utf-8", "surrogateescape")


class Exchange(CoreExchange):
    type = ""
    # Binding.key -> its replay (lavinmq.exchange.persistent): bindings of a
    # persistent exchange that are declared but route nothing until their
    # copy of the stored messages has caught up (None: there are none)
    held = None

    def __init__(self, vhost, name, durable=True, auto_delete=False, internal=False, arguments=None):
        self.vhost = vhost
        self.name = name
        self.name_bytes = name.encode("utf-8", "surrogateescape")
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.arguments = arguments or {}
        self.version = vhost.routing_version
        self.bindings = {}          # Binding.key -> Binding
        self.matcher = self.make_matcher()
        self._alternate_from_arguments()

    def make_matcher(self):
        raise NotImplementedError

    def _alternate_from_arguments(self):
        # RabbitMQ's argument name, and LavinMQ's x- spelling of it
        for key in ("alternate-exchange", "x-alternate-exchange"):
            name = self.arguments.get(key)
            if name is None:
                continue
            if isinstance(name, bytes):
                name = name.decode("utf-8", "surrogateescape")
            if not isinstance(name, str):
                raise PreconditionFailed(f"invalid arg '{key}' for exchange '{self.name}': "
                                         f"expected a string, got {name!r}", 40, 10)
            self.set_alternate_argument(name)
            return

    # -- bindings ------------------------------------------------------------

    def bind(self, destination, routing_key, arguments):
        b = Binding(self, destination, routing_key, arguments)
        if b.key in self.bindings:
            return False
        self._add(b)                # may refuse the binding (bad arguments)
        self.bindings[b.key] = b
        self.version.bump()
        self._bindings_changed()
        return True

    def unbind(self, destination, routing_key, arguments):
        key = (destination, routing_key, freeze(arguments or {}))
        b = self.bindings.get(key)
        if b is None:
            return False
        if not self._drop_held(key):
            self._remove(b)
        del self.bindings[key]
        self.version.bump()
        self._bindings_changed()
        return True

    def remove_destination(self, destination):
        for key in [k for k in self.bindings if k[0] is destination]:
            b = self.bindings.pop(key)
            if not self._drop_held(key):
                self._remove(b)
        self.version.bump()
        self._bindings_changed()

    def _bindings_changed(self):
        # a federated exchange mirrors its bindings upstream (lavinmq.federation)
        federation = getattr(self.vhost, "federation", None)
        if federation is not None:
            federation.bindings_changed(self)

    def clear_bindings(self):
        """The exchange is deleted: drop every binding (and the matcher's
        references to its destinations)."""
        for key in list(self.held or ()):
            self._drop_held(key)
        self.matcher.clear()
        self.bindings.clear()

    # -- bindings that wait for a replay -----------------------------------------

    def replay_matcher(self, binding):
        """A matcher with this binding alone: which stored messages it takes.
        Also checks the binding as bind() would."""
        m = self.make_matcher()
        self._add(binding, m)
        return m

    def bind_held(self, destination, routing_key, arguments):
        """Declare a binding that routes nothing yet. -> (Binding, its
        replay matcher), or None when the binding exists."""
        b = Binding(self, destination, routing_key, arguments)
        if b.key in self.bindings:
            return None
        matcher = self.replay_matcher(b)        # may refuse the binding (bad arguments)
        self.bindings[b.key] = b
        if self.held is None:
            self.held = {}
        self.held[b.key] = None
        self.version.bump()
        return b, matcher

    def set_replay(self, binding, replay):
        if self.held is not None and binding.key in self.held:
            self.held[binding.key] = replay

    def release_held(self, binding):
        """The binding's replay has caught up: it routes from now on."""
        if not self.held or binding.key not in self.held or self.bindings.get(binding.key) is not binding:
            return False
        del self.held[binding.key]
        self._add(binding)
        self.version.bump()
        return True

    def _drop_held(self, key):
        """The held binding goes (unbind, its queue or this exchange
        deleted): its replay stops. -> whether it was held."""
        if not self.held or key not in self.held:
            return False
        replay = self.held.pop(key)
        if replay is not None:
            replay.cancel()
        return True

    def _add(self, binding):
        raise NotImplementedError

    def _remove(self, binding):
        raise NotImplementedError

    @staticmethod
    def is_exchange(destination):
        return isinstance(destination, CoreExchange)

    def __repr__(self):
        return f"<{type(self).__name__} {self.name!r}>"

    def __hash__(self):
        return id(self)
