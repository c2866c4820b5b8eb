"""One Config object. Sources, later ones winning:

    defaults < ini file < environment < command line

The ini file uses LavinMQ's lavinmq.ini sections and key names ([main],
[amqp], [mgmt]). Without ``-c`` the file is ``$LAVINMQ_CONFIGURATION_DIRECTORY``
or ``$CONFIGURATION_DIRECTORY`` (set by systemd) or ``/etc/lavinmq``, plus
``/lavinmq.ini``, read only if it exists, as LavinMQ does.

Environment variables (LavinMQ's names, plus a few ``LAVINMQ_*`` of our own):

    STATE_DIRECTORY, LAVINMQ_DATADIR, LAVINMQ_DATA_DIR   data_dir (later wins)
    LAVINMQ_AMQP_BIND, LAVINMQ_AMQP_PORT                 amqp_bind, amqp_port
    LAVINMQ_HTTP_BIND, LAVINMQ_HTTP_PORT                 http_bind, http_port
    LAVINMQ_DEFAULT_USER                                 default_user
    LAVINMQ_DEFAULT_PASSWORD                             default_password_hash (a hash, as in LavinMQ)
    LAVINMQ_LOG_LEVEL, LAVINMQ_LOG_FILE                  log_level, log_file (ours)
    LAVINMQ_CLUSTERING, LAVINMQ_CLUSTERING_BIND, _PORT,  [clustering] enabled, bind, port, ...
      _ADVERTISED_URI, _ETCD_ENDPOINTS, _ETCD_PREFIX     (LavinMQ's), _LEASE_TTL (ours)

A bad value stops the start with a ConfigError naming where it came from:
the ini section and key, the environment variable, or the flag. Keys that
LavinMQ knows but this broker does not implement only produce a warning
(``Config.warnings``, logged once logging is up), so a LavinMQ ini file
still starts us; any other unknown key or section is an error.
"""
import argparse
import configparser
import dataclasses
import os
import re
import sys
from typing import Mapping

import lavinmq
from lavinmq import booleans
from lavinmq.auth.password import check_hash
from lavinmq.errors import ConfigError

LOG_LEVELS = ("trace", "debug", "info", "notice", "warn", "warning", "error", "fatal", "none")
DEFAULT_CONFIG_DIR = "/etc/lavinmq"


@dataclasses.dataclass
class Config:
    data_dir: str = "/var/lib/lavinmq"
    config_file: str | None = None
    log_level: str = "info"
    log_file: str | None = None
    data_dir_lock: bool = True
    segment_size: int = 8 * 1024 * 1024
    set_timestamp: bool = False
    default_user: str = "guest"
    default_password: str = "guest"          # plain text; default_password_hash wins if set
    default_password_hash: str | None = None  # rabbit_password_hashing_sha256, as LavinMQ's
    default_user_only_loopback: bool = True
    max_message_size: int = 128 * 1024 * 1024
    free_disk_min: int | None = None     # None: 3 segments (LavinMQ's floor); 0 turns the alarm off
    free_disk_warn: int = 0              # a warning below this many bytes free (and below 6 segments)
    max_deleted_definitions: int = 8192  # removals in definitions.amqp before it is compacted
    # TCP options of accepted AMQP/MQTT sockets (lavinmq.sockopts)
    tcp_nodelay: bool = True
    tcp_keepalive: tuple | None = (60, 10, 3)   # idle s, interval s, probes; None: off
    tcp_recv_buffer_size: int | None = None     # SO_RCVBUF; None: the kernel's autotuning
    tcp_send_buffer_size: int | None = None     # SO_SNDBUF
    sync: bool = True       # confirms and tx.commit-ok wait until the messages are on disk
    vm_memory_high_watermark: float = 0.4   # RSS above this share of memory blocks publishers (RabbitMQ's)
    amqp_bind: str = "127.0.0.1"
    amqp_port: int = 5672
    heartbeat: int = 300
    frame_max: int = 131072
    channel_max: int = 2048
    http_bind: str = "127.0.0.1"
    http_port: int = 15672
    metrics_http_bind: str = "127.0.0.1"
    metrics_http_port: int = 15692
    control_unix_path: str = ""         # "" = DATA_DIR/lavinmqctl.sock
    stats_interval: int = 5000          # ms between samples for the API's rates
    stats_log_size: int = 120           # samples of rate history kept (LavinMQ's: 10 min at 5 s)
    consumer_timeout: int | None = None  # ms an unacked delivery may be held (off: None, as LavinMQ)
    # s between checks of it: LavinMQ's default is 60 (a timeout may fire up to
    # a minute late); here 1, the heartbeat round's, which checks only
    # connections with unacked deliveries
    consumer_timeout_loop_interval: int = 1
    # s a clean stop (SIGTERM/SIGINT) gives clients to ack what they hold once
    # their consumers are cancelled (lavinmq.drain); 0: close at once. Keep it
    # well below the service's TimeoutStopSec (60 s, packaging/lavinmq.service)
    shutdown_drain_timeout: float = 5.0
    default_consumer_prefetch: int = 65535   # for consumers on channels without basic.qos (LavinMQ's)
    log_exchange: bool = False           # log lines published to amq.lavinmq.log in vhost /
    pidfile: str | None = None           # the broker's pid is written here while it runs
    load_definitions: str | None = None  # a definitions JSON file imported at start (LavinMQ's)
    max_consumers_per_channel: int = 0   # 0: no limit
    default_consistent_hash_algorithm: str = "ring"     # x-consistent-hash without x-algorithm (LavinMQ's)
    max_policy_instructions: int = 20_000   # RE2 program size of a vhost's policies, in all (lavinmq.policy)
    max_deduplication_cache_size: int = 1_000_000   # x-cache-size a queue or exchange may ask for
    # before login and over HTTP: nothing a client that never logs in does may exhaust the broker
    handshake_timeout: int = 10         # s from accept to connection.open-ok, else the socket is closed
    unfinished_timeout: int = 30        # s an unfinished body or large transaction may make no progress
    http_read_timeout: int = 30         # s for an HTTP request (headers and body) to arrive
    max_connections: int = 0            # open sockets, all listeners; 0 = the fd limit less a reserve
    max_connections_per_address: int = 0   # from one source address; 0 = half of max_connections
    loopback_users: str = "guest"       # comma-separated: users that may only log in from loopback
    # TLS, as LavinMQ: listeners on amqps_port/https_port only once tls_cert is set
    amqps_port: int = 5671
    https_port: int = 15671
    tls_cert: str | None = None
    tls_key: str | None = None          # None = the key is in tls_cert's file
    tls_ciphers: str | None = None
    tls_min_version: str | None = None  # 1.0 .. 1.3; None = 1.2
    tls_verify_peer: bool = False       # require a client certificate signed by tls_ca_cert
    tls_ca_cert: str | None = None
    # clustering (lavinmq/clustering/): LavinMQ's [clustering] settings, plus
    # the lease TTL, which LavinMQ fixes at 10 s. Crash failover takes about
    # one TTL; etcd raises a TTL below its minimum (2 s with its defaults)
    clustering: bool = False
    clustering_bind: str = "127.0.0.1"
    clustering_port: int = 5679
    clustering_advertised_uri: str | None = None     # None: tcp://<bind or hostname>:<port>
    clustering_etcd_endpoints: str = "localhost:2379"
    clustering_etcd_prefix: str = "lavinmq"
    clustering_on_leader_elected: str | None = None  # shell command, run in the background
    clustering_on_leader_lost: str | None = None
    clustering_lease_ttl: int = 2
    # MQTT 3.1.1 (lavinmq/mqtt), LavinMQ's [mqtt] section; a port of 0 or -1 is off
    mqtt_bind: str = "127.0.0.1"
    mqtt_port: int = 1883
    mqtts_port: int = 8883              # once tls_cert is set, as AMQPS
    mqtt_max_inflight_messages: int = 65535   # QoS 1/2 deliveries in flight per session
    mqtt_max_packet_size: int = 268435455
    # PUBACK/PUBREC once the message is in its queues (LavinMQ, Mosquitto), or
    # true: once the group commit put it on disk (and, on a cluster's leader,
    # on the in-sync followers), as AMQP's publisher confirms
    mqtt_puback_waits_for_disk: bool = False
    mqtt_default_vhost: str = "/"       # for user names without "vhost:"
    # safe defaults, unlike LavinMQ's (false, none): README, "Security"
    mqtt_permission_check_enabled: bool = True
    mqtt_client_id_validation: str = "owner"  # a session is its user's; "username": the id is the user
    #                                           name; "none": any user takes any session (LavinMQ)
    tls_keylog_file: str | None = None    # TLS session keys written here (debugging), as LavinMQ's
    # [sni:HOSTNAME] sections: hostname -> their settings (lavinmq.sni)
    sni_hosts: dict = dataclasses.field(default_factory=dict)
    # UNIX sockets (LavinMQ's [amqp] / [mgmt] / [mqtt] unix_path), PROXY protocol on the AMQP and MQTT ports
    amqp_unix_path: str = ""
    http_unix_path: str = ""
    mqtt_unix_path: str = ""
    tcp_proxy_protocol: bool = False
    # browsers' WebSocket upgrades taken besides the broker's own origin:
    # "scheme://host[:port]" list, "*" any (LavinMQ's way); README, "Security"
    websocket_allowed_origins: str = ""
    proxy_protocol_trusted_sources: str = ""     # IPs and CIDRs; empty: every source (LavinMQ's)
    # sign-in backends ([main] auth_backends: local, oauth) and LavinMQ's [oauth] settings
    auth_backends: str = ""
    oauth_issuer: str | None = None
    oauth_resource_server_id: str | None = None
    oauth_preferred_username_claims: str = "sub,client_id"
    oauth_additional_scopes_keys: str = ""
    oauth_scope_prefix: str | None = None
    oauth_verify_aud: bool = True
    oauth_audience: str | None = None
    oauth_jwks_cache_ttl: int = 3600      # s, unless the JWKS answer's Cache-Control says
    oauth_client_id: str | None = None    # the management UI's sign-in (with mgmt_base_url)
    oauth_mgmt_base_url: str | None = None
    oauth_mgmt_scopes: str = "openid profile"
    # where each non-default value came from, for error messages
    sources: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)
    # the command line it was loaded from, to reload on SIGHUP
    argv: list = dataclasses.field(default_factory=list, repr=False, compare=False)
    # settings that were accepted but ignored; cli logs them
    warnings: list = dataclasses.field(default_factory=list, repr=False, compare=False)

    @classmethod
    def load(cls, argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> "Config":
        """Parse everything: defaults, ini file, environment, flags. Raises
        ConfigError on a bad value; -h/--version/bad flags raise SystemExit
        as argparse does."""
        env = os.environ if env is None else env
        args = parse_args(argv)
        config = cls()
        config.argv = list(sys.argv[1:] if argv is None else argv)
        config.config_file = args.config or default_config_file(env)
        if config.config_file:
            apply_ini(config, config.config_file)
        apply_env(config, env)
        apply_args(config, args)
        config.validate()
        return config

    @property
    def disk_free_limit(self):
        """Bytes free below which publishers are blocked: free_disk_min, or
        room for three segments when it is not set."""
        if self.free_disk_min is None:
            return 3 * self.segment_size
        return self.free_disk_min

    def set(self, field, raw, where):
        """Set a field from a string (ini or environment), checked."""
        value = convert(field, raw, where)
        check(field, value, where)
        setattr(self, field, value)
        self.sources[field] = where

    def validate(self):
        """Check every field, also for a Config built in code."""
        for field in OPTIONS:
            check(field, getattr(self, field), self.sources.get(field, field))
        if self.clustering:
            from lavinmq.clustering.settings import check_clustering
            check_clustering(self)


@dataclasses.dataclass(frozen=True)
class Option:
    kind: str                # "str", "int", "bool", "level", "hash"
    ini: tuple = ()          # (section, key) pairs; the first is the canonical one
    env: tuple = ()          # variables, a later one wins over an earlier one
    lo: int = 0
    hi: int = 0
    optional: bool = False   # an empty string means None
    choices: tuple = ()      # for kind "choice"


PORT = dict(lo=0, hi=65535)
OPTIONS = {
    "data_dir": Option("str", (("main", "data_dir"),),
                       ("STATE_DIRECTORY", "LAVINMQ_DATADIR", "LAVINMQ_DATA_DIR")),
    "log_level": Option("level", (("main", "log_level"),), ("LAVINMQ_LOG_LEVEL",)),
    "log_file": Option("str", (("main", "log_file"),), ("LAVINMQ_LOG_FILE",), optional=True),
    "data_dir_lock": Option("bool", (("main", "data_dir_lock"),)),
    "segment_size": Option("int", (("main", "segment_size"),), lo=4096, hi=2 ** 31 - 1),
    "set_timestamp": Option("bool", (("main", "set_timestamp"), ("amqp", "set_timestamp"))),
    "default_user": Option("str", (("main", "default_user"),), ("LAVINMQ_DEFAULT_USER",)),
    "default_password": Option("str", (("main", "default_password"),)),
    "default_password_hash": Option("hash", (("main", "default_password_hash"),),
                                    ("LAVINMQ_DEFAULT_PASSWORD",), optional=True),
    "default_user_only_loopback": Option("bool", (("main", "default_user_only_loopback"),
                                                  ("main", "guest_only_loopback"))),
    # LavinMQ reads max_message_size from [amqp]; [main] is accepted too
    "max_message_size": Option("int", (("amqp", "max_message_size"), ("main", "max_message_size")),
                               lo=0, hi=2 ** 32 - 1),
    "free_disk_min": Option("int", (("main", "free_disk_min"),), lo=0, hi=2 ** 63 - 1, optional=True),
    "sync": Option("bool", (("main", "sync"),), ("LAVINMQ_SYNC",)),
    "vm_memory_high_watermark": Option("float", (("main", "vm_memory_high_watermark"),), lo=0, hi=1),
    "amqp_bind": Option("str", (("amqp", "bind"),), ("LAVINMQ_AMQP_BIND",)),
    "amqp_port": Option("int", (("amqp", "port"),), ("LAVINMQ_AMQP_PORT",), **PORT),
    "heartbeat": Option("int", (("amqp", "heartbeat"),), lo=0, hi=65535),
    "frame_max": Option("int", (("amqp", "frame_max"),), lo=4096, hi=2 ** 32 - 1),
    "channel_max": Option("int", (("amqp", "channel_max"),), lo=0, hi=65535),
    "http_bind": Option("str", (("mgmt", "bind"),), ("LAVINMQ_HTTP_BIND",)),
    "http_port": Option("int", (("mgmt", "port"),), ("LAVINMQ_HTTP_PORT",), **PORT),
    "metrics_http_bind": Option("str", (("main", "metrics_http_bind"),)),
    "metrics_http_port": Option("int", (("main", "metrics_http_port"),), **PORT),
    "control_unix_path": Option("str", (("main", "control_unix_path"),), ("LAVINMQ_CONTROL_UNIX_PATH",)),
    "stats_interval": Option("int", (("main", "stats_interval"),), lo=100, hi=3_600_000),
    "stats_log_size": Option("int", (("main", "stats_log_size"),), lo=2, hi=10_000),   # 28 B/sample/queue
    "consumer_timeout_loop_interval": Option("int", (("main", "consumer_timeout_loop_interval"),), lo=1,
                                             hi=86400),
    "shutdown_drain_timeout": Option("float", (("main", "shutdown_drain_timeout"),), lo=0, hi=3600),
    "free_disk_warn": Option("int", (("main", "free_disk_warn"),), lo=0, hi=2 ** 63 - 1),
    "max_deleted_definitions": Option("int", (("main", "max_deleted_definitions"),), lo=1, hi=2 ** 31 - 1),
    "tcp_nodelay": Option("bool", (("main", "tcp_nodelay"),)),
    "tcp_keepalive": Option("keepalive", (("main", "tcp_keepalive"),)),
    # as SO_RCVBUF/SO_SNDBUF take them (an int); 0 or empty: the kernel's default
    "tcp_recv_buffer_size": Option("int", (("main", "tcp_recv_buffer_size"),), lo=0, hi=2 ** 31 - 1,
                                   optional=True),
    "tcp_send_buffer_size": Option("int", (("main", "tcp_send_buffer_size"),), lo=0, hi=2 ** 31 - 1,
                                   optional=True),
    "consumer_timeout": Option("int", (("main", "consumer_timeout"), ("amqp", "consumer_timeout")),
                               lo=1, hi=2 ** 63 - 1, optional=True),
    "default_consumer_prefetch": Option("int", (("main", "default_consumer_prefetch"),
                                                ("amqp", "default_consumer_prefetch")),
                                        ("LAVINMQ_DEFAULT_CONSUMER_PREFETCH",), lo=0, hi=65535),
    "log_exchange": Option("bool", (("main", "log_exchange"),)),
    "pidfile": Option("str", (("main", "pidfile"),), optional=True),
    "load_definitions": Option("str", (("main", "load_definitions"),), optional=True),
    "max_consumers_per_channel": Option("int", (("amqp", "max_consumers_per_channel"),), lo=0, hi=2 ** 31 - 1),
    "default_consistent_hash_algorithm": Option("choice", (("main", "default_consistent_hash_algorithm"),),
                                                choices=("ring", "jump")),
    "max_policy_instructions": Option("int", (("main", "max_policy_instructions"),), lo=100, hi=2 ** 31 - 1),
    "max_deduplication_cache_size": Option("int", (("main", "max_deduplication_cache_size"),), lo=1,
                                           hi=2 ** 28),
    "handshake_timeout": Option("int", (("amqp", "handshake_timeout"),), lo=1, hi=3600),
    "unfinished_timeout": Option("int", (("amqp", "unfinished_timeout"),), lo=1, hi=86400),
    "http_read_timeout": Option("int", (("mgmt", "read_timeout"),), lo=1, hi=3600),
    "max_connections": Option("int", (("main", "max_connections"),), lo=0, hi=2 ** 31 - 1),
    "max_connections_per_address": Option("int", (("main", "max_connections_per_address"),),
                                          lo=0, hi=2 ** 31 - 1),
    "loopback_users": Option("str", (("main", "loopback_users"),)),
    "amqps_port": Option("int", (("amqp", "tls_port"),), ("LAVINMQ_AMQPS_PORT",), **PORT),
    "https_port": Option("int", (("mgmt", "tls_port"),), ("LAVINMQ_HTTPS_PORT",), **PORT),
    # LavinMQ also reads them from [amqp] and [mgmt] (deprecated there)
    "tls_cert": Option("str", (("main", "tls_cert"), ("amqp", "tls_cert"), ("mgmt", "tls_cert")),
                       ("LAVINMQ_TLS_CERT_PATH",), optional=True),
    "tls_key": Option("str", (("main", "tls_key"), ("amqp", "tls_key"), ("mgmt", "tls_key")),
                      ("LAVINMQ_TLS_KEY_PATH",), optional=True),
    "tls_ciphers": Option("str", (("main", "tls_ciphers"),), ("LAVINMQ_TLS_CIPHERS",), optional=True),
    "tls_min_version": Option("choice", (("main", "tls_min_version"),), ("LAVINMQ_TLS_MIN_VERSION",),
                              optional=True, choices=("1.0", "1.1", "1.2", "1.3")),
    "tls_verify_peer": Option("bool", (("main", "tls_verify_peer"),)),
    "tls_ca_cert": Option("str", (("main", "tls_ca_cert"),), optional=True),
    "clustering": Option("bool", (("clustering", "enabled"),), ("LAVINMQ_CLUSTERING",)),
    "clustering_bind": Option("str", (("clustering", "bind"),), ("LAVINMQ_CLUSTERING_BIND",)),
    "clustering_port": Option("int", (("clustering", "port"),), ("LAVINMQ_CLUSTERING_PORT",), lo=1, hi=65535),
    "clustering_advertised_uri": Option("str", (("clustering", "advertised_uri"),),
                                        ("LAVINMQ_CLUSTERING_ADVERTISED_URI",), optional=True),
    "clustering_etcd_endpoints": Option("str", (("clustering", "etcd_endpoints"),),
                                        ("LAVINMQ_CLUSTERING_ETCD_ENDPOINTS",)),
    "clustering_etcd_prefix": Option("str", (("clustering", "etcd_prefix"),), ("LAVINMQ_CLUSTERING_ETCD_PREFIX",)),
    "clustering_on_leader_elected": Option("str", (("clustering", "on_leader_elected"),), optional=True),
    "clustering_on_leader_lost": Option("str", (("clustering", "on_leader_lost"),), optional=True),
    "clustering_lease_ttl": Option("int", (("clustering", "lease_ttl"),), ("LAVINMQ_CLUSTERING_LEASE_TTL",),
                                   lo=1, hi=3600),
    "mqtt_bind": Option("str", (("mqtt", "bind"),)),
    "mqtt_port": Option("int", (("mqtt", "port"),), lo=-1, hi=65535),
    "mqtts_port": Option("int", (("mqtt", "tls_port"),), lo=-1, hi=65535),
    "mqtt_max_inflight_messages": Option("int", (("mqtt", "max_inflight_messages"),), lo=1, hi=65535),
    "mqtt_max_packet_size": Option("int", (("mqtt", "max_packet_size"),), lo=64, hi=268435455),
    "mqtt_puback_waits_for_disk": Option("bool", (("mqtt", "puback_waits_for_disk"),)),
    "mqtt_default_vhost": Option("str", (("mqtt", "default_vhost"),)),
    "mqtt_permission_check_enabled": Option("bool", (("mqtt", "permission_check_enabled"),)),
    "mqtt_client_id_validation": Option("choice", (("mqtt", "client_id_validation"),),
                                        choices=("none", "username", "owner")),
    "tls_keylog_file": Option("str", (("main", "tls_keylog_file"),), optional=True),
    "auth_backends": Option("str", (("main", "auth_backends"),)),
    "oauth_issuer": Option("str", (("oauth", "issuer"),), optional=True),
    "oauth_resource_server_id": Option("str", (("oauth", "resource_server_id"),), optional=True),
    "oauth_preferred_username_claims": Option("str", (("oauth", "preferred_username_claims"),)),
    "oauth_additional_scopes_keys": Option("str", (("oauth", "additional_scopes_keys"),)),
    "oauth_scope_prefix": Option("str", (("oauth", "scope_prefix"),), optional=True),
    "oauth_verify_aud": Option("bool", (("oauth", "verify_aud"),)),
    "oauth_audience": Option("str", (("oauth", "audience"),), optional=True),
    "oauth_jwks_cache_ttl": Option("int", (("oauth", "jwks_cache_ttl"),), lo=1, hi=86400 * 30),
    "oauth_client_id": Option("str", (("oauth", "client_id"),), optional=True),
    "oauth_mgmt_base_url": Option("str", (("oauth", "mgmt_base_url"),), optional=True),
    "oauth_mgmt_scopes": Option("str", (("oauth", "mgmt_scopes"),)),
    "amqp_unix_path": Option("str", (("amqp", "unix_path"),)),
    "http_unix_path": Option("str", (("mgmt", "unix_path"),)),
    "mqtt_unix_path": Option("str", (("mqtt", "unix_path"),)),
    "tcp_proxy_protocol": Option("proxy", (("amqp", "tcp_proxy_protocol"),)),
    "proxy_protocol_trusted_sources": Option("cidrs", (("amqp", "proxy_protocol_trusted_sources"),)),
    "websocket_allowed_origins": Option("origins", (("mgmt", "websocket_allowed_origins"),)),
}
INI_KEYS = {key: field for field, opt in OPTIONS.items() for key in opt.ini}

# The sections LavinMQ's ini has, with its keys that are harmless to
# ignore here: accepted with a warning. The README lists them. (Every
# [main] key of LavinMQ 2.9 is implemented or refused now.)
HARMLESS_KEYS = {
    "main": set(),
    "amqp": set(),
    "mgmt": set(),
    "mqtt": set(),
    # deprecated in LavinMQ 2.9, where confirms wait for the in-sync replicas (as here)
    "clustering": {"max_unsynced_actions"},
    "oauth": set(),
    # LavinMQ's fibers yield to the others after reading or delivering this
    # many bytes; here the event loop serves one read batch of a connection
    # per turn and nothing else shares its thread, so there is nothing to set
    "experimental": {"yield_each_received_bytes", "yield_each_delivered_bytes"},
}
NO_EFFECT_BECAUSE = {
    ("clustering", "max_unsynced_actions"): "is deprecated and has no effect: confirms wait for every in-sync replica",
    ("experimental", "yield_each_received_bytes"): "has no effect here, ignored (LavinMQ's fiber yield threshold: "
                                                   "here each connection's read batch is one turn of the event loop)",
    ("experimental", "yield_each_delivered_bytes"): "has no effect here, ignored (LavinMQ's fiber yield threshold: "
                                                    "here a connection's deliveries are written in batches, one per "
                                                    "turn of the event loop)",
}
# values LavinMQ reads as integers: a bad one still stops the start, naming it
NO_EFFECT_INTEGERS = {("experimental", "yield_each_received_bytes"), ("experimental", "yield_each_delivered_bytes")}
# Known to LavinMQ, not implemented here: a start with one of them set is
# refused, naming it, unless its value turns the feature off ("false",
# "0", empty): a broker must not silently lack what its ini asks for.
UNSUPPORTED_KEYS = {
    # tls_ktls: kernel TLS offload. socket_buffer_size: the size of the
    # userspace buffer LavinMQ puts between a fiber's reads and writes and
    # its socket; here the event loop reads what the socket has into the
    # connection's frame buffer (which must hold a whole frame, frame_max)
    # and every read batch's writes leave in one send: no such buffer exists
    "main": {"tls_ktls", "socket_buffer_size"},
    "amqp": {"amqp_systemd_socket_name"},
    "mgmt": {"http_systemd_socket_name"},
    "mqtt": {"mqtt_systemd_socket_name"},
}
UNSUPPORTED_SECTIONS = set()       # a section none of whose keys is implemented
# an unsupported key or section set to one of these asks for nothing that is lacking
OFF_VALUES = booleans.FALSE_WORDS | {"", "none"}


def default_config_file(env):
    directory = (env.get("LAVINMQ_CONFIGURATION_DIRECTORY") or env.get("CONFIGURATION_DIRECTORY")
                 or DEFAULT_CONFIG_DIR)
    path = os.path.join(directory, "lavinmq.ini")
    return path if os.path.isfile(path) else None


def convert(field, raw, where):
    """A string from the ini file or the environment as the field's type."""
    opt = OPTIONS[field]
    raw = raw.strip()
    if opt.optional and raw == "":
        return None
    if opt.kind == "int":
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"{where}: {raw!r} is not an integer") from None
    if opt.kind == "float":
        try:
            return float(raw)
        except ValueError:
            raise ConfigError(f"{where}: {raw!r} is not a number") from None
    if opt.kind == "bool":
        return booleans.parse(raw, where)
    if opt.kind == "level":
        return raw.lower()
    if opt.kind == "keepalive":
        from lavinmq.sockopts import parse_keepalive
        return parse_keepalive(raw, where)
    if opt.kind == "proxy":
        # LavinMQ: true (or 1, yes, on) or 2 turn it on; the header's version is read from it
        low = raw.lower()
        if low in booleans.TRUE_WORDS or low == "2":
            return True
        if low in booleans.FALSE_WORDS or low == "":
            return False
        raise ConfigError(f"{where}: {raw!r} is not true, false, 1 or 2")
    if field == "default_consistent_hash_algorithm":
        # Crystal's enum parse, as LavinMQ reads it: case and underscores aside
        return raw.replace("_", "").lower()
    return raw


def check(field, value, where):
    opt = OPTIONS[field]
    if value is None and opt.optional:
        return
    if opt.kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: {value!r} is not an integer")
        if not opt.lo <= value <= opt.hi:
            raise ConfigError(f"{where}: {value} is out of range ({opt.lo}..{opt.hi})")
    elif opt.kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: {value!r} is not a number")
        if not opt.lo <= value <= opt.hi:
            raise ConfigError(f"{where}: {value} is out of range ({opt.lo}..{opt.hi})")
    elif opt.kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: {value!r} is not a boolean (true/false)")
    elif opt.kind == "level":
        if value not in LOG_LEVELS:
            raise ConfigError(f"{where}: unknown log level {value!r} (one of {', '.join(LOG_LEVELS)})")
    elif opt.kind == "proxy":
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: {value!r} is not a boolean")
    elif opt.kind == "keepalive":
        from lavinmq.sockopts import format_keepalive, parse_keepalive
        if value is not None and (not isinstance(value, tuple) or len(value) != 3):
            raise ConfigError(f"{where}: {value!r} is not (idle, interval, count)")
        parse_keepalive(format_keepalive(value), where)      # the same ranges as from the ini file
    elif opt.kind == "cidrs":
        from lavinmq.proxy_protocol import parse_trusted
        try:
            parse_trusted(value)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{where}: {exc}") from None
    elif opt.kind == "origins":
        from lavinmq.websocket.origin import parse_allowed
        try:
            parse_allowed(value)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{where}: {exc}") from None
    elif opt.kind == "choice":
        if value not in opt.choices:
            raise ConfigError(f"{where}: {value!r} is not one of {', '.join(opt.choices)}")
    elif opt.kind == "hash":
        try:
            check_hash(value, "sha256")
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    elif not isinstance(value, str) or (value == "" and field in ("data_dir", "default_user",
                                                                     "clustering_etcd_endpoints",
                                                                     "clustering_etcd_prefix")):
        raise ConfigError(f"{where}: {value!r} must be a non-empty string")
    elif field in ("tls_cert", "tls_key", "tls_ca_cert") and not os.access(value, os.R_OK):
        raise ConfigError(f"{where}: cannot read {value}")


def apply_ini(config, path):
    # No interpolation ("%" is common in passwords), no inline comments
    # (LavinMQ has none, and "#" may be in a value), no DEFAULT section magic.
    parser = configparser.ConfigParser(interpolation=None, default_section="\0")
    try:
        with open(path, encoding="utf-8") as f:
            parser.read_file(f)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except (configparser.Error, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    for section in parser.sections():
        if section == "http":   # LavinMQ's old name for [mgmt]
            config.warnings.append(f"{path}: section [http] is deprecated, use [mgmt]")
        name = "mgmt" if section == "http" else section
        if name.startswith("sni:"):
            from lavinmq import sni
            sni.parse_section(config, name[4:], parser.items(section), path)
            continue
        if name not in HARMLESS_KEYS and name not in UNSUPPORTED_SECTIONS:
            raise ConfigError(f"{path}: [{section}]: unknown section")
        for key, raw in parser.items(section):
            where = f"[{section}] {key}"
            field = INI_KEYS.get((name, key))
            if field is not None:
                try:
                    config.set(field, raw, where)
                except ConfigError as exc:
                    raise ConfigError(f"{path}: {exc}") from None
            elif key in HARMLESS_KEYS.get(name, ()):
                if (name, key) in NO_EFFECT_INTEGERS and not re.fullmatch(r"\d{1,10}", raw.strip()):
                    raise ConfigError(f"{path}: {where}: {raw.strip()!r} is not a non-negative integer")
                because = NO_EFFECT_BECAUSE.get((name, key), "has no effect here, ignored")
                config.warnings.append(f"{path}: {where} {because}")
            elif raw.strip().lower() in OFF_VALUES and (name in UNSUPPORTED_SECTIONS
                                                         or key in UNSUPPORTED_KEYS.get(name, ())):
                continue        # turned off: nothing is lacking
            elif name in UNSUPPORTED_SECTIONS or key in UNSUPPORTED_KEYS.get(name, ()):
                raise ConfigError(f"{path}: {where} = {raw.strip()}: not supported by this broker "
                                  f"(remove it, or set it to false)")
            else:
                raise ConfigError(f"{path}: {where}: unknown setting")
    _deprecated_password_hash(config, path)


def _deprecated_password_hash(config, path):
    """LavinMQ reads [main] default_password as a password hash (deprecated
    there for default_password_hash); here it is the password itself,
    unless it is a hash, which is taken as LavinMQ takes it."""
    if "default_password" not in config.sources or "default_password_hash" in config.sources:
        return
    try:
        check_hash(config.default_password, "sha256")
    except ValueError:
        return
    config.default_password_hash = config.default_password
    config.sources["default_password_hash"] = config.sources["default_password"]
    config.warnings.append(f"{path}: [main] default_password holds a password hash: taken as "
                           f"default_password_hash (LavinMQ's deprecated form), use that key")


def apply_env(config, env):
    for field, opt in OPTIONS.items():
        for name in opt.env:
            if name in env:
                config.set(field, env[name], f"environment {name}")


# Flags that map one to one onto a field: (dest, flag as named in errors)
CLI_FIELDS = {"data_dir": "--data-dir", "amqp_bind": "--amqp-bind", "amqp_port": "--amqp-port",
              "http_bind": "--http-bind", "http_port": "--http-port", "log_level": "--log-level",
              "metrics_http_bind": "--metrics-http-bind", "metrics_http_port": "--metrics-http-port",
              "default_user": "--default-user", "default_password_hash": "--default-password-hash",
              "default_user_only_loopback": "--default-user-only-loopback",
              "amqps_port": "--amqps-port", "https_port": "--https-port", "tls_cert": "--cert",
              "tls_key": "--key", "tls_ciphers": "--ciphers", "tls_min_version": "--tls-min-version",
              "handshake_timeout": "--handshake-timeout", "loopback_users": "--loopback-users",
              "clustering_bind": "--clustering-bind", "clustering_port": "--clustering-port",
              "clustering_advertised_uri": "--clustering-advertised-uri",
              "clustering_etcd_endpoints": "--clustering-etcd-endpoints",
              "clustering_etcd_prefix": "--clustering-etcd-prefix",
              "clustering_on_leader_elected": "--clustering-on-leader-elected",
              "clustering_on_leader_lost": "--clustering-on-leader-lost",
              "clustering_lease_ttl": "--clustering-lease-ttl",
              "mqtt_bind": "--mqtt-bind", "mqtt_port": "--mqtt-port", "mqtts_port": "--mqtts-port",
              "pidfile": "--pidfile", "control_unix_path": "--control-unix-path",
              "amqp_unix_path": "--amqp-unix-path", "http_unix_path": "--http-unix-path",
              "mqtt_unix_path": "--mqtt-unix-path",
              "default_consumer_prefetch": "--default-consumer-prefetch"}
# LavinMQ's deprecated flags it still accepts: (dest, the flag, what replaces it)
DEPRECATED_FLAGS = (("default_password_hash", "--default-password", "--default-password-hash"),
                    ("default_user_only_loopback", "--guest-only-loopback", "--default-user-only-loopback"))


# what -b moves besides LavinMQ's three (AMQP, HTTP, MQTT): the rest of a
# node's listeners, so that nodes started with -b alone on one machine
# (127.0.0.11, 127.0.0.12, ...) never meet on a port. Not to a wildcard:
# the metrics port has no authentication, and LavinMQ keeps it on 127.0.0.1
BIND_ALSO = ("metrics_http_bind", "clustering_bind")
WILDCARD_BINDS = ("0.0.0.0", "::", "[::]", "")


def apply_args(config, args):
    if args.bind is not None:
        for field in ("amqp_bind", "http_bind", "mqtt_bind"):
            config.set(field, args.bind, "--bind")
        if args.bind.strip() not in WILDCARD_BINDS:
            for field in BIND_ALSO:
                if field not in config.sources:     # named in the ini file or environment: kept
                    config.set(field, args.bind, "--bind")
    for field, flag, instead in DEPRECATED_FLAGS:
        value = getattr(args, "deprecated_" + field)
        if value is not None:
            config.warnings.append(f"{flag} is deprecated, use {instead}")
            config.set(field, value, flag)
    for field, flag in CLI_FIELDS.items():
        value = getattr(args, field)
        if value is not None:
            config.set(field, value, flag)
    # LavinMQ's flags for what only its Crystal runtime has: accepted, no effect
    if args.tls_ktls is not None:
        if booleans.parse(args.tls_ktls, "--tls-ktls"):     # a boolean, as LavinMQ reads it
            # asked for and not there: refused, as an unsupported ini key is
            raise ConfigError("--tls-ktls: kernel TLS offload is not supported by this broker (--tls-ktls false)")
    if args.raise_gc_warn:
        raise ConfigError("--raise-gc-warn: warnings of LavinMQ's Crystal garbage collector; "
                          "not supported by this broker")
    if args.debug:
        config.set("log_level", "debug", "--debug")
    if args.no_sync:
        config.sync = False
        config.sources["sync"] = "--no-sync"
    if args.no_data_dir_lock:
        config.data_dir_lock = False
        config.sources["data_dir_lock"] = "--no-data-dir-lock"
    if args.clustering:
        config.clustering = True
        config.sources["clustering"] = "--clustering"
    if args.clustering_max_unsynced_actions is not None:
        config.warnings.append("--clustering-max-unsynced-actions is deprecated and has no effect: confirms "
                               "wait for every in-sync replica")


def build_parser() -> argparse.ArgumentParser:
    """The `lavinmq` command line. Values stay strings here, so that a bad
    one is reported by Config.set with the flag's name, like ini values."""
    p = argparse.ArgumentParser(prog="lavinmq", description="AMQP 0-9-1 message broker")
    p.add_argument("-D", "--data-dir", dest="data_dir", metavar="DIR",
                   help="data directory (default /var/lib/lavinmq)")
    p.add_argument("-c", "--config", metavar="FILE",
                   help="ini file with [main], [amqp], [mgmt] (default /etc/lavinmq/lavinmq.ini if present)")
    p.add_argument("-b", "--bind", metavar="ADDR",
                   help="address for AMQP, MQTT and HTTP to listen on; a specific address (not 0.0.0.0 or ::) "
                        "moves the metrics and clustering listeners too, unless they are set otherwise")
    p.add_argument("-p", "--amqp-port", dest="amqp_port", metavar="PORT", help="AMQP port (default 5672)")
    p.add_argument("--amqp-bind", dest="amqp_bind", metavar="ADDR", help="AMQP address (default 127.0.0.1)")
    p.add_argument("--http-port", dest="http_port", metavar="PORT", help="HTTP port (default 15672)")
    p.add_argument("--http-bind", dest="http_bind", metavar="ADDR", help="HTTP address (default 127.0.0.1)")
    p.add_argument("--metrics-http-port", dest="metrics_http_port", metavar="PORT",
                   help="Prometheus-only listener without auth (default 15692, 0 = off)")
    p.add_argument("--metrics-http-bind", dest="metrics_http_bind", metavar="ADDR",
                   help="its address (default 127.0.0.1, or -b's specific address)")
    p.add_argument("-l", "--log-level", dest="log_level", metavar="LEVEL",
                   help=f"one of {', '.join(LOG_LEVELS)} (default info)")
    p.add_argument("-d", "--debug", action="store_true", help="same as --log-level debug")
    p.add_argument("--default-user", dest="default_user", metavar="USER",
                   help="user created with a new data directory (default guest)")
    p.add_argument("--default-password-hash", dest="default_password_hash", metavar="HASH",
                   help="its password as a rabbit_password_hashing_sha256 hash (default: of 'guest')")
    p.add_argument("--default-user-only-loopback", dest="default_user_only_loopback", metavar="BOOL",
                   help="the default user may only connect from loopback (default true)")
    p.add_argument("--loopback-users", dest="loopback_users", metavar="USERS",
                   help="comma-separated users that may only log in from loopback (default guest)")
    p.add_argument("--handshake-timeout", dest="handshake_timeout", metavar="SECONDS",
                   help="close AMQP sockets that have not logged in within this time (default 10)")
    p.add_argument("--amqps-port", dest="amqps_port", metavar="PORT",
                   help="AMQPS port, once --cert is given (default 5671, 0 = off)")
    p.add_argument("--https-port", dest="https_port", metavar="PORT",
                   help="HTTPS management port, once --cert is given (default 15671, 0 = off)")
    p.add_argument("--mqtt-port", dest="mqtt_port", metavar="PORT", help="MQTT port (default 1883, 0 = off)")
    p.add_argument("--mqtts-port", dest="mqtts_port", metavar="PORT",
                   help="MQTT over TLS port, once --cert is given (default 8883, 0 = off)")
    p.add_argument("--mqtt-bind", dest="mqtt_bind", metavar="ADDR", help="MQTT address (default 127.0.0.1)")
    p.add_argument("--cert", dest="tls_cert", metavar="FILE", help="TLS certificate (with its chain)")
    p.add_argument("--key", dest="tls_key", metavar="FILE",
                   help="private key for the TLS certificate (default: in the --cert file)")
    p.add_argument("--ciphers", dest="tls_ciphers", metavar="CIPHERS", help="OpenSSL cipher list to allow")
    p.add_argument("--tls-min-version", dest="tls_min_version", metavar="VERSION",
                   help="minimum TLS version: 1.0, 1.1, 1.2 or 1.3 (default 1.2)")
    p.add_argument("--amqp-unix-path", dest="amqp_unix_path", metavar="PATH",
                   help="AMQP on this UNIX socket too ([amqp] unix_path)")
    p.add_argument("--http-unix-path", dest="http_unix_path", metavar="PATH",
                   help="the management API on this UNIX socket too ([mgmt] unix_path)")
    p.add_argument("--mqtt-unix-path", dest="mqtt_unix_path", metavar="PATH",
                   help="MQTT on this UNIX socket too ([mqtt] unix_path)")
    p.add_argument("--pidfile", dest="pidfile", metavar="FILE",
                   help="write the process id to FILE at start; removed at a clean stop")
    p.add_argument("--control-unix-path", dest="control_unix_path", metavar="PATH",
                   help="UNIX socket lavinmqctl connects to (default DATA_DIR/lavinmqctl.sock)")
    p.add_argument("--default-consumer-prefetch", dest="default_consumer_prefetch", metavar="NUMBER",
                   help="prefetch of consumers on channels without basic.qos (default 65535)")
    p.add_argument("--default-password", dest="deprecated_default_password_hash", metavar="PASSWORD-HASH",
                   help="(deprecated) same as --default-password-hash")
    p.add_argument("--guest-only-loopback", dest="deprecated_default_user_only_loopback", metavar="BOOL",
                   help="(deprecated) same as --default-user-only-loopback")
    p.add_argument("--tls-ktls", dest="tls_ktls", metavar="BOOL",
                   help="kernel TLS offload: not supported here (true is refused, false accepted)")
    p.add_argument("--raise-gc-warn", action="store_true",
                   help="LavinMQ's Crystal GC warnings: not supported here (refused)")
    p.add_argument("--no-data-dir-lock", action="store_true", help="do not flock DATA_DIR/.lock")
    p.add_argument("--no-sync", action="store_true",
                   help="send confirms once messages are written, without waiting for the disk "
                        "(faster; a power loss can lose confirmed messages, a crash cannot)")
    c = p.add_argument_group("clustering (etcd leader election, replication to followers)")
    c.add_argument("--clustering", action="store_true", help="run as a node of a cluster")
    c.add_argument("--clustering-bind", dest="clustering_bind", metavar="ADDR",
                   help="address the leader takes followers on (default 127.0.0.1, or -b's specific address)")
    c.add_argument("--clustering-port", dest="clustering_port", metavar="PORT",
                   help="port the leader takes followers on (default 5679)")
    c.add_argument("--clustering-advertised-uri", dest="clustering_advertised_uri", metavar="URI",
                   help="where followers reach this node when it leads (default tcp://<bind or hostname>:<port>)")
    c.add_argument("--clustering-etcd-endpoints", dest="clustering_etcd_endpoints", metavar="URIS",
                   help="comma-separated etcd endpoints (default localhost:2379)")
    c.add_argument("--clustering-etcd-prefix", dest="clustering_etcd_prefix", metavar="KEY",
                   help="prefix of the cluster's keys in etcd (default lavinmq)")
    c.add_argument("--clustering-max-unsynced-actions", dest="clustering_max_unsynced_actions", metavar="N",
                   help="deprecated (LavinMQ 2.9), no effect")
    c.add_argument("--clustering-on-leader-elected", dest="clustering_on_leader_elected", metavar="CMD",
                   help="shell command run when this node becomes the leader")
    c.add_argument("--clustering-on-leader-lost", dest="clustering_on_leader_lost", metavar="CMD",
                   help="shell command run when this node loses the leadership")
    c.add_argument("--clustering-lease-ttl", dest="clustering_lease_ttl", metavar="SECONDS",
                   help="etcd lease of the leader; a crashed leader is replaced after about this long (default 2)")
    p.add_argument("-v", "--version", action="version", version=f"lavinmq {lavinmq.__version__}")
    p.add_argument("--build-info", action=BuildInfo, help="show build information and exit")
    return p


class BuildInfo(argparse.Action):
    """LavinMQ's --build-info: the version and what it was built with."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(build_info())
        parser.exit()


def build_info():
    import platform
    import sysconfig
    from lavinmq._core import codec
    lines = [f"lavinmq {lavinmq.__version__}",
             f"Python {platform.python_version()} ({platform.python_implementation()}, "
             f"{platform.python_compiler()}) on {platform.machine()} {platform.system()}",
             f"Extensions: {os.path.dirname(codec.__file__)} ({sysconfig.get_config_var('SOABI')})"]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return build_parser().parse_args(argv)
