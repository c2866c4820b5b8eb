"""Sessions are queues, as in LavinMQ: `mqtt.<client_id>`, declared with
x-queue-type mqtt, durable for a persistent session (clean_session=0) and
transient for a clean one. Subscriptions are the queue's bindings on
amq.topic (argument x-mqtt-subscription-qos: the granted QoS), so a
persistent session's subscriptions and QoS 1/2 messages survive a restart
with the vhost's definitions and the queue's store."""
from lavinmq.errors import AMQPError
from lavinmq.mqtt import _mqtt, topics
from lavinmq.mqtt.errors import ProtocolError
from lavinmq.queue.classic import Queue

QUEUE_TYPE = "mqtt"
PREFIX = "mqtt."
EXCHANGE = "amq.topic"
QOS_ARG = "x-mqtt-subscription-qos"
OWNER_ARG = "x-mqtt-owner"      # the user that made the session (lavinmq.arguments.BROKER_QUEUE_ARGS)


class SessionQueue(Queue):
    """A classic queue whose QoS 0 messages are not kept while its client is
    away (the publish path checks the type, in Cython)."""
    __slots__ = ()

    @property
    def client_id(self):
        return self.name[len(PREFIX):]


_mqtt.set_session_type(SessionQueue)


def is_session_arguments(arguments):
    return bool(arguments) and arguments.get("x-queue-type") == QUEUE_TYPE


def queue_name(client_id):
    return PREFIX + client_id


def owner(q):
    """The user a session queue belongs to; None for one made before owners
    were kept, or declared over AMQP (x-queue-type mqtt)."""
    return q.arguments.get(OWNER_ARG) if q is not None and q.arguments else None


def declare(vhost, client_id, clean, user):
    """The session's queue, made (owned by `user`) if it does not exist. A
    queue of that name that is not a session (declared over AMQP since the
    CONNECT) is never used as one: ProtocolError, the connection closes."""
    name = queue_name(client_id)
    q = vhost.queues.get(name)
    if q is not None:
        if not isinstance(q, SessionQueue):
            raise ProtocolError(f"queue {name!r} exists and is not an MQTT session")
        q.touch()
        return q
    try:
        return vhost.declare_queue(name, not clean, None, clean, {"x-queue-type": QUEUE_TYPE, OWNER_ARG: user})
    except AMQPError as exc:
        raise ProtocolError(f"the session's queue {name!r} cannot be declared: {exc}") from None


def subscriptions(vhost, q):
    """{binding key: granted QoS} of the session's MQTT subscriptions."""
    ex = vhost.exchanges.get(EXCHANGE)
    out = {}
    if ex is None:
        return out
    for b in ex.bindings.values():
        if b.destination is q and QOS_ARG in b.arguments:
            out[b.routing_key] = b.arguments[QOS_ARG]
    return out


def subscribe(vhost, q, key, qos):
    """Bind (or re-bind with another QoS) one subscription."""
    current = subscriptions(vhost, q)
    old = current.get(key)
    if old == qos:
        return
    if old is not None:
        vhost.unbind_queue(q.name, EXCHANGE, key, {QOS_ARG: old})
    vhost.bind_queue(q.name, EXCHANGE, key, {QOS_ARG: qos})


def unsubscribe(vhost, q, key):
    old = subscriptions(vhost, q).get(key)
    if old is not None:
        vhost.unbind_queue(q.name, EXCHANGE, key, {QOS_ARG: old})


def filters_for_consumer(vhost, q):
    """[(binding key bytes, QoS)] for SessionConsumer.set_filters."""
    return [(k.encode("utf-8", "surrogateescape"), qos) for k, qos in subscriptions(vhost, q).items()]


def describe(vhost, q):
    """{MQTT topic filter: QoS}, for the management API."""
    return {topics.filter_of(k): qos for k, qos in subscriptions(vhost, q).items()}
