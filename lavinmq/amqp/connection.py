"""The AMQP connection: handshake, tuning, channel lifecycle and error
handling. Frames are parsed by `_core.connection.CoreConnection`; this class
gets each non-publish method once, already decoded."""
import asyncio
import logging
import platform

import lavinmq
from lavinmq import churn
from lavinmq._core.codec import decode_table_bytes
from lavinmq._core.connection import CoreConnection
from lavinmq.accepted_connection import AcceptedConnection
from lavinmq.amqp.channel import HANDLERS, AMQPChannel
from lavinmq.listener import LOGGING_IN, TALKING, RateLimitedLog
from lavinmq.errors import (
    AccessRefusedHard, AMQPError, ChannelErrorHard, CommandInvalid, ConnectionForced, FrameError, InternalError,
    NotAllowed, NotImplemented_, PreconditionFailed, SyntaxError_, UnexpectedFrame,
)

log = logging.getLogger("lavinmq.connection")
_handshake_log = RateLimitedLog(log, logging.INFO)
_login_log = RateLimitedLog(log, logging.WARNING)

CAPABILITIES = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "consumer_priorities": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": True,
}

CLOSE_TIMEOUT = 3.0   # seconds to wait for close-ok before dropping the socket
# After our close-ok the client closes the socket. Until it does (or this
# passes) we keep reading and discarding: closing with unread bytes in the
# receive buffer sends a reset, which a client that calls Close() from two
# threads at once sees as an error.
LINGER_AFTER_CLOSE_OK = 1.0
# Unfinished message bodies (any) and open transactions (holding at least
# STALL_BYTES) must make progress: their bytes are held in memory, and a
# tenant that stops half way held them (and the memory alarm, which blocks
# every vhost's publishers) for minutes. No progress for [amqp]
# unfinished_timeout seconds while we read the socket closes the
# connection; under the memory alarm ALARM_GRACE seconds do, the connection
# holding most first (lavinmq.server.check_memory).
ALARM_GRACE = 3.0
STALL_BYTES = 1 << 20


class AMQPConnection(AcceptedConnection, CoreConnection, asyncio.BufferedProtocol):
    def __init__(self, server):
        self.server = server
        self.config = server.config
        self.channel_max = self.config.channel_max
        self.frame_max = self.config.frame_max
        self.state.max_message_size = self.config.max_message_size
        self.state.set_timestamp = self.config.set_timestamp
        self.state.syncer = server.syncer
        self.heartbeat_interval = self.config.heartbeat
        self.vhost = None
        self.user = None
        self.client_properties = {}
        self.capabilities = {}
        self.exclusive_queues = []
        self.last_queue = None
        self.phase_opened = False
        self.draining = False       # the broker is stopping (lavinmq.drain): nothing new is delivered
        self._stall = None          # (progress marker, since) of unfinished content

    # -- asyncio.Protocol ---------------------------------------------------------

    def connection_made(self, transport):
        self.socket_opened(transport)
        log.debug("connection from %s", self.name)

    def connection_lost(self, exc):
        self.socket_lost()
        self.phase = 4
        self.state.closed = True
        self._cleanup()
        self.transport = None
        self.socket_released()
        if self.user is not None and self.phase_opened:
            log.info("connection %s closed (user %s)", self.name, self.user.name)
        else:
            log.debug("connection %s closed", self.name)

    def set_blocked(self, blocked, reason="low on disk"):
        """A resource alarm starts or ends: tell clients that asked
        (connection.blocked capability) and stop reading publishers."""
        if blocked == self.state.blocked or self.phase != 2:
            return
        self.state.blocked = blocked
        if self.capabilities.get("connection.blocked"):
            if blocked:
                self.send_method(0, 10, 60, (reason,))
            else:
                self.send_method(0, 10, 61, ())
            self.flush()
        if blocked:
            if self.state.publishes:
                self.block_reading()
        else:
            self.resume_after_flow()

    def resume_writing(self):
        self.state.paused = False
        for ch in self.open_channels():
            for c in ch.consumers.values():
                c.queue.notify()

    # -- handshake ------------------------------------------------------------------

    def on_protocol_header(self):
        if self.ticket is not None:
            self.ticket.progress(TALKING)
        props = {
            "product": "LavinMQ",
            "version": lavinmq.__version__,
            "platform": f"Python {platform.python_version()}",
            "information": "lavinmq for Python",
            "capabilities": CAPABILITIES,
        }
        self.send_method(0, 10, 10, (0, 9, props, b"PLAIN AMQPLAIN", b"en_US"))

    def bad_protocol_header(self):
        self.send_raw(b"AMQP\x00\x00\x09\x01")
        self.flush()
        self.phase = 4
        self.transport.close()

    def update_secret(self, secret):
        """connection.update-secret. A token user's new token is checked and
        takes over (its expiry too); a password user has nothing to renew
        and gets update-secret-ok, as RabbitMQ 3.10 answers (pika's and
        aiormq's own tests call it)."""
        renew = getattr(self.user, "renew_secret", None)
        if renew is not None:
            if isinstance(secret, (bytes, bytearray)):
                secret = bytes(secret).decode("utf-8", "replace")
            renew(self, secret)
        self.send_method(0, 10, 71)

    def on_method(self, ch, channel, class_id, method_id, args):
        key = (class_id, method_id)
        if self.phase == 1:
            return self._handshake(ch, key, args)
        if self.phase == 3:
            if key == (10, 51):
                self._close_transport()
            elif key == (10, 50):
                self.send_method(0, 10, 51)
                self.flush()
                self._close_transport()
            return
        if ch == 0:
            if key == (10, 50):
                self.send_method(0, 10, 51)
                self.flush()
                self._cleanup()
                self._linger()
            elif key == (10, 51):
                self._close_transport()
            elif key == (10, 70):
                self.update_secret(args[0])
            elif key in ((10, 60), (10, 61)):
                pass
            elif class_id == 10:
                raise CommandInvalid(f"unexpected method {class_id}/{method_id}", class_id, method_id)
            else:
                raise CommandInvalid("only connection methods are allowed on channel 0", class_id, method_id)
            return
        if channel is None:
            # only channel.open reaches here for a channel that is not open
            return self._open_channel(ch)
        if key == (20, 40):
            crossing = channel.closing     # we sent channel.close too: wait for its close-ok
            churn.count("channel_closed")
            channel.cleanup()
            self.send_method(ch, 20, 41)
            if not crossing:
                self.set_channel(ch, None)
            return
        if key == (20, 41):
            churn.count("channel_closed")
            self.set_channel(ch, None)
            return
        if key == (20, 10):
            raise ChannelErrorHard(f"channel {ch} is already open", 20, 10)
        name = HANDLERS.get(key)
        if name is None:
            raise NotImplemented_(f"method {class_id}/{method_id} is not supported", class_id, method_id)
        getattr(channel, name)(args)

    def _handshake(self, ch, key, args):
        if ch != 0:
            raise UnexpectedFrame("channel methods before connection.open", key[0], key[1])
        if key == (10, 11):
            return self._start_ok(*args)
        if key == (10, 31):
            return self._tune_ok(*args)
        if key == (10, 40):
            return self._open(args[0])
        if key == (10, 50):
            self.send_method(0, 10, 51)
            self.flush()
            return self._linger()
        raise CommandInvalid(f"unexpected method {key[0]}/{key[1]} during handshake", *key)

    def _start_ok(self, client_properties, mechanism, response, locale):
        if self.user is not None or self.login_pending is not None:
            raise CommandInvalid("connection.start-ok sent twice", 10, 11)
        if self.ticket is not None:
            self.ticket.progress(LOGGING_IN)
        self.client_properties = client_properties or {}
        caps = self.client_properties.get("capabilities")
        self.capabilities = caps if isinstance(caps, dict) else {}
        username = password = None
        if mechanism == "PLAIN":
            parts = response.split(b"\x00")
            if len(parts) == 3:
                username, password = parts[1].decode(errors="replace"), parts[2].decode(errors="replace")
        elif mechanism == "AMQPLAIN":
            try:
                table = decode_table_bytes(len(response).to_bytes(4, "big") + response)
                username, password = str(table.get("LOGIN")), str(table.get("PASSWORD"))
            except AMQPError:
                pass
        else:
            raise AccessRefusedHard(f"unsupported authentication mechanism {mechanism}", 10, 11)
        auth = getattr(self.server, "auth", None)
        if auth is not None and password is not None and auth.needs_keys(password):
            # a token, and the issuer's keys not fetched yet: fetch, then go on
            # (the client waits for connection.tune meanwhile)
            self.login_task = asyncio.get_running_loop().create_task(
                self._login_after_keys(auth, mechanism, username, password))
            return
        self._begin_login(mechanism, username, password)

    async def _login_after_keys(self, auth, mechanism, username, password):
        try:
            await auth.ensure_keys()
            if self.phase == 1 and self.transport is not None:
                self._begin_login(mechanism, username, password)
        except Exception as exc:
            self.connection_error(exc)
        self.flush()

    def _begin_login(self, mechanism, username, password):
        address = self.peer_address
        key = self.login_throttle_key(username)
        if not self.login_later(key, self._late_login, mechanism, username, password, address, key):
            self._login(mechanism, username, password, address, key)

    def _late_login(self, mechanism, username, password, address, key):
        self.login_pending = None
        if self.phase != 1 or self.transport is None:
            return
        try:
            self._login(mechanism, username, password, address, key)
        except AMQPError as exc:
            self.connection_error(exc)
        self.flush()
        if self.phase == 1:
            self.paused_reading = False
            self.transport.resume_reading()

    def _login(self, mechanism, username, password, address, key):
        auth = getattr(self.server, "auth", None) or self.server.users
        user = auth.authenticate(username, password) if username is not None else None
        why = "login refused for user %r from %s", username, self.name
        if user is not None and user.loopback_only and not self.from_loopback(address):
            why = "user %r may only connect from loopback, refused from %s", username, address
            user = None
        if user is None:
            # a key that backs off has its episode's line (lavinmq.auth.throttle), not one per attempt
            if key is None or self.server.login_throttle.failed(*key):
                _login_log(*why)
            raise AccessRefusedHard(
                f"Login was refused using authentication mechanism {mechanism}. For details see the "
                f"broker logfile.", 10, 11)
        self.user = user
        # publishes may only carry this user_id (checked in _core, only for messages that have one)
        self.state.user_id = None if "impersonator" in user.tags else user.name.encode("utf-8", "surrogateescape")
        if getattr(user, "oauth", False):
            self._arm_token_expiry()
        self.send_method(0, 10, 30, (self.channel_max, self.frame_max, self.heartbeat_interval))

    # -- OAuth tokens ------------------------------------------------------------

    def _arm_token_expiry(self):
        """The connection closes when its token expires (LavinMQ: 320, token
        expired), unless update-secret brings a newer one first."""
        if self.token_timer is not None:
            self.token_timer.cancel()
        self.token_timer = asyncio.get_running_loop().call_later(self.user.lifetime, self._token_expired)

    def _token_expired(self):
        self.token_timer = None
        if self.user is None or self.phase >= 3:
            return
        if self.user.lifetime > 0:      # renewed meanwhile
            return self._arm_token_expiry()
        log.info("connection %s: the token of user %s expired", self.name, self.user.name)
        if self.phase == 2:
            self.close(320, "CONNECTION_FORCED - token expired")
        else:
            self._close_transport()

    def token_renewed(self):
        """update-secret brought a new token: its expiry and permissions apply now."""
        self._arm_token_expiry()
        if self.vhost is not None:
            if not self.user.can_access(self.vhost.name):
                self.close(320, f"CONNECTION_FORCED - access to vhost '{self.vhost.name}' refused by the new token")
                return
            self.permissions_changed()

    def _tune_ok(self, channel_max, frame_max, heartbeat):
        if self.user is None:
            raise CommandInvalid("connection.tune-ok before start-ok", 10, 31)
        if channel_max:
            self.channel_max = min(channel_max, self.channel_max)
        if frame_max:
            if frame_max < 4096:
                raise SyntaxError_(f"frame_max {frame_max} is below the minimum 4096", 10, 31)
            if frame_max > self.frame_max:
                raise SyntaxError_(f"frame_max {frame_max} is above the maximum {self.frame_max}", 10, 31)
            self.frame_max = frame_max
        self.state.frame_max = self.frame_max
        self.heartbeat_interval = heartbeat

    def _open(self, vhost_name):
        if self.user is None:
            raise CommandInvalid("connection.open before start-ok", 10, 40)
        if getattr(self.server, "draining", False):
            # connected before the listeners closed, but too late to be served
            raise ConnectionForced("broker shutdown", 10, 40)
        vhost = self.server.vhosts.get(vhost_name)
        if vhost is None:
            raise NotAllowed(f"vhost '{vhost_name}' not found", 10, 40)
        if not self.user.can_access(vhost_name):
            raise NotAllowed(f"access to vhost '{vhost_name}' refused for user '{self.user.name}'", 10, 40)
        limit = vhost.limits.get("max-connections")
        if limit is not None and len(vhost.connections) >= limit:
            raise NotAllowed(f"access to vhost '{vhost_name}' refused for user '{self.user.name}': "
                             f"connection limit ({limit}) is reached", 10, 40)
        self.vhost = vhost
        vhost.connections.add(self)
        self.phase = 2
        self.phase_opened = True
        if self.ticket is not None:
            self.ticket.login()
        self.send_method(0, 10, 41, ("",))
        reason = self.server.alarm_reason
        self.state.blocked = reason is not None
        if self.state.blocked and self.capabilities.get("connection.blocked"):
            self.send_method(0, 10, 60, (reason,))
        log.info("connection %s opened by user %s on vhost %s", self.name, self.user.name, vhost_name)

    def permissions_changed(self):
        """The user's permissions on this vhost changed: publishes are checked
        again (the channels' exchange caches go) and consumers of queues it
        may no longer read are cancelled (basic.cancel, as for a deleted queue)."""
        for ch in self.open_channels():
            if ch.closing:
                continue
            ch.forget_exchange()
            for c in list(ch.consumers.values()):
                if not self.user.can_read(self.vhost.name, c.queue.name):
                    ch.consumers.pop(c.tag, None)
                    ch._remove_consumer(c)
                    if self.capabilities.get("consumer_cancel_notify"):
                        ch.send(60, 30, (c.tag, True))
        self.flush()

    # -- a clean stop's grace period (lavinmq.drain) --------------------------------

    def begin_drain(self):
        """The broker is stopping: every consumer leaves its queue (the
        client is told with basic.cancel if it announced
        consumer_cancel_notify) and nothing new is delivered; what the
        client holds it may still ack, nack or reject, and it may publish."""
        self.draining = True
        if self.phase != 2:
            return
        notify = bool(self.capabilities.get("consumer_cancel_notify"))
        for ch in self.open_channels():
            if not ch.closing:
                ch.cancel_for_drain(notify)
        self.flush()

    def unsettled(self):
        """Deliveries this client holds and has not acked, nacked or rejected."""
        if self.phase != 2:
            return 0
        return sum(ch.unacked_total for ch in self.open_channels() if not ch.closing)

    # -- channels ---------------------------------------------------------------

    def _open_channel(self, ch):
        # channel_max bounds how many are open at once, not the ids (1-65535)
        if self.channel_max and self.open_count >= self.channel_max:
            raise NotAllowed(f"number of channels opened ({self.open_count}) has reached the "
                             f"negotiated channel_max ({self.channel_max})", 20, 10)
        self.set_channel(ch, AMQPChannel(self, ch))
        churn.count("channel_created")
        self.send_method(ch, 20, 11, (b"",))

    # -- errors -----------------------------------------------------------------

    def channel_error(self, ch, exc):
        channel = self.get_channel(ch)
        if channel is None or channel.closing:
            return
        log.info("channel %d of %s closed: %d %s", ch, self.name, exc.reply_code, exc.reply_text)
        channel.cleanup()
        self.send_method(ch, 20, 40, (exc.reply_code, _reply_text(exc), exc.class_id, exc.method_id))

    def connection_error(self, exc):
        if not isinstance(exc, AMQPError):
            # a bug of ours: the log keeps the original traceback
            log.error("internal error on %s: %s", self.name, exc, exc_info=exc)
            exc = InternalError(str(exc))
        elif isinstance(exc, InternalError):
            log.error("internal error on %s: %s", self.name, exc, exc_info=exc)
        elif self.phase not in (3, 4):
            # once closing, what still arrives is not worth a line each (a
            # client streaming after its error would write one per read)
            log.info("closing %s: %d %s", self.name, exc.reply_code, exc.reply_text)
        if self.phase in (3, 4):
            return
        if self.phase == 0:
            self._close_transport()
            return
        self.send_method(0, 10, 50, (exc.reply_code, _reply_text(exc), exc.class_id, exc.method_id))
        self.phase = 3
        self._cleanup()
        self.flush()
        if self.framing_lost and self.transport is not None and self.transport.can_write_eof():
            # reading stopped (a close-ok could not be told from the rest):
            # the client gets the close and then the end of the stream at
            # once, rather than waiting for the close timer's reset
            self.transport.write_eof()
        loop = asyncio.get_running_loop()
        loop.call_later(CLOSE_TIMEOUT, self._close_transport)

    def close(self, code=320, text="CONNECTION_FORCED - broker shutdown"):
        """Close from the server side (shutdown, management)."""
        if self.phase == 2:
            self.send_method(0, 10, 50, (code, text, 0, 0))
            self.phase = 3
            self._cleanup()
            self.flush()
            # the close-ok is read even where reading was paused (a stop's
            # quiesce, flow control): once closing, only close and close-ok
            # are taken (_core.connection), so nothing else gets in
            if self.transport is not None and not self.transport.is_closing():
                self.paused_reading = False
                try:
                    self.transport.resume_reading()
                except (RuntimeError, AttributeError):
                    pass
        else:
            self._close_transport()

    def _close_transport(self):
        self.phase = 4
        if self.transport is not None:
            self.flush()
            self.transport.close()

    def _linger(self):
        """close-ok sent: discard whatever still comes until the client
        closes the socket, or LINGER_AFTER_CLOSE_OK passes."""
        self.flush()
        self.phase = 4
        if self.transport is not None:
            asyncio.get_running_loop().call_later(LINGER_AFTER_CLOSE_OK, self._close_transport)

    def _cleanup(self):
        for ch in self.open_channels():
            churn.count("channel_closed")
            ch.cleanup()
            self.set_channel(ch.id, None)
        queues, self.exclusive_queues = self.exclusive_queues, []
        for q in queues:
            if self.vhost is not None and self.vhost.queues.get(q.name) is q:
                self.vhost.delete_queue(q.name)

    # -- consumer timeout (x-consumer-timeout, consumer_timeout) ---------------------

    def check_consumer_timeouts(self, now_ms):
        """A delivery unacked for longer than its queue's consumer timeout
        closes its channel (406), which requeues what it held."""
        if self.phase != 2:
            return
        for ch in self.open_channels():
            if ch.closing or not ch.unacked_total:
                continue
            timeout = ch.overdue(now_ms)
            if timeout:
                self.channel_error(ch.id, PreconditionFailed(
                    f"delivery acknowledgement on channel {ch.id} timed out: consumer timeout {timeout} ms",
                    60, 80))
                self.flush()

    # -- unfinished content (driven by the server's housekeeping timer) -------------

    @property
    def held_bytes(self):
        """Declared bytes of the bodies being received, and bytes of open transactions."""
        return self.state.assembling + self.state.tx_held

    def stalled_for(self, now):
        """Seconds the connection's unfinished content (bodies, transactions
        of STALL_BYTES or more) has not moved; 0 when it has none."""
        st = self.state
        if not st.assembling and st.tx_held < STALL_BYTES:
            self._stall = None
            return 0.0
        left = sum(ch.content_left() for ch in self.open_channels()) if st.assembling else 0
        marker = (st.publishes, left, st.tx_held)
        if self._stall is None or self._stall[0] != marker:
            self._stall = (marker, now)
            return 0.0
        return now - self._stall[1]

    # -- heartbeats (driven by the server's housekeeping timer) ----------------------

    def check_heartbeat(self, now):
        if self.phase < 2 and now - self.accepted > self.config.handshake_timeout:
            # no login within handshake_timeout: the socket goes, whatever it sent
            _handshake_log("%s: no connection.open within %d s (handshake_timeout), closed", self.name,
                           self.config.handshake_timeout)
            self.phase = 4
            if self.transport is not None:
                self.transport.abort()
            return
        if self.phase != 2:
            return
        timeout = self.config.unfinished_timeout
        if self.stalled_for(now) > timeout and not self.state.blocked and not self.paused_reading:
            log.warning("%s: unfinished message bodies or transactions (%d bytes) made no progress for %d s, "
                        "closing", self.name, self.held_bytes, timeout)
            self.close(320, f"CONNECTION_FORCED - unfinished message bodies or transactions made no progress "
                            f"for {timeout} s")
            return
        if not self.heartbeat_interval:
            return
        if self.paused_reading:
            # we are not reading it (flow control, an alarm): its heartbeats
            # wait in the socket, unseen, through no fault of the client
            self.last_recv = now
        elif now - self.last_recv > 2 * self.heartbeat_interval:
            log.warning("%s missed heartbeats, closing", self.name)
            self.phase = 4
            self.transport.abort()
            return
        if now - self.last_send >= self.heartbeat_interval / 2:
            self.heartbeat()


def _reply_text(exc):
    from lavinmq.spec import REPLY_CODES
    name = REPLY_CODES.get(exc.reply_code, ("ERROR",))[0]
    text = f"{name} - {exc.reply_text}"
    # names decoded with surrogateescape may hold bytes that are not UTF-8
    return text.encode("utf-8", "replace")[:255].decode(errors="ignore")
