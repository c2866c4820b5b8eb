"""The life a shovel and a federation link share: a RelaySession is made
and run until it fails or ends; a failure shows in the owner's state and a
new session is tried after the reconnect delay, until the owner is stopped.
A stop is graceful: the session closes (its last confirms acked, for up to
STOP_TIMEOUT), then the task running it is cancelled.

What differs is a hook each: new_session() (the link picks one of its
upstream's URIs there), ended(result) (what a session's normal end means),
finished() (a shovel done with src-delete-after), `label` (how the logs
name the owner), `logger` and `reconnect_delay`."""
import asyncio
import time

from lavinmq.client.connection import ClientError, describe

STOP_TIMEOUT = 5.0      # a stopping owner waits this long for its last confirms


class RelayRunner:
    logger = None       # the owner's room's logger

    def __init__(self):
        self.state = "starting"
        self.error = None
        self.message_count = 0          # moved since this owner was (re)started here
        self.timestamp = time.time()    # of the last state change
        self.session = None
        self.task = None
        self.stopping = False

    # -- hooks ------------------------------------------------------------------------

    @property
    def label(self):
        """The owner as the logs name it."""
        raise NotImplementedError

    @property
    def reconnect_delay(self):
        raise NotImplementedError

    def new_session(self):
        raise NotImplementedError

    def ended(self, result):
        """session.run() returned `result`: True when the owner's work is done
        (finished() is called and it stops), False to start a new session
        after the reconnect delay; raising counts as a failure."""
        raise NotImplementedError

    def finished(self):
        pass

    # -- the life ---------------------------------------------------------------------

    def _set_state(self, state, error=None):
        if state != self.state or error != self.error:
            self.timestamp = time.time()
        self.state = state
        self.error = error

    def running(self):
        """The session is connected and moving messages."""
        self.logger.info("%s in vhost %s running", self.label, self.vhost.name)
        self._set_state("running")

    def start(self, after=None):
        """after: a task to wait for first (the stop of the owner this one replaces)."""
        self.stopping = False
        self.task = asyncio.get_running_loop().create_task(self._run(after), name=self.label)

    async def stop(self, state="terminated"):
        self.stopping = True
        session = self.session
        if session is not None:
            try:
                await session.close(graceful=True, timeout=STOP_TIMEOUT)
            except Exception:
                self.logger.exception("%s: closing failed", self.label)
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except (asyncio.CancelledError, Exception):
                pass
            self.task = None
        self._set_state(state)

    async def _run(self, after):
        if after is not None:
            await asyncio.gather(after, return_exceptions=True)
        while not self.stopping:
            self._set_state("starting", self.error)
            session = self.session = self.new_session()
            try:
                done = self.ended(await session.run())
            except asyncio.CancelledError:
                await session.close(graceful=False)
                raise
            except Exception as exc:
                if self.stopping:
                    break
                text = describe(exc)
                if not isinstance(exc, (ClientError, OSError)):
                    self.logger.exception("%s in vhost %s failed", self.label, self.vhost.name)
                else:
                    self.logger.warning("%s in vhost %s: %s; reconnecting in %g s", self.label, self.vhost.name,
                                        text, self.reconnect_delay)
                self._set_state("error", text)
                await session.close(graceful=False)
            else:
                await session.close(graceful=True, timeout=STOP_TIMEOUT)
                if done:
                    self.finished()
                    return
            finally:
                self.session = None
            if self.stopping:
                break
            await asyncio.sleep(self.reconnect_delay)
