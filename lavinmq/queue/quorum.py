"""Quorum queues (`x-queue-type: quorum`), as Celery and RabbitMQ 4 use them.

A quorum queue here is the classic queue's machinery with RabbitMQ's rules
for the kind; nothing of it runs per message beyond what a classic queue
with the same settings pays:

- Declaration: durable, not exclusive, not auto-delete, never server-named,
  and without the arguments of other kinds (x-max-priority, x-queue-mode,
  x-queue-version, x-max-age, the stream ones). The refusals are RabbitMQ's
  (3.10's reply texts, checked against Debian's rabbitmq-server 3.10 in the
  same order: server-named, argument values, other kinds' arguments,
  auto-delete, exclusive, durable).
- Delivery limit: RabbitMQ 4's. Unset, it is DEFAULT_DELIVERY_LIMIT (20);
  a negative x-delivery-limit turns it off (with a policy's delivery-limit
  the policy's applies, as RabbitMQ 4 resolves a negative argument against a
  policy). Past it a message is dead-lettered with reason delivery_limit, or
  dropped without a dead-letter exchange. Every delivery that had to be
  settled counts (a reject or nack with requeue, and a requeue when the
  channel or connection goes), as in RabbitMQ 3.x and LavinMQ; redeliveries
  carry x-delivery-count (the deliveries before this one). The counts
  outlive a restart (requeued.N, lavinmq/_core/segment.pyx).
- Global QoS: basic.consume on a channel with a global prefetch limit
  (basic.qos global=true, count > 0) is refused with RabbitMQ's connection
  error 540 "queue '...' in vhost '...' does not support global qos"; Celery
  (worker_detect_quorum_queues) turns it off for quorum queues.
- x-dead-letter-strategy: at-most-once and at-least-once are both accepted
  and behave alike here. RabbitMQ's at-least-once keeps a dead letter in the
  source queue until its target queues confirmed it, because there they are
  other Raft groups, maybe on other nodes. Here a dead letter is appended to
  its target queues in the same step of the event loop that removes it from
  the source, in the same process; the removal reaches the disk (ack file)
  no sooner than the append (the segment's page cache has it at once), so a
  crash of the broker process can deliver a dead letter twice but cannot
  lose it (a power cut keeps what the last group commit made durable, as
  for any message). Unlike RabbitMQ's at-least-once, a dead letter that no
  queue takes (no such exchange, no binding, a target at its x-max-length
  with reject-publish) is dropped, not kept in the source for a retry.
- In a cluster a quorum queue is replicated as every queue is (the whole
  data directory follows the leader, lavinmq/clustering); there is no
  group size to pick, so x-quorum-initial-group-size is kept and ignored.
"""
from lavinmq.errors import PreconditionFailed
from lavinmq.queue.classic import Queue
from lavinmq.queue.kinds import is_quorum

__all__ = ["QuorumQueue", "check_declare", "check_server_named", "is_quorum", "DEFAULT_DELIVERY_LIMIT"]

DEFAULT_DELIVERY_LIMIT = 20         # RabbitMQ 4.0's default for quorum queues
TYPE_NAME = "rabbit_quorum_queue"   # how RabbitMQ's refusals name the kind
# arguments RabbitMQ knows for other kinds of queue and refuses on this one
OTHER_KINDS_ARGUMENTS = ("x-max-priority", "x-queue-mode", "x-queue-version", "x-max-age",
                         "x-stream-max-segment-size-bytes", "x-initial-cluster-size",
                         "x-queue-master-locator")


def check_server_named(arguments):
    """A queue the broker names cannot be a quorum queue (RabbitMQ's rule)."""
    if is_quorum(arguments):
        raise PreconditionFailed(f"Cannot declare a server-named queue for type {TYPE_NAME}", 50, 10)


def check_declare(name, vhost_name, durable, exclusive, auto_delete, arguments):
    """Raise 406 for what a quorum queue cannot be, as RabbitMQ does."""
    where = f"for queue '{name}' in vhost '{vhost_name}'"
    for key in arguments or ():
        if key in OTHER_KINDS_ARGUMENTS:
            raise PreconditionFailed(f"invalid arg '{key}' {where} of queue type {TYPE_NAME}", 50, 10)
    if auto_delete:
        raise PreconditionFailed(f"invalid property 'auto-delete' {where}", 50, 10)
    if exclusive:
        raise PreconditionFailed(f"invalid property 'exclusive-owner' {where}", 50, 10)
    if not durable:
        raise PreconditionFailed(f"invalid property 'non-durable' {where}", 50, 10)


def delivery_limit(arguments, settings):
    """The delivery limit in effect: the argument's and the policies' (as
    lavinmq.policy resolved them), else the default; None: no limit."""
    limit = settings.get("delivery-limit")
    if limit is not None:
        return limit
    own = arguments.get("x-delivery-limit")
    if isinstance(own, int) and not isinstance(own, bool) and own < 0:
        return None     # turned off (RabbitMQ 4: -1)
    return DEFAULT_DELIVERY_LIMIT


class QuorumQueue(Queue):
    __slots__ = ()

    def apply_effective(self, policy, operator_policy, definition, settings):
        limit = delivery_limit(self.arguments, settings)
        if limit != settings.get("delivery-limit"):
            settings = {k: v for k, v in settings.items() if k != "delivery-limit"}
            if limit is not None:
                settings["delivery-limit"] = limit
        super().apply_effective(policy, operator_policy, definition, settings)
