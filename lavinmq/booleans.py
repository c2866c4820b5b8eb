"""The words a setting may use for true and false, as LavinMQ reads its
ini file and flags (Crystal's `true?`/`false?` words): one list for the
config, the TCP options and every other place that reads a boolean."""
from lavinmq.errors import ConfigError

TRUE_WORDS = frozenset({"true", "yes", "on", "y", "1"})
FALSE_WORDS = frozenset({"false", "no", "off", "n", "0"})


def parse(raw, where):
    """-> True or False; anything else stops the start naming `where`."""
    low = raw.strip().lower()
    if low in TRUE_WORDS:
        return True
    if low in FALSE_WORDS:
        return False
    raise ConfigError(f"{where}: {raw.strip()!r} is not a boolean (true/false)")
