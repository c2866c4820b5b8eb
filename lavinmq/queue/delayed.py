"""The delay queue of an x-delayed-message exchange (LavinMQ shows it as
the internal queue amq.delayed.<exchange>): the control half over
`_core.delayed.DelayQueue`. Clients cannot consume from it, bind it, or
publish to it by name; it goes with its exchange."""
from lavinmq._core.delayed import DelayQueue


class DelayedMessages(DelayQueue):
    internal = True
    exclusive = False
    exclusive_owner = None
    auto_delete = False
    direct_reply = False

    def __init__(self, vhost, exchange, store):
        super().__init__("amq.delayed." + exchange.name, vhost, store)
        self.exchange = exchange
        self.durable = exchange.durable
        self.arguments = {}
        self.policy = None
        self.operator_policy = None
        self.effective_policy_definition = {}
        self.had_consumers = False
        self.load()

    def apply_effective(self, *args):
        """Policies do not apply to it."""

    def touch(self):
        pass

    def stop(self):
        self.stop_timer()

    def __hash__(self):
        return id(self)

    def __repr__(self):
        return f"<DelayedMessages {self.name!r} delayed={self.message_count}>"
