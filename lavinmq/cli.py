"""`lavinmq`: parse the configuration, set up logging, create and lock the
data directory, then run the server until it stops.

Exit codes: the server's, 0 for --help/--version, 2 for a bad flag or
config value (printed as "lavinmq: error: ...", as argparse does)."""
import logging
import logging.handlers
import os
import sys
import time

from lavinmq.errors import ConfigError
from lavinmq.safetext import escape_controls

log = logging.getLogger("lavinmq.cli")

TRACE, NOTICE = 5, 25
LEVELS = {"trace": TRACE, "debug": logging.DEBUG, "info": logging.INFO, "notice": NOTICE,
          "warn": logging.WARNING, "warning": logging.WARNING, "error": logging.ERROR,
          "fatal": logging.CRITICAL, "none": logging.CRITICAL + 10}


class UTCFormatter(logging.Formatter):
    """2026-01-01T12:00:00.123Z INFO lavinmq.server: message"""

    def formatTime(self, record, datefmt=None):
        t = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        return f"{t}.{int(record.msecs):03d}Z"

    def formatMessage(self, record):
        # one record, one line: names from clients can't forge lines or move the cursor
        # (a traceback, appended after this, keeps its lines)
        record.message = escape_controls(record.message)
        return super().formatMessage(record)


def setup_logging(config):
    logging.addLevelName(TRACE, "TRACE")
    logging.addLevelName(NOTICE, "NOTICE")
    if config.log_file:
        try:
            # Watched: reopens the file after logrotate moves it away
            handler = logging.handlers.WatchedFileHandler(config.log_file, encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot open log file {config.log_file}: {exc.strerror}") from None
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(UTCFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.lavinmq_owned = True
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
        if getattr(old, "lavinmq_owned", False):   # others' handlers are theirs to close
            old.close()
    root.addHandler(handler)
    root.setLevel(LEVELS[config.log_level])


def make_data_dir(path):
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"data directory {path} is not a directory")
    try:
        os.makedirs(path, mode=0o750, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create data directory {path}: {exc.strerror or exc}") from None


def main(argv=None) -> int:
    from lavinmq.config import Config
    from lavinmq.datadir import DataDirLock
    lock = None
    held = False
    try:
        try:
            config = Config.load(argv)
            setup_logging(config)
            for warning in config.warnings:
                log.warning("%s", warning)
            if config.data_dir_lock:
                # another broker on this data directory is the likelier news than
                # its ports being busy: said first, and nothing written to find out
                DataDirLock(config.data_dir).check_free()
            held = hold_ports(config)
            make_data_dir(config.data_dir)
            if config.data_dir_lock:
                lock = DataDirLock(config.data_dir).acquire()
        except SystemExit as exc:    # --help, --version, a flag argparse rejected
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        except ConfigError as exc:
            print(f"lavinmq: error: {exc}", file=sys.stderr)
            return 2
        from lavinmq import launcher   # imported late: --help must not pay for the broker's imports
        from lavinmq.listener import ListenError
        try:
            if config.clustering:
                from lavinmq.clustering import node     # a cluster's node: follows, or leads
                return node.run(config)
            return launcher.run(config)
        except (ConfigError, ListenError) as exc:
            # a port in use, a certificate that does not load: one line, no traceback
            if config.log_file:
                log.error("%s", exc)
            print(f"lavinmq: error: {exc}", file=sys.stderr)
            return 2
    finally:
        if held:
            from lavinmq import ports
            ports.release()
        if lock is not None:
            lock.release()


def hold_ports(config):
    """Every listener's port, before the data directory is made or written
    (the listeners take them as they open): a ConfigError naming each busy
    one and its flag."""
    from lavinmq import ports
    from lavinmq.listener import ListenError
    try:
        ports.hold(config)
    except ListenError as exc:
        if config.log_file:
            log.error("%s", exc)
        raise ConfigError(str(exc)) from None
    return True
