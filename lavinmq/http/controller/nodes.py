"""/api/nodes: this node's resources (memory, descriptors, disk); on a
cluster's leader also its followers, their ISR membership and lag; and
LavinMQ's garbage-collector routes (gc_stats, gc_collect): here Python's
collector and the C heap."""
import os
import resource

from aiohttp import web

import lavinmq
from lavinmq.clustering import status as cluster_status
from lavinmq.http import compat, shapes
from lavinmq.http.helpers import ADMIN, MONITORING, NO_CONTENT, not_found, require
from lavinmq.process import collect_garbage, gc_stats, open_fds, resident_memory


async def node(request):
    require(request, MONITORING)
    if request.match_info["name"] != shapes.node_name():
        raise not_found()
    return web.json_response((await _node_list(request))[0])


async def nodes(request):
    require(request, MONITORING)
    return web.json_response(cluster_status.nodes(request.app["server"], (await _node_list(request))[0]))


async def _node_list(request):
    server = request.app["server"]
    st = os.statvfs(server.data_dir)
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return [{
        "name": shapes.node_name(), "type": "disc", "running": True, "os_pid": str(os.getpid()),
        "uptime": shapes.uptime_ms(server.started), "processors": os.cpu_count(),
        "mem_used": resident_memory(), "mem_alarm": server.memory_alarm, "fd_used": open_fds(),
        "fd_total": soft, "disk_free": st.f_bavail * st.f_frsize,
        "disk_free_limit": server.config.disk_free_limit, "disk_free_alarm": server.disk_alarm,
        "partitions": [], "rates_mode": "basic", **compat.node_extra(server),
        # LavinMQ's: cluster_status reads the version here; a single node has no followers
        "applications": [{"name": "lavinmq", "description": "LavinMQ", "version": lavinmq.__version__}],
        "followers": []}]


async def node_gc_stats(request):
    require(request, ADMIN)
    return web.json_response(gc_stats())


async def node_gc_collect(request):
    require(request, ADMIN)
    if request.match_info.get("name", shapes.node_name()) != shapes.node_name():
        raise not_found()
    collect_garbage()
    return web.Response(status=NO_CONTENT)


def add_routes(app):
    r = app.router
    r.add_get("/api/nodes/gc_stats", node_gc_stats)
    r.add_post("/api/nodes/gc_collect", node_gc_collect)
    r.add_post("/api/nodes/{name}/gc_collect", node_gc_collect)
    r.add_get("/api/nodes/{name}", node)
    r.add_get("/api/nodes", nodes)
