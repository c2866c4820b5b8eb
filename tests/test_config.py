"""Config: defaults < ini file < environment < CLI; every bad value names
where it came from."""
import textwrap

import pytest

from lavinmq.config import Config, parse_args
from lavinmq.errors import ConfigError

GUEST_HASH = "+pHuxkR9fCyrrwXjOD4BP4XbzO3l8LJr8YkThMgJ0yVHFRE+"   # LavinMQ's default: sha256 of "guest"


@pytest.fixture
def env(tmp_path):
    """An environment whose default config directory is empty, so that a
    /etc/lavinmq/lavinmq.ini on the test machine cannot leak in."""
    empty = tmp_path / "etc"
    empty.mkdir()
    return {"LAVINMQ_CONFIGURATION_DIRECTORY": str(empty)}


def ini(tmp_path, text, name="lavinmq.ini"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_defaults(env):
    c = Config.load([], env)
    assert (c.data_dir, c.log_level, c.log_file, c.config_file) == ("/var/lib/lavinmq", "info", None, None)
    assert (c.amqp_bind, c.amqp_port, c.http_bind, c.http_port) == ("127.0.0.1", 5672, "127.0.0.1", 15672)
    assert (c.heartbeat, c.frame_max, c.channel_max) == (300, 131072, 2048)
    assert c.max_message_size == 128 * 1024 * 1024 and c.segment_size == 8 * 1024 * 1024
    assert c.data_dir_lock is True and c.set_timestamp is False and c.free_disk_min is None
    assert c.disk_free_limit == 3 * c.segment_size
    assert (c.default_user, c.default_password, c.default_password_hash) == ("guest", "guest", None)
    assert c.default_user_only_loopback is True
    assert c.warnings == []


def test_every_ini_key(tmp_path, env):
    path = ini(tmp_path, f"""
        [main]
        data_dir = /srv/lavin
        log_level = DEBUG
        log_file = /tmp/lavin.log
        data_dir_lock = false
        segment_size = 16777216
        set_timestamp = yes
        default_user = admin
        default_password = s3cr%t#x
        default_password_hash = {GUEST_HASH}
        default_user_only_loopback = off
        free_disk_min = 1_000_000
        [amqp]
        bind = ::
        port = 5673
        heartbeat = 0
        frame_max = 4096
        channel_max = 0
        max_message_size = 1024
        [mgmt]
        bind = 0.0.0.0
        port = 15673
        """)
    c = Config.load(["-c", path], env)
    assert c.config_file == path
    assert (c.data_dir, c.log_level, c.log_file, c.data_dir_lock) == ("/srv/lavin", "debug", "/tmp/lavin.log", False)
    assert (c.segment_size, c.set_timestamp, c.free_disk_min) == (16777216, True, 1_000_000)
    # no interpolation and no inline comments: "%" and "#" stay in the value
    assert (c.default_user, c.default_password) == ("admin", "s3cr%t#x")
    assert c.default_password_hash == GUEST_HASH and c.default_user_only_loopback is False
    assert (c.amqp_bind, c.amqp_port, c.heartbeat, c.frame_max, c.channel_max) == ("::", 5673, 0, 4096, 0)
    assert c.max_message_size == 1024
    assert (c.http_bind, c.http_port) == ("0.0.0.0", 15673)
    assert c.sources["amqp_port"] == "[amqp] port"


def test_precedence_ini_env_cli(tmp_path, env):
    path = ini(tmp_path, """
        [main]
        data_dir = /from/ini
        log_level = error
        [amqp]
        port = 1001
        bind = 10.0.0.1
        [mgmt]
        port = 2001
        """)
    c = Config.load(["-c", path], env)
    assert (c.data_dir, c.log_level, c.amqp_port, c.amqp_bind, c.http_port) == ("/from/ini", "error", 1001, "10.0.0.1", 2001)

    env.update(LAVINMQ_DATADIR="/from/env", LAVINMQ_LOG_LEVEL="warn", LAVINMQ_AMQP_PORT="1002",
               LAVINMQ_AMQP_BIND="10.0.0.2")
    c = Config.load(["-c", path], env)
    assert (c.data_dir, c.log_level, c.amqp_port, c.amqp_bind, c.http_port) == ("/from/env", "warn", 1002, "10.0.0.2", 2001)

    c = Config.load(["-c", path, "-D", "/from/cli", "-l", "trace", "-p", "1003", "--amqp-bind", "10.0.0.3"], env)
    assert (c.data_dir, c.log_level, c.amqp_port, c.amqp_bind, c.http_port) == ("/from/cli", "trace", 1003, "10.0.0.3", 2001)
    assert c.sources["amqp_port"] == "--amqp-port"


def test_env_variables(env):
    env.update(STATE_DIRECTORY="/state", LAVINMQ_HTTP_PORT="8080", LAVINMQ_HTTP_BIND="::1",
               LAVINMQ_DEFAULT_USER="admin", LAVINMQ_DEFAULT_PASSWORD=GUEST_HASH, LAVINMQ_LOG_FILE="/x.log")
    c = Config.load([], env)
    assert (c.data_dir, c.http_port, c.http_bind, c.log_file) == ("/state", 8080, "::1", "/x.log")
    assert (c.default_user, c.default_password_hash) == ("admin", GUEST_HASH)
    # LavinMQ's own variable wins over systemd's STATE_DIRECTORY
    env["LAVINMQ_DATADIR"] = "/lavin"
    assert Config.load([], env).data_dir == "/lavin"


def test_bind_sets_both_and_specific_flags_win(env):
    c = Config.load(["-b", "0.0.0.0"], env)
    assert (c.amqp_bind, c.http_bind) == ("0.0.0.0", "0.0.0.0")
    c = Config.load(["-b", "0.0.0.0", "--http-bind", "127.0.0.2", "--http-port", "0"], env)
    assert (c.amqp_bind, c.http_bind, c.http_port) == ("0.0.0.0", "127.0.0.2", 0)


def test_bind_moves_metrics_and_clustering_to_a_specific_address(env, tmp_path):
    """Issue 47 item 4: nodes started with -b alone on one machine (127.0.0.11,
    127.0.0.12) never meet on the metrics or clustering port; LavinMQ's -b
    moves AMQP, HTTP and MQTT only, and metrics stayed on 127.0.0.1."""
    c = Config.load(["-b", "127.0.0.12"], env)
    assert (c.amqp_bind, c.http_bind, c.mqtt_bind) == ("127.0.0.12",) * 3
    assert (c.metrics_http_bind, c.clustering_bind) == ("127.0.0.12", "127.0.0.12")
    # their own flags win, wherever they stand
    c = Config.load(["--metrics-http-bind", "127.0.0.1", "-b", "127.0.0.12", "--clustering-bind", "10.0.0.1"], env)
    assert (c.metrics_http_bind, c.clustering_bind) == ("127.0.0.1", "10.0.0.1")
    # as does the ini file: -b is the blanket, a key is a choice
    path = ini(tmp_path, "[main]\nmetrics_http_bind = 127.0.0.1\n[clustering]\nbind = 10.0.0.2\n")
    c = Config.load(["-c", path, "-b", "127.0.0.12"], env)
    assert (c.amqp_bind, c.metrics_http_bind, c.clustering_bind) == ("127.0.0.12", "127.0.0.1", "10.0.0.2")
    # a wildcard leaves them on loopback: the metrics port has no authentication
    for wildcard in ("0.0.0.0", "::"):
        c = Config.load(["-b", wildcard], env)
        assert c.amqp_bind == wildcard and (c.metrics_http_bind, c.clustering_bind) == ("127.0.0.1", "127.0.0.1")


def test_flags(env):
    c = Config.load(["--debug", "--no-data-dir-lock", "--default-user", "bob",
                     "--default-password-hash", GUEST_HASH, "--default-user-only-loopback", "false"], env)
    assert (c.log_level, c.data_dir_lock, c.default_user) == ("debug", False, "bob")
    assert c.default_password_hash == GUEST_HASH and c.default_user_only_loopback is False
    ns = parse_args(["-D", "/d", "-p", "1"])
    assert (ns.data_dir, ns.amqp_port) == ("/d", "1")


def test_default_config_file_is_found(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "lavinmq.ini").write_text("[amqp]\nport = 5999\n")
    for var in ("LAVINMQ_CONFIGURATION_DIRECTORY", "CONFIGURATION_DIRECTORY"):
        c = Config.load([], {var: str(etc)})
        assert c.amqp_port == 5999 and c.config_file == str(etc / "lavinmq.ini")
    # -c replaces the default file, it does not add to it
    other = ini(tmp_path, "[mgmt]\nport = 1\n", "other.ini")
    c = Config.load(["-c", other], {"LAVINMQ_CONFIGURATION_DIRECTORY": str(etc)})
    assert (c.amqp_port, c.http_port) == (5672, 1)


@pytest.mark.parametrize("section,key,value,message", [
    ("amqp", "port", "abc", "[amqp] port: 'abc' is not an integer"),
    ("amqp", "port", "65536", "[amqp] port: 65536 is out of range (0..65535)"),
    ("amqp", "port", "-1", "[amqp] port: -1 is out of range"),
    ("mgmt", "port", "99999", "[mgmt] port: 99999 is out of range"),
    ("amqp", "frame_max", "4095", "[amqp] frame_max: 4095 is out of range (4096.."),
    ("amqp", "channel_max", "70000", "[amqp] channel_max: 70000 is out of range"),
    ("amqp", "heartbeat", "1.5", "[amqp] heartbeat: '1.5' is not an integer"),
    ("amqp", "max_message_size", "-5", "[amqp] max_message_size: -5 is out of range"),
    ("main", "segment_size", "-1", "[main] segment_size: -1 is out of range"),
    ("main", "free_disk_min", "-1", "[main] free_disk_min: -1 is out of range"),
    ("main", "log_level", "verbose", "[main] log_level: unknown log level 'verbose'"),
    ("main", "data_dir_lock", "maybe", "[main] data_dir_lock: 'maybe' is not a boolean"),
    ("main", "set_timestamp", "2", "[main] set_timestamp: '2' is not a boolean"),
    ("main", "data_dir", "", "[main] data_dir: '' must be a non-empty string"),
    ("main", "default_password_hash", "Z3Vlc3Q=", "[main] default_password_hash: password hash is 5 bytes"),
    ("main", "default_password_hash", "!!", "[main] default_password_hash: password hash is not valid base64"),
])
def test_bad_ini_value_names_section_and_key(tmp_path, env, section, key, value, message):
    path = ini(tmp_path, f"[{section}]\n{key} = {value}\n")
    with pytest.raises(ConfigError) as e:
        Config.load(["-c", path], env)
    assert message in str(e.value)
    assert str(e.value).startswith(path)


def test_sni_verify_peer_is_a_boolean(tmp_path, env):
    ok = Config.load(["-c", ini(tmp_path, "[sni:a.example]\ntls_cert = /c.pem\namqp_tls_verify_peer = yes\n")], env)
    assert ok.sni_hosts["a.example"]["amqp_tls_verify_peer"] == "yes"
    path = ini(tmp_path, "[sni:a.example]\ntls_cert = /c.pem\ntls_verify_peer = ture\n")
    with pytest.raises(ConfigError, match=r"\[sni:a.example\] tls_verify_peer: 'ture' is not a boolean"):
        Config.load(["-c", path], env)


def test_unknown_key_and_section(tmp_path, env):
    with pytest.raises(ConfigError, match=r"\[amqp\] prot: unknown setting"):
        Config.load(["-c", ini(tmp_path, "[amqp]\nprot = 1\n")], env)
    with pytest.raises(ConfigError, match=r"\[mian\]: unknown section"):
        Config.load(["-c", ini(tmp_path, "[mian]\ndata_dir = /x\n")], env)
    # configparser's DEFAULT section is not special here
    with pytest.raises(ConfigError, match=r"\[DEFAULT\]: unknown section"):
        Config.load(["-c", ini(tmp_path, "[DEFAULT]\nport = 1\n")], env)
    with pytest.raises(ConfigError, match="config file"):
        Config.load(["-c", ini(tmp_path, "port = 1\n")], env)          # no section header
    with pytest.raises(ConfigError, match="config file"):
        Config.load(["-c", ini(tmp_path, "[amqp]\nport = 1\nport = 2\n")], env)


def test_lavinmqs_shipped_ini_starts(tmp_path, env):
    # shaped like LavinMQ's shipped lavinmq.ini: what it sets is implemented,
    # turned off, or harmless here
    path = ini(tmp_path, """
        [main]
        data_dir = /var/lib/lavinmq
        log_level = info
        pidfile = /run/lavinmq.pid
        stats_log_size = 120
        [mgmt]
        bind = ::
        tls_port = 15671
        [amqp]
        bind = ::
        tls_port = 5671
        tcp_proxy_protocol = false
        [mqtt]
        bind = ::
        [clustering]
        enabled = false
        bind = ::
        """)
    c = Config.load(["-c", path], env)
    assert (c.amqp_bind, c.http_bind, c.mqtt_bind) == ("::", "::", "::")     # [mqtt] is implemented now
    assert (c.amqps_port, c.https_port) == (5671, 15671)     # read now: TLS is implemented
    assert c.pidfile == "/run/lavinmq.pid"
    assert c.stats_log_size == 120 and c.warnings == []      # every key it sets is implemented


@pytest.mark.parametrize("section,key,value", [
    ("amqp", "amqp_systemd_socket_name", "lavinmq-amqp.socket"),
    ("mgmt", "http_systemd_socket_name", "lavinmq-http.socket"),
    ("mqtt", "mqtt_systemd_socket_name", "lavinmq-mqtt.socket"),
])
def test_lavinmq_keys_we_do_not_implement_stop_the_start(tmp_path, env, section, key, value):
    path = ini(tmp_path, f"[{section}]\n{key} = {value}\n")
    with pytest.raises(ConfigError, match=rf"\[{section}\] {key} = .*not supported"):
        Config.load(["-c", path], env)


def test_lavinmq_experimental_keys_are_accepted_with_a_warning(tmp_path, env):
    """LavinMQ's [experimental] yield thresholds used to stop the start; they
    have no counterpart here: a warning says so."""
    path = ini(tmp_path, "[experimental]\nyield_each_received_bytes = 131072\nyield_each_delivered_bytes = 1048576\n")
    c = Config.load(["-c", path], env)
    assert len(c.warnings) == 2
    for key, warning in zip(("yield_each_received_bytes", "yield_each_delivered_bytes"), c.warnings):
        assert warning.startswith(f"{path}: [experimental] {key} has no effect here, ignored (")
    # a value LavinMQ could not read still stops the start, naming the key
    path = ini(tmp_path, "[experimental]\nyield_each_delivered_bytes = lots\n")
    with pytest.raises(ConfigError, match=r"\[experimental\] yield_each_delivered_bytes: 'lots' is not"):
        Config.load(["-c", path], env)
    path = ini(tmp_path, "[experimental]\nyield_each_sent_bytes = 1\n")
    with pytest.raises(ConfigError, match=r"\[experimental\] yield_each_sent_bytes: unknown setting"):
        Config.load(["-c", path], env)


def test_deprecated_aliases(tmp_path, env):
    path = ini(tmp_path, "[http]\nport = 1234\n[main]\nguest_only_loopback = false\n[amqp]\nset_timestamp = true\n")
    c = Config.load(["-c", path], env)
    assert (c.http_port, c.default_user_only_loopback, c.set_timestamp) == (1234, False, True)
    assert any("[http] is deprecated" in w for w in c.warnings)


def test_missing_config_file(tmp_path, env):
    with pytest.raises(ConfigError, match=f"cannot read config file {tmp_path}/nope.ini"):
        Config.load(["-c", str(tmp_path / "nope.ini")], env)


def test_bad_env_value_names_variable(env):
    env["LAVINMQ_AMQP_PORT"] = "http"
    with pytest.raises(ConfigError, match="environment LAVINMQ_AMQP_PORT: 'http' is not an integer"):
        Config.load([], env)
    del env["LAVINMQ_AMQP_PORT"]
    env["LAVINMQ_LOG_LEVEL"] = "loud"
    with pytest.raises(ConfigError, match="environment LAVINMQ_LOG_LEVEL: unknown log level"):
        Config.load([], env)


@pytest.mark.parametrize("argv,message", [
    (["-p", "abc"], "--amqp-port: 'abc' is not an integer"),
    (["--http-port", "70000"], "--http-port: 70000 is out of range"),
    (["-l", "chatty"], "--log-level: unknown log level 'chatty'"),
    (["--default-user-only-loopback", "sometimes"], "--default-user-only-loopback: 'sometimes' is not a boolean"),
    (["--default-password-hash", "xyz"], "--default-password-hash: password hash"),
    (["-D", ""], "--data-dir: '' must be a non-empty string"),
])
def test_bad_flag_value_names_flag(env, argv, message):
    with pytest.raises(ConfigError) as e:
        Config.load(argv, env)
    assert message in str(e.value)


def test_validate_config_built_in_code():
    Config().validate()
    with pytest.raises(ConfigError, match="frame_max: 100 is out of range"):
        Config(frame_max=100).validate()
    with pytest.raises(ConfigError, match="amqp_port: '5672' is not an integer"):
        Config(amqp_port="5672").validate()


def test_sync_on_by_default_off_by_ini_env_or_flag(tmp_path, env):
    assert Config.load([], env).sync is True
    path = ini(tmp_path, """
        [main]
        sync = false
        """)
    assert Config.load(["-c", path], env).sync is False
    assert Config.load([], {**env, "LAVINMQ_SYNC": "false"}).sync is False
    c = Config.load(["--no-sync"], env)
    assert c.sync is False and c.sources["sync"] == "--no-sync"
    with pytest.raises(ConfigError, match=r"\[main\] sync"):
        Config.load(["-c", ini(tmp_path, "[main]\nsync = maybe\n", "bad.ini")], env)


def test_clustering_settings_as_lavinmq(tmp_path, env):
    path = ini(tmp_path, """
        [clustering]
        enabled = true
        bind = 0.0.0.0
        port = 5680
        advertised_uri = tcp://node1.example:5680
        etcd_endpoints = etcd1:2379,http://etcd2:2379
        etcd_prefix = mycluster
        max_unsynced_actions = 8192
        on_leader_elected = echo elected
        on_leader_lost = echo lost
        """)
    c = Config.load(["-c", path], env)
    assert (c.clustering, c.clustering_bind, c.clustering_port) == (True, "0.0.0.0", 5680)
    assert c.clustering_advertised_uri == "tcp://node1.example:5680"
    assert (c.clustering_etcd_endpoints, c.clustering_etcd_prefix) == ("etcd1:2379,http://etcd2:2379", "mycluster")
    assert (c.clustering_on_leader_elected, c.clustering_on_leader_lost) == ("echo elected", "echo lost")
    assert c.clustering_lease_ttl == 2
    assert any("max_unsynced_actions is deprecated" in w for w in c.warnings)
    c = Config.load(["--clustering", "--clustering-bind", "127.0.0.11", "--clustering-port", "6000",
                     "--clustering-etcd-endpoints", "127.0.0.1:2379", "--clustering-etcd-prefix", "p",
                     "--clustering-lease-ttl", "5", "--clustering-max-unsynced-actions", "10"], env)
    assert (c.clustering, c.clustering_bind, c.clustering_port, c.clustering_lease_ttl) == (True, "127.0.0.11", 6000, 5)
    from lavinmq.clustering.settings import advertised_uri, endpoints
    assert advertised_uri(c) == "tcp://127.0.0.11:6000"
    assert endpoints(c) == [("http://127.0.0.1:2379", None, None)]
    assert any("--clustering-max-unsynced-actions is deprecated" in w for w in c.warnings)
    env["LAVINMQ_CLUSTERING"] = "true"
    env["LAVINMQ_CLUSTERING_ETCD_PREFIX"] = "fromenv"
    c = Config.load([], env)
    assert (c.clustering, c.clustering_etcd_prefix) == (True, "fromenv")


@pytest.mark.parametrize("argv,message", [
    (["--clustering", "--no-sync"], "clustering needs [main] sync = true"),
    (["--clustering", "--clustering-etcd-prefix", "a b"], "--clustering-etcd-prefix: 'a b'"),
    (["--clustering", "--clustering-etcd-endpoints", "ftp://x:1"], "is not an etcd endpoint"),
    (["--clustering", "--clustering-etcd-endpoints", ""], "must be a non-empty string"),
    (["--clustering", "--clustering-advertised-uri", "http://x"], "is not tcp://host:port"),
    (["--clustering", "--clustering-lease-ttl", "0"], "--clustering-lease-ttl: 0 is out of range"),
])
def test_bad_clustering_settings(env, argv, message):
    with pytest.raises(ConfigError) as e:
        Config.load(argv, env)
    assert message in str(e.value)


def test_mqtt_section(tmp_path, env):
    path = ini(tmp_path, """
        [mqtt]
        bind = 0.0.0.0
        port = 1884
        tls_port = 8884
        max_inflight_messages = 100
        max_packet_size = 1048576
        default_vhost = iot
        permission_check_enabled = true
        client_id_validation = username
        """)
    c = Config.load(["-c", path, "--mqtt-port", "1999"], env)
    assert (c.mqtt_bind, c.mqtt_port, c.mqtts_port) == ("0.0.0.0", 1999, 8884)
    assert (c.mqtt_max_inflight_messages, c.mqtt_max_packet_size, c.mqtt_default_vhost) == (100, 1048576, "iot")
    assert c.mqtt_permission_check_enabled is True and c.mqtt_client_id_validation == "username"
    assert Config.load(["-b", "10.0.0.1"], env).mqtt_bind == "10.0.0.1"
    assert Config.load(["--mqtts-port", "-1"], env).mqtts_port == -1      # LavinMQ's way to turn it off
    with pytest.raises(ConfigError, match=r"\[mqtt\] client_id_validation"):
        Config.load(["-c", ini(tmp_path, "[mqtt]\nclient_id_validation = ip\n")], env)
    with pytest.raises(ConfigError, match=r"\[mqtt\] max_inflight_messages: 70000 is out of range"):
        Config.load(["-c", ini(tmp_path, "[mqtt]\nmax_inflight_messages = 70000\n")], env)


def test_unix_paths_from_ini_and_flags(tmp_path, env):
    path = ini(tmp_path, "[amqp]\nunix_path = /run/a.sock\n[mqtt]\nunix_path = /run/m.sock\n"
                         "[mgmt]\nunix_path = /run/h.sock\n")
    c = Config.load(["-c", path], env)
    assert (c.amqp_unix_path, c.mqtt_unix_path, c.http_unix_path) == ("/run/a.sock", "/run/m.sock", "/run/h.sock")
    c = Config.load(["-c", path, "--mqtt-unix-path", "/run/m2.sock", "--amqp-unix-path", "/run/a2.sock"], env)
    assert (c.amqp_unix_path, c.mqtt_unix_path) == ("/run/a2.sock", "/run/m2.sock")


def test_lavinmqs_tuning_keys_are_read(tmp_path, env):
    # once accepted and ignored ("has no effect here"): each is a setting now
    path = ini(tmp_path, """
        [main]
        tcp_nodelay = false
        tcp_keepalive = 30:5:4
        tcp_recv_buffer_size = 65536
        tcp_send_buffer_size = 131072
        free_disk_warn = 5368709120
        stats_log_size = 240
        consumer_timeout_loop_interval = 5
        max_deleted_definitions = 16384
        """)
    c = Config.load(["-c", path], env)
    assert (c.tcp_nodelay, c.tcp_keepalive, c.tcp_recv_buffer_size, c.tcp_send_buffer_size) == \
        (False, (30, 5, 4), 65536, 131072)
    assert (c.free_disk_warn, c.stats_log_size, c.consumer_timeout_loop_interval, c.max_deleted_definitions) == \
        (5368709120, 240, 5, 16384)
    assert c.warnings == []


def test_tuning_defaults_are_lavinmqs(env):
    c = Config.load([], env)
    # LavinMQ's, but for tcp_nodelay and consumer_timeout_loop_interval (see lavinmq.sockopts, config.py)
    assert (c.tcp_keepalive, c.tcp_recv_buffer_size, c.tcp_send_buffer_size) == ((60, 10, 3), None, None)
    assert (c.free_disk_warn, c.stats_log_size, c.max_deleted_definitions) == (0, 120, 8192)
    assert (c.tcp_nodelay, c.consumer_timeout_loop_interval) == (True, 1)


@pytest.mark.parametrize("raw,expected", [
    ("60:10:3", (60, 10, 3)), ("120", (120, 10, 3)), ("120:30", (120, 30, 3)), ("::5", (60, 10, 5)),
    ("true", (60, 10, 3)), ("false", None), ("0", None), ("off", None), (" 7:8:9 ", (7, 8, 9)),
])
def test_tcp_keepalive_format(tmp_path, env, raw, expected):
    c = Config.load(["-c", ini(tmp_path, f"[main]\ntcp_keepalive = {raw}\n")], env)
    assert c.tcp_keepalive == expected


@pytest.mark.parametrize("key,raw,message", [
    ("tcp_keepalive", "60:10:3:1", "is not idle:interval:count"),
    ("tcp_keepalive", "sixty", "idle 'sixty' is not an integer"),
    ("tcp_keepalive", "60:x:3", "interval 'x' is not an integer"),
    ("tcp_keepalive", "60:10:200", r"count 200 is out of range \(1..127\)"),
    ("tcp_keepalive", "-1", r"idle -1 is out of range"),
    ("tcp_nodelay", "maybe", "is not a boolean"),
    ("tcp_recv_buffer_size", "64k", "is not an integer"),
    ("tcp_send_buffer_size", "-1", "out of range"),
    ("free_disk_warn", "5GB", "is not an integer"),
    ("stats_log_size", "1", "out of range"),
    ("stats_log_size", "1000000", "out of range"),
    ("consumer_timeout_loop_interval", "0", "out of range"),
    ("max_deleted_definitions", "0", "out of range"),
])
def test_bad_tuning_values_stop_the_start(tmp_path, env, key, raw, message):
    with pytest.raises(ConfigError, match=rf"\[main\] {key}: .*{message}"):
        Config.load(["-c", ini(tmp_path, f"[main]\n{key} = {raw}\n")], env)


def test_socket_buffer_size_is_refused_unless_off(tmp_path, env):
    # LavinMQ's userspace socket IO buffer: there is none here (lavinmq.config)
    with pytest.raises(ConfigError, match=r"\[main\] socket_buffer_size = 16384: not supported"):
        Config.load(["-c", ini(tmp_path, "[main]\nsocket_buffer_size = 16384\n")], env)
    assert Config.load(["-c", ini(tmp_path, "[main]\nsocket_buffer_size = 0\n")], env).warnings == []
