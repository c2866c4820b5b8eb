"""One Config object. Sources, later ones winning: defaults < ini file
(LavinMQ's lavinmq.ini sections and keys) < environment < command line.
A bad value stops the start with a ConfigError naming the key."""
import argparse
import configparser
import dataclasses
import os

import lavinmq
from lavinmq.errors import ConfigError

LOG_LEVELS = ("trace", "debug", "info", "notice", "warn", "warning", "error", "fatal", "none")


@dataclasses.dataclass
class Config:
    data_dir: str = "/var/lib/lavinmq"
    config_file: str = ""
    log_level: str = "info"
    log_file: str = ""
    data_dir_lock: bool = True
    segment_size: int = 8 * 1024 * 1024
    set_timestamp: bool = False
    default_user: str = "guest"
    default_password: str = "guest"
    max_message_size: int = 128 * 1024 * 1024
    free_disk_min: int = 0
    amqp_bind: str = "127.0.0.1"
    amqp_port: int = 5672
    heartbeat: int = 300
    frame_max: int = 131072
    channel_max: int = 2048
    http_bind: str = "127.0.0.1"
    http_port: int = 15672

    @classmethod
    def load(cls, argv=None, env=None):
        env = os.environ if env is None else env
        args = build_parser().parse_args(argv)
        config = cls()
        path = args.config or env.get("LAVINMQ_CONFIG_FILE", "")
        if path:
            config.config_file = path
            apply_ini(config, path)
        apply_env(config, env)
        apply_args(config, args)
        config.validate()
        return config

    def validate(self):
        for name, lo, hi in (("amqp_port", 0, 65535), ("http_port", 0, 65535),
                             ("heartbeat", 0, 65535), ("channel_max", 0, 65535),
                             ("frame_max", 4096, 2 ** 32 - 1), ("segment_size", 4096, 2 ** 31),
                             ("max_message_size", 0, 2 ** 32), ("free_disk_min", 0, 2 ** 63)):
            v = getattr(self, name)
            if not lo <= v <= hi:
                raise ConfigError(f"{_origin(name)}: {v} is out of range ({lo}..{hi})")
        if self.log_level not in LOG_LEVELS:
            raise ConfigError(f"{_origin('log_level')}: unknown log level {self.log_level!r}")


# (section, key) -> Config field
INI_KEYS = {
    ("main", "data_dir"): "data_dir",
    ("main", "log_level"): "log_level",
    ("main", "log_file"): "log_file",
    ("main", "data_dir_lock"): "data_dir_lock",
    ("main", "segment_size"): "segment_size",
    ("main", "set_timestamp"): "set_timestamp",
    ("main", "default_user"): "default_user",
    ("main", "default_password"): "default_password",
    ("main", "max_message_size"): "max_message_size",
    ("main", "free_disk_min"): "free_disk_min",
    ("amqp", "bind"): "amqp_bind",
    ("amqp", "port"): "amqp_port",
    ("amqp", "heartbeat"): "heartbeat",
    ("amqp", "frame_max"): "frame_max",
    ("amqp", "channel_max"): "channel_max",
    ("amqp", "max_message_size"): "max_message_size",
    ("mgmt", "bind"): "http_bind",
    ("mgmt", "port"): "http_port",
}
_FIELD_TYPES = {f.name: f.type for f in dataclasses.fields(Config)}
_ORIGIN = {field: f"[{s}] {k}" for (s, k), field in INI_KEYS.items()}

ENV_KEYS = {
    "LAVINMQ_DATADIR": "data_dir",
    "LAVINMQ_DATA_DIR": "data_dir",
    "LAVINMQ_LOG_LEVEL": "log_level",
    "LAVINMQ_AMQP_BIND": "amqp_bind",
    "LAVINMQ_AMQP_PORT": "amqp_port",
    "LAVINMQ_HTTP_BIND": "http_bind",
    "LAVINMQ_HTTP_PORT": "http_port",
}


def _origin(field):
    return _ORIGIN.get(field, field)


def convert(field, raw, where):
    kind = _FIELD_TYPES[field]
    raw = raw.strip()
    if kind in (int, "int"):
        try:
            return int(raw.replace("_", ""))
        except ValueError:
            raise ConfigError(f"{where}: {raw!r} is not an integer") from None
    if kind in (bool, "bool"):
        low = raw.lower()
        if low in ("true", "yes", "on", "1"):
            return True
        if low in ("false", "no", "off", "0"):
            return False
        raise ConfigError(f"{where}: {raw!r} is not a boolean (true/false)")
    return raw


def apply_ini(config, path):
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=(";", "#"))
    try:
        with open(path) as f:
            parser.read_file(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found") from None
    except configparser.Error as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    for section in parser.sections():
        for key, raw in parser.items(section):
            field = INI_KEYS.get((section, key))
            if field is None:
                known = {s for s, _ in INI_KEYS}
                what = f"unknown key [{section}] {key}" if section in known else f"unknown section [{section}]"
                raise ConfigError(f"config file {path}: {what}")
            setattr(config, field, convert(field, raw, f"[{section}] {key}"))


def apply_env(config, env):
    for name, field in ENV_KEYS.items():
        if name in env:
            setattr(config, field, convert(field, env[name], f"environment {name}"))


def apply_args(config, args):
    if args.bind:
        config.amqp_bind = config.http_bind = args.bind
    for field in ("data_dir", "amqp_bind", "amqp_port", "http_bind", "http_port", "log_level"):
        v = getattr(args, field)
        if v is not None:
            setattr(config, field, v)
    if args.debug:
        config.log_level = "debug"
    if args.no_data_dir_lock:
        config.data_dir_lock = False


def build_parser():
    p = argparse.ArgumentParser(prog="lavinmq", description="AMQP 0-9-1 message broker")
    p.add_argument("-D", "--data-dir", dest="data_dir", help="data directory (default /var/lib/lavinmq)")
    p.add_argument("-c", "--config", help="ini file ([main], [amqp], [mgmt])")
    p.add_argument("-b", "--bind", help="bind address for AMQP and HTTP")
    p.add_argument("-p", "--amqp-port", dest="amqp_port", type=int)
    p.add_argument("--amqp-bind", dest="amqp_bind")
    p.add_argument("--http-port", dest="http_port", type=int)
    p.add_argument("--http-bind", dest="http_bind")
    p.add_argument("-l", "--log-level", dest="log_level", choices=LOG_LEVELS)
    p.add_argument("-d", "--debug", action="store_true", help="same as --log-level debug")
    p.add_argument("--no-data-dir-lock", action="store_true", help="do not lock the data directory")
    p.add_argument("-v", "--version", action="version", version=f"lavinmq {lavinmq.__version__}")
    return p
