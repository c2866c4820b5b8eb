"""An MQTT 3.1.1 connection: CONNECT (login with the broker's users,
`vhost:user` names, client id rules), session takeover, subscriptions,
the will, keepalive and closing. The packet reader and every PUBLISH are
in `_mqtt.MQTTCore`; this class gets the other packets once each."""
import asyncio
import logging
import os
import base64
import time

from lavinmq.accepted_connection import AcceptedConnection
from lavinmq.listener import LOGGING_IN, RateLimitedLog
from lavinmq.mqtt import _mqtt, session, topics
from lavinmq.mqtt.errors import (
    ProtocolError, ConnectRefused, BAD_CREDENTIALS, IDENTIFIER_REJECTED, NOT_AUTHORIZED, SERVER_UNAVAILABLE,
)
from lavinmq.mqtt.retain_delivery import RetainedDelivery

log = logging.getLogger("lavinmq.mqtt")
_login_log = RateLimitedLog(log, logging.WARNING)
_handshake_log = RateLimitedLog(log, logging.INFO)
_error_log = RateLimitedLog(log, logging.WARNING)

KEEPALIVE_GRACE = 1.5       # MQTT 3.1.2.10: one and a half keepalive periods without a packet
SHUTDOWN = "CONNECTION_FORCED - broker shutdown"
SUBACK_FAILURE = 0x80


class MQTTConnection(AcceptedConnection, _mqtt.MQTTCore, asyncio.BufferedProtocol):
    protocol = "MQTT 3.1.1"

    def __init__(self, server):
        self.server = server
        self.config = cfg = server.config
        # a PUBLISH body is at most max_message_size: a packet that cannot be
        # one is refused at its header, not after it was read into memory
        self.max_packet_size = min(cfg.mqtt_max_packet_size, cfg.max_message_size + 65536 + 5)
        self.state.max_message_size = cfg.max_message_size
        # what a PUBACK promises ([mqtt] puback_waits_for_disk, README "MQTT")
        self.state.syncer = server.syncer if cfg.mqtt_puback_waits_for_disk else None
        self.vhost = None
        self.user = None
        self.broker = None
        self.client_id = None
        self.clean_session = True
        self.keepalive = 0
        self.will = None
        self.session_queue = None
        self.retained = None            # lavinmq.mqtt.retain_delivery.RetainedDelivery, at a first match
        self.transport_name = "tcp"     # or "websocket"
        self.connected_at = int(time.time() * 1000)
        self.accepted = time.monotonic()
        self.closing = False
        self.client_properties = {}
        self.capabilities = {}

    # what the management API and the server's loops read of every connection
    channel_max = 0
    channels = ()
    exclusive_queues = ()

    @property
    def frame_max(self):
        return self.max_packet_size

    @property
    def heartbeat_interval(self):
        return self.keepalive

    def open_channels(self):
        return []

    # a session's consumer names its connection as its channel (shapes.consumer)
    id = 0

    @property
    def connection(self):
        return self

    # -- asyncio.Protocol ---------------------------------------------------------

    def connection_made(self, transport):
        self.socket_opened(transport)
        log.debug("MQTT connection from %s", self.name)

    def connection_lost(self, exc):
        self.socket_lost()
        self.transport = None
        if not self.closing:
            # the client went away without DISCONNECT: its will is published
            self._shut(publish_will=True, reason="connection lost")
        self.state.closed = True
        self.phase = _mqtt.MP_CLOSED_
        self.socket_released()

    def resume_writing(self):
        self.state.paused = False
        if self.consumer is not None:
            self.consumer.queue.notify()

    # -- CONNECT --------------------------------------------------------------------

    def on_connect(self, args):
        if self.login_pending is not None:
            raise ProtocolError("a second CONNECT")
        if self.ticket is not None:
            self.ticket.progress(LOGGING_IN)
        auth = getattr(self.server, "auth", None) or self.server.users
        password = args[7]
        if password is not None and auth is not self.server.users \
                and auth.needs_keys(password.decode(errors="replace")):
            # a token, and the issuer's keys not fetched yet: fetched first,
            # then the CONNECT goes on (the client waits for its CONNACK, as
            # AMQP's waits for connection.tune); nothing more is read meanwhile
            self.block_reading()
            self.login_pending = asyncio.get_running_loop().create_task(self._connect_after_keys(auth, args))
            return
        self._connect_throttled(args)

    def _connect_throttled(self, args):
        if not self.login_later(self._throttle_key(args[6]), self._connect_late, args):
            self._connect(args)

    async def _connect_after_keys(self, auth, args):
        await auth.ensure_keys()        # never raises: a failed fetch leaves the keys empty
        self._connect_resumed(self._connect_throttled, args)

    def _connect_late(self, args):
        self._connect_resumed(self._connect, args)

    def _connect_resumed(self, connect, args):
        """A CONNECT that waited (for the keys, or backing off) goes on; then
        reading resumes, unless it waits again (backing off after the keys)."""
        self.login_pending = None
        if self.closing or self.transport is None:
            return
        try:
            connect(args)
        except Exception as exc:
            self.connection_error(exc)
        self.flush()
        if self.login_pending is None and not self.closing and self.paused_reading and self.transport is not None:
            self.paused_reading = False
            self.transport.resume_reading()

    def _throttle_key(self, username):
        """The login throttle's key for CONNECT's user name (`vhost:user` counts as user)."""
        if username is None:
            return None
        return self.login_throttle_key(username.decode(errors="replace").split(":", 1)[-1])

    def _connect(self, args):
        name, level, clean, keepalive, client_id, will, username, password = args
        try:
            user, vhost = self._login(username, password)
            client_id = self._client_id(client_id.decode(), clean, user.name)
            self._check_limits(vhost, user)
            self._may_take_session(vhost, user, client_id)
        except ConnectRefused as exc:
            return self.refuse_connect(exc)
        if will is not None:
            try:
                _mqtt.check_will_topic(will[0])
            except ProtocolError as exc:
                raise ProtocolError(f"will topic: {exc}") from None
        self.user = user
        self.vhost = vhost
        self.keepalive = keepalive
        self.clean_session = clean
        self.will = will
        self.client_id = client_id
        self.protocol = "MQTT 3.1.1" if level == 4 else "MQTT 3.1"
        broker = self.broker = self.server.mqtt.broker(vhost)
        old = broker.clients.get(client_id)
        if old is not None and old is not self:
            old.taken_over(self)
        broker.clients[client_id] = self
        qname = session.queue_name(client_id)
        q = vhost.queues.get(qname)
        if clean:
            if q is not None:
                vhost.delete_queue(qname)
                q = None
            broker.sessions.pop(client_id, None)
        present = q is not None
        st = broker.session_state(client_id)
        self.qos2_in = st.qos2_in       # None until the session's first QoS 2 publish
        self.exchange = vhost.exchanges["amq.topic"]
        self.may_publish = self._may_write_exchange()
        vhost.connections.add(self)
        self.phase = _mqtt.MP_OPEN_
        # a resource alarm already on holds this publisher too (set_blocked
        # only tells the connections open when it changes), as AMQP's open does
        self.state.blocked = self.server.alarm_reason is not None
        if self.ticket is not None:
            self.ticket.login()     # no longer a socket the connection guard may close for room
        self.send(_mqtt.connack(present, 0))
        if q is not None:
            self._attach(q)
        for pid in st.pending_pubrel:
            self.send(_mqtt.pubrel(pid))
        st.pending_pubrel = []
        log.info("MQTT connection %s opened by user %s on vhost %s, client id %r%s", self.name, user.name,
                 vhost.name, client_id, " (clean session)" if clean else "")
        if getattr(user, "oauth", False):
            self._arm_token_expiry()

    # -- OAuth tokens ------------------------------------------------------------

    keys_task = None

    def _fetch_keys(self, auth):
        if self.keys_task is None:       # held here: a task nobody holds may be collected
            self.keys_task = asyncio.get_running_loop().create_task(auth.ensure_keys())     # never raises

    def _arm_token_expiry(self):
        """The connection closes when its token expires (LavinMQ's MQTT
        client closes then; MQTT 3.1.1 has no way to renew a token)."""
        self.token_timer = asyncio.get_running_loop().call_later(self.user.lifetime, self._token_expired)

    def _token_expired(self):
        self.token_timer = None
        if not self.closing:
            self.close(text="token expired")

    def refuse_connect(self, exc):
        if exc.logged:
            _login_log("MQTT connection %s refused (CONNACK %d): %s", self.name, exc.code, exc.reason)
        self.send(_mqtt.connack(False, exc.code))
        self._shut(publish_will=False, reason="connect refused")

    def qos2_state(self):
        return self.broker.session_state(self.client_id).qos2()

    def _login(self, username, password):
        if username is None or password is None:
            raise ConnectRefused(NOT_AUTHORIZED, "no user name and password")
        raw_username = username
        username = username.decode()
        vhost_name = self.config.mqtt_default_vhost
        if ":" in username:
            vhost_name, username = username.split(":", 1)
        address = self.peer_address
        password = password.decode(errors="replace")
        # the broker's sign-in chain ([main] auth_backends), as LavinMQ's
        # MQTT: an OAuth token in the password field signs in too
        auth = getattr(self.server, "auth", None) or self.server.users
        if auth is not self.server.users and auth.needs_keys(password):
            # the issuer's keys could not be fetched (on_connect waited for
            # them): fetched again for the next CONNECT; the client retries
            self._fetch_keys(auth)
            raise ConnectRefused(SERVER_UNAVAILABLE, "the OAuth issuer's keys could not be fetched")
        user = auth.authenticate(username, password)
        if user is not None and user.loopback_only and not self.from_loopback(address):
            user = None
            reason = f"user {username!r} may only connect from loopback"
        else:
            reason = f"login refused for user {username!r}"
        if user is None:
            key = self._throttle_key(raw_username)
            # a key that backs off has its episode's line (lavinmq.auth.throttle), not one per attempt
            logged = key is None or self.server.login_throttle.failed(*key)
            raise ConnectRefused(BAD_CREDENTIALS, reason, logged)
        vhost = self.server.vhosts.get(vhost_name)
        if vhost is None:
            raise ConnectRefused(NOT_AUTHORIZED, f"vhost {vhost_name!r} not found")
        if not user.can_access(vhost_name):
            raise ConnectRefused(NOT_AUTHORIZED, f"user {username!r} has no access to vhost {vhost_name!r}")
        return user, vhost

    def _client_id(self, client_id, clean, username):
        mode = self.config.mqtt_client_id_validation
        if not client_id:
            if not clean:
                # MQTT 3.1.3.3: a server-assigned id needs a clean session
                raise ConnectRefused(IDENTIFIER_REJECTED, "an empty client id needs clean_session")
            client_id = username if mode == "username" else \
                base64.urlsafe_b64encode(os.urandom(24)).decode().rstrip("=")
        if mode == "username" and client_id != username:
            raise ConnectRefused(IDENTIFIER_REJECTED,
                                 f"client id {client_id!r} must be the user name {username!r}")
        qname = session.queue_name(client_id)
        if len(qname.encode()) > 255 or "\n" in client_id or "\r" in client_id:
            raise ConnectRefused(IDENTIFIER_REJECTED, "client id too long (at most 250 bytes) or with a newline")
        return client_id

    def _check_limits(self, vhost, user):
        if getattr(self.server, "draining", False):
            # connected before the listeners closed (lavinmq.drain), too late to be served
            raise ConnectRefused(SERVER_UNAVAILABLE, "the broker is shutting down")
        limit = vhost.limits.get("max-connections")
        if limit is not None and len(vhost.connections) >= limit:
            raise ConnectRefused(SERVER_UNAVAILABLE, f"vhost {vhost.name!r}: connection limit ({limit}) reached")

    def _may_take_session(self, vhost, user, client_id):
        """A CONNECT deletes (clean session) or takes over the queue of its
        client id: only an MQTT session's (x-queue-type mqtt), and only its
        user's, or with the configure right on it -- what deleting it over
        AMQP needs. With client_id_validation = owner (the default) a
        session, connected or kept, is its user's alone. Refused before
        anything is touched (a connected client stays)."""
        qname = session.queue_name(client_id)
        q = vhost.queues.get(qname)
        if q is not None and not isinstance(q, session.SessionQueue):
            raise ConnectRefused(IDENTIFIER_REJECTED, f"queue {qname!r} exists and is not an MQTT session")
        owner = session.owner(q)
        if self.config.mqtt_client_id_validation == "owner":
            connected = self.server.mqtt.broker(vhost).clients.get(client_id)
            if connected is not None and connected.user is not None:
                owner = connected.user.name
            if owner is not None and owner != user.name:
                raise ConnectRefused(IDENTIFIER_REJECTED, f"client id {client_id!r} is a session of another user")
        if q is not None and owner != user.name and not user.can_configure(vhost.name, qname):
            raise ConnectRefused(NOT_AUTHORIZED, f"user {user.name!r} may not configure {qname!r}, "
                                                 f"the session of client id {client_id!r}")

    def _may_write_exchange(self):
        if not self.config.mqtt_permission_check_enabled:
            return True
        return self.user.can_write(self.vhost.name, session.EXCHANGE)

    def taken_over(self, by):
        """Another connection CONNECTed with this client id (MQTT 3.1.4.2):
        this one is closed first, and its session handed over."""
        log.info("MQTT connection %s: client id %r taken over by %s", self.name, self.client_id, by.name)
        self._shut(publish_will=True, reason="taken over")

    # -- the session ------------------------------------------------------------------

    def _session_queue(self):
        q = self.session_queue
        if q is not None and not q.closed and self.vhost.queues.get(q.name) is q:
            return q
        q = session.declare(self.vhost, self.client_id, self.clean_session, self.user.name)
        self._attach(q)
        return q

    def _attach(self, q):
        c = _mqtt.SessionConsumer(self, q, self.config.mqtt_max_inflight_messages, self.client_id)
        c.set_filters(session.filters_for_consumer(self.vhost, q))
        self.session_queue = q
        self.consumer = c
        q.add_consumer(c)

    def _detach(self):
        c, self.consumer = self.consumer, None
        if c is None:
            return
        q = c.queue
        q.remove_consumer(c)
        released = c.detach(not self.clean_session)
        if released and self.broker is not None and not self.clean_session:
            self.broker.session_state(self.client_id).pending_pubrel.extend(released)

    def server_cancel(self, consumer):
        """The session's queue was deleted (management API): the client goes too."""
        if consumer is self.consumer:
            self.consumer = None
            self.session_queue = None
            self.close(320, "CONNECTION_FORCED - session queue deleted")

    # -- SUBSCRIBE / UNSUBSCRIBE -------------------------------------------------------

    def on_subscribe(self, pid, filters):
        allowed = self._may_subscribe()     # before the session's queue is made for it
        q = self._session_queue() if allowed else self.session_queue
        vhost = self.vhost
        codes, retained = [], []
        for f, qos in filters:
            try:
                key = topics.binding_key(f)
            except topics.BadFilter as exc:
                log.info("MQTT %s: SUBSCRIBE %r refused: %s", self.name, f[:100], exc)
                codes.append(SUBACK_FAILURE)
                continue
            if not allowed:
                log.info("MQTT %s: SUBSCRIBE %r refused: user %s lacks read on amq.topic or write (and "
                         "configure, to make it) on %s", self.name, f[:100], self.user.name,
                         session.queue_name(self.client_id))
                codes.append(SUBACK_FAILURE)
                continue
            session.subscribe(vhost, q, key, qos)
            codes.append(qos)
            retained.append((f, qos))
        if self.consumer is not None:
            self.consumer.set_filters(session.filters_for_consumer(vhost, q))
        self.send(_mqtt.suback(pid, codes))
        if retained and len(self.broker.retain):
            # read and stored off the event loop, at the client's pace
            if self.retained is None:
                self.retained = RetainedDelivery(self)
            for f, qos in retained:
                self.retained.add(f, f.split(b"/"), qos)

    def _may_subscribe(self):
        """Read on amq.topic and write on the session's queue (LavinMQ's
        check), and configure on it when it must be made (as declaring it
        over AMQP)."""
        if not self.config.mqtt_permission_check_enabled:
            return True
        name, user = self.vhost.name, self.user
        qname = session.queue_name(self.client_id)
        if not (user.can_read(name, session.EXCHANGE) and user.can_write(name, qname)):
            return False
        q = self.vhost.queues.get(qname)
        return (q is not None and session.owner(q) == user.name) or user.can_configure(name, qname)

    def on_unsubscribe(self, pid, filters):
        q = self.session_queue
        if self.retained is not None:
            for f in filters:
                self.retained.discard(f)
        if q is not None:
            for f in filters:
                try:
                    session.unsubscribe(self.vhost, q, topics.binding_key(f))
                except topics.BadFilter:
                    pass
            if self.consumer is not None:
                self.consumer.set_filters(session.filters_for_consumer(self.vhost, q))
        self.send(_mqtt.unsuback(pid))

    def on_retain(self, topic, body, qos):
        self.broker.retain.retain(topic, body)

    # -- closing ------------------------------------------------------------------------

    def on_disconnect(self):
        log.info("MQTT connection %s (client id %r) disconnected", self.name, self.client_id)
        self._shut(publish_will=False, reason="DISCONNECT")

    def connection_error(self, exc):
        if isinstance(exc, ProtocolError):
            _error_log("MQTT connection %s (client id %r) closed: %s", self.name, self.client_id, exc)
        else:
            log.error("internal error on MQTT connection %s: %s", self.name, exc, exc_info=exc)
        self._shut(publish_will=True, reason=str(exc))

    def close(self, code=320, text=SHUTDOWN):
        """From the server side: management, a deleted user or vhost,
        shutdown (no will then: the broker is going away with it)."""
        if not self.closing:
            log.info("MQTT connection %s closed: %s", self.name, text)
        self._shut(publish_will=text != SHUTDOWN, reason=text)

    def _close_transport(self):
        self._shut(publish_will=False, reason="shutdown")

    def _shut(self, publish_will, reason):
        """Once: the will (unless DISCONNECT), the session detached (a clean
        one deleted), the socket closed after what is buffered."""
        if self.closing:
            return
        self.closing = True
        self.phase = _mqtt.MP_CLOSED_
        if publish_will and self.will is not None and self.vhost is not None:
            self._publish_will()
        self.will = None
        if self.retained is not None:
            self.retained.cancel()
        try:
            self._leave_session()
        except Exception:
            log.exception("MQTT connection %s: leaving the session failed", self.name)
        if self.transport is not None:
            self.flush()
            self.transport.close()

    def _publish_will(self):
        topic, body, qos, retain = self.will
        if not self._may_write_exchange():
            log.info("MQTT %s: will not published: no write permission on amq.topic", self.name)
            return
        try:
            self.publish_message(topic, body, qos)
            if retain:
                self.broker.retain.retain(topic, body)
        except Exception as exc:
            log.warning("MQTT %s: publishing the will failed: %s", self.name, exc)

    def _leave_session(self):
        self._detach()
        broker = self.broker
        if broker is None or broker.clients.get(self.client_id) is not self:
            return
        del broker.clients[self.client_id]
        if self.clean_session:
            broker.sessions.pop(self.client_id, None)
            q = self.vhost.queues.get(session.queue_name(self.client_id))
            if isinstance(q, session.SessionQueue):
                self.vhost.delete_queue(q.name)
        self.session_queue = None

    # -- housekeeping (the server's timer, once a second) -------------------------------

    def check_heartbeat(self, now):
        if self.phase == _mqtt.MP_CONNECT_:
            if now - self.accepted > self.config.handshake_timeout:
                _handshake_log("MQTT %s: no CONNECT within %d s (handshake_timeout), closed", self.name,
                               self.config.handshake_timeout)
                self.closing = True
                self.phase = _mqtt.MP_CLOSED_
                if self.transport is not None:
                    self.transport.abort()
            return
        if self.phase != _mqtt.MP_OPEN_ or not self.keepalive or self.paused_reading:
            return
        if now - self.last_recv > KEEPALIVE_GRACE * self.keepalive:
            log.warning("MQTT connection %s (client id %r): nothing received for %.1f s (keepalive %d s), "
                        "closed", self.name, self.client_id, now - self.last_recv, self.keepalive)
            self._shut(publish_will=True, reason="keepalive")

    def check_consumer_timeouts(self, now_ms):
        pass

    def set_blocked(self, blocked, reason="low on disk"):
        """A resource alarm: publishers are not read until it clears."""
        if blocked == self.state.blocked or self.phase != _mqtt.MP_OPEN_:
            return
        self.state.blocked = blocked
        if not blocked:
            self.resume_after_flow()

    def permissions_changed(self):
        self.may_publish = self._may_write_exchange()

    # -- the management API -----------------------------------------------------------

    def api_details(self):
        """What the API adds to (and changes in) an AMQP connection's shape,
        as LavinMQ shows MQTT clients."""
        c = self.consumer
        return {"protocol": self.protocol, "client_id": self.client_id, "timeout": self.keepalive,
                "auth_mechanism": "PLAIN", "channels": 0, "channel_max": 0,
                "clean_session": self.clean_session, "transport": self.transport_name,
                "client_properties": {"client_id": self.client_id},
                "session": session.queue_name(self.client_id) if self.client_id else None,
                "messages_unacknowledged": c.in_flight if c is not None else 0,
                "publish": self.publish_count}
