"""A running shovel: connects, moves messages until something fails, shows
the failure in its state and tries again after reconnect-delay, until it is
paused, deleted or done (src-delete-after).

States, as the API shows them: starting (connecting), running, paused,
error (with the error; it is waiting to reconnect) and terminated."""
import logging
import random
import time

from lavinmq.client.run_loop import RelayRunner
from lavinmq.shovel.amqp_session import AMQPSession

log = logging.getLogger("lavinmq.shovel")


class Shovel(RelayRunner):
    logger = log

    def __init__(self, store, name, config):
        super().__init__()
        self.store = store
        self.name = name
        self.config = config

    @property
    def vhost(self):
        return self.store.vhost

    @property
    def label(self):
        return f"shovel {self.name}"

    @property
    def reconnect_delay(self):
        return self.config.reconnect_delay

    def start(self, after=None):
        """after: a task to wait for first (the stop of the shovel this one replaces)."""
        self._set_state("starting")
        super().start(after)

    def ended(self, finished):
        """finished: the session moved what it was asked to (src-delete-after);
        any other normal end reconnects without showing an error."""
        return finished

    def finished(self):
        log.info("shovel %s in vhost %s moved what it was asked to (src-delete-after): deleted",
                 self.name, self.vhost.name)
        self._set_state("terminated")
        self.store.finished(self)

    def new_session(self):
        if self.config.http:
            from lavinmq.shovel.http_session import HTTPSession
            return HTTPSession(self, random.choice(self.config.src_uris), random.choice(self.config.dest_uris))
        return AMQPSession(self, random.choice(self.config.src_uris), random.choice(self.config.dest_uris))

    def to_json(self):
        from lavinmq.client.uri import scrub
        cfg = self.config
        out = {"name": self.name, "vhost": self.vhost.name, "type": "dynamic", "state": self.state,
               "error": self.error, "message_count": self.message_count,
               "timestamp": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.timestamp)),
               "src_uri": scrub(cfg.src_uris[0]), "dest_uri": scrub(cfg.dest_uris[0]),
               "src_protocol": "amqp091", "dest_protocol": "http" if cfg.http else "amqp091",
               "ack_mode": cfg.ack_mode, "src_prefetch_count": cfg.src_prefetch_count,
               "src_delete_after": cfg.src_delete_after, "reconnect_delay": cfg.reconnect_delay}
        for key, value in (("src_queue", cfg.src_queue), ("src_exchange", cfg.src_exchange),
                           ("src_exchange_key", cfg.src_exchange_key), ("dest_queue", cfg.dest_queue),
                           ("dest_exchange", cfg.dest_exchange), ("dest_exchange_key", cfg.dest_exchange_key)):
            if value is not None:
                out[key] = value
        return out
