"""The classic queue: the control half over `_core.queue.Queue`."""
from lavinmq._core.queue import Queue as CoreQueue
from lavinmq.args import check_equivalent


class Queue(CoreQueue):

    def __init__(self, vhost, name, store, durable=True, exclusive_owner=None,
                 auto_delete=False, arguments=None):
        super().__init__(name, vhost, store)
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments = arguments or {}
        self.had_consumers = False

    @property
    def exclusive(self):
        return self.exclusive_owner is not None

    def check_equivalent(self, durable, auto_delete, arguments):
        # exclusivity is checked by the vhost (405, not 406), as RabbitMQ does
        check_equivalent("queue", self.name, self.vhost.name,
                         (("durable", self.durable, durable), ("auto_delete", self.auto_delete, auto_delete)),
                         self.arguments, arguments, 50)

    def add_consumer(self, consumer):
        self.had_consumers = True
        super().add_consumer(consumer)

    def __hash__(self):
        return id(self)

    def __repr__(self):
        return f"<Queue {self.name!r} ready={self.message_count} consumers={self.consumer_count}>"
