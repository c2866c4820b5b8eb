"""A client's pattern (a policy's, a listing's name filter) matched against
the names the broker holds, in linear time (RE2), for every name.

Names come off the wire decoded with surrogateescape, so one that is not
UTF-8 holds lone surrogates, which RE2 (matching UTF-8 text) refuses: such
a queue escaped every policy and operator policy, and each boot logged a
traceback for it. A name like that is matched as its bytes against the
pattern compiled for Latin-1 (each byte one character): literals still
match their UTF-8 bytes, and `.` matches any byte."""
import re2


class NameRegex:
    __slots__ = ("pattern", "_options", "_rx", "_bytes_rx")

    def __init__(self, pattern, max_mem):
        """Raises ValueError with RE2's reason for a pattern it refuses."""
        self.pattern = pattern
        self._options = _options(max_mem)
        self._rx = _compile(pattern, self._options)
        self._bytes_rx = None

    @property
    def programsize(self):
        return self._rx.programsize

    def search(self, name):
        """True if the pattern matches somewhere in name."""
        try:
            return self._rx.search(name) is not None
        except UnicodeEncodeError:
            pass
        if self._bytes_rx is None:
            options = _options(self._options.max_mem)
            options.encoding = re2.Options.Encoding.LATIN1
            self._bytes_rx = _compile(self.pattern.encode("utf-8", "surrogateescape"), options)
        return self._bytes_rx.search(name.encode("utf-8", "surrogateescape")) is not None


def _options(max_mem):
    options = re2.Options()
    options.log_errors = False
    options.max_mem = max_mem
    return options


def _compile(pattern, options):
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        raise ValueError(str(reason)) from None
    except UnicodeEncodeError:
        raise ValueError("the pattern is not valid UTF-8") from None
