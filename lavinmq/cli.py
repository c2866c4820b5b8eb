"""`lavinmq`: parse the configuration, set up logging, lock the data
directory and run the server."""
import logging
import os
import sys
import time

from lavinmq.errors import ConfigError

LEVELS = {"trace": 5, "debug": logging.DEBUG, "info": logging.INFO, "notice": logging.INFO,
          "warn": logging.WARNING, "warning": logging.WARNING, "error": logging.ERROR,
          "fatal": logging.CRITICAL, "none": logging.CRITICAL + 10}


class UTCFormatter(logging.Formatter):
    converter = time.gmtime

    def formatTime(self, record, datefmt=None):
        t = time.strftime("%Y-%m-%dT%H:%M:%S", self.converter(record.created))
        return f"{t}.{int(record.msecs):03d}Z"


def setup_logging(config):
    handler = logging.FileHandler(config.log_file) if config.log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(UTCFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(LEVELS[config.log_level])


def main(argv=None):
    from lavinmq.config import Config
    from lavinmq.datadir import DataDirLock
    try:
        config = Config.load(argv)
        setup_logging(config)
        try:
            os.makedirs(config.data_dir, mode=0o750, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create data directory {config.data_dir}: {exc.strerror}") from None
        lock = DataDirLock(config.data_dir).acquire() if config.data_dir_lock else None
    except ConfigError as exc:
        print(f"lavinmq: error: {exc}", file=sys.stderr)
        return 2
    from lavinmq import server
    try:
        return server.run(config)
    finally:
        if lock is not None:
            lock.release()
