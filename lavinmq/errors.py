"""The broker's error hierarchy. Every AMQP failure carries the spec's reply
code and the class/method id of the method that caused it, so the connection
can turn it into channel.close or connection.close without guessing."""


class LavinMQError(Exception):
    """Root of every error the broker raises on purpose."""


class ConfigError(LavinMQError):
    """A bad config value or flag: names the key, stops the start."""


class AMQPError(LavinMQError):
    reply_code = 541
    hard = True  # connection error unless a subclass says channel error

    def __init__(self, text="", class_id=0, method_id=0):
        super().__init__(text)
        self.reply_text = text
        self.class_id = class_id
        self.method_id = method_id

    def __repr__(self):
        return f"{type(self).__name__}({self.reply_code}, {self.reply_text!r}, {self.class_id}, {self.method_id})"


class ChannelError(AMQPError):
    """Soft error: closes the channel only."""
    hard = False


class ConnectionError_(AMQPError):
    """Hard error: closes the whole connection."""
    hard = True


# Soft errors (channel.close)
class ContentTooLarge(ChannelError):
    reply_code = 311

class NoRoute(ChannelError):
    reply_code = 312

class NoConsumers(ChannelError):
    reply_code = 313

class AccessRefused(ChannelError):
    reply_code = 403

class NotFound(ChannelError):
    reply_code = 404

class ResourceLocked(ChannelError):
    reply_code = 405

class PreconditionFailed(ChannelError):
    reply_code = 406

class ChannelNotImplemented(ChannelError):
    """540 on a channel.close, as LavinMQ answers basic.get on a stream
    (RabbitMQ closes the connection with the same code)."""
    reply_code = 540

class ChannelResourceError(ChannelError):
    """506 on a channel.close: LavinMQ sends it for a per-channel limit
    (max_consumers_per_channel), leaving the connection open."""
    reply_code = 506


# Hard errors (connection.close)
class ConnectionForced(ConnectionError_):
    reply_code = 320

class InvalidPath(ConnectionError_):
    reply_code = 402

class FrameError(ConnectionError_):
    reply_code = 501

class SyntaxError_(ConnectionError_):
    reply_code = 502

class CommandInvalid(ConnectionError_):
    reply_code = 503

class ChannelErrorHard(ConnectionError_):
    """Reply code 504 CHANNEL_ERROR: a bad channel id or channel state."""
    reply_code = 504

class UnexpectedFrame(ConnectionError_):
    reply_code = 505

class ResourceError(ConnectionError_):
    reply_code = 506

class NotAllowed(ConnectionError_):
    reply_code = 530

class NotImplemented_(ConnectionError_):
    reply_code = 540

class InternalError(ConnectionError_):
    reply_code = 541

class AccessRefusedHard(ConnectionError_):
    """403 on the connection (login refused, vhost access refused)."""
    reply_code = 403
