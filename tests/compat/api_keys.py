"""Compare the management API's JSON with RabbitMQ 3.10's, key by key
(../shared/reference/rabbitmq-3.10-management-api-samples.json, captured
with sample_x -> sample_q, 5 persistent messages, one consumer with
prefetch 2 holding 2 unacked). Keys that only describe Erlang's VM are left
out: nothing here has a meaning for them."""
import json
import os

SAMPLES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "rabbitmq-3.10-management-api-samples.json")

# What only describes Erlang/OTP (processes, reductions, garbage collection,
# ETS/Mnesia, the VM's own memory breakdown, distribution links, classic
# queue mirrors) or RabbitMQ's plugin files: no meaning outside the BEAM.
ERLANG_KEYS = {
    "backing_queue_status", "garbage_collection", "reductions", "reductions_details", "erlang_version",
    "erlang_full_version", "statistics_db_event_queue", "statistics_db_node", "sample_retention_policies",
    "applications", "db_dir", "enabled_plugin_files", "net_ticktime", "cluster_links",
    "metrics_gc_queue_length", "slave_nodes", "synchronised_slave_nodes", "recoverable_slaves",
    "mem_calculation_strategy", "proc_used", "proc_total", "proc_used_details", "context_switches",
    "context_switches_details", "being_drained", "exchange_types", "enabled_plugins",
}
PREFIXES = ("io_", "gc_", "mnesia_", "msg_store_", "queue_index_", "persistent_term")


def samples():
    with open(SAMPLES) as f:
        return json.load(f)


def shape(value, path=""):
    """{dotted key path: type name}; lists contribute their first element."""
    out = {}
    if isinstance(value, dict):
        if "_truncated_to_first_element_of_list_of_len" in value:
            return shape(value.get("first"), path)
        for k, v in value.items():
            p = f"{path}.{k}" if path else k
            out[p] = kind(v)
            out.update(shape(v, p))
    elif isinstance(value, list) and value:
        out.update(shape(value[0], path))
    return out


def kind(v):
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if v is None:
        return "null"
    return type(v).__name__


def erlang_internal(path):
    parts = path.split(".")
    return any(p in ERLANG_KEYS or p.startswith(PREFIXES) for p in parts)


def compare(route, theirs, ours):
    """-> (matched, missing, mistyped) key paths of RabbitMQ's sample for one route."""
    want = {p: t for p, t in shape(theirs).items() if not erlang_internal(p)}
    have = shape(ours)
    matched, missing, mistyped = [], [], []
    for p, t in sorted(want.items()):
        if p not in have:
            missing.append(p)
        elif have[p] == t or "null" in (t, have[p]):
            matched.append(p)
        else:
            mistyped.append((p, t, have[p]))
    return matched, missing, mistyped
