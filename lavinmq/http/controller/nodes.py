"""/api/nodes: this node's resources (memory, descriptors, disk); on a
cluster's leader also its followers, their ISR membership and lag."""
import os
import resource

from aiohttp import web

from lavinmq.clustering import status as cluster_status
from lavinmq.http import compat, shapes
from lavinmq.http.helpers import MONITORING, not_found, require
from lavinmq.process import open_fds, resident_memory


async def node(request):
    require(request, MONITORING)
    if request.match_info["name"] != shapes.NODE:
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
        "name": shapes.NODE, "type": "disc", "running": True, "os_pid": str(os.getpid()),
        "uptime": shapes.uptime_ms(server.started), "processors": os.cpu_count(),
        "mem_used": resident_memory(), "mem_alarm": server.memory_alarm, "fd_used": open_fds(),
        "fd_total": soft, "disk_free": st.f_bavail * st.f_frsize,
        "disk_free_limit": server.config.disk_free_limit, "disk_free_alarm": server.disk_alarm,
        "partitions": [], "applications": [], "rates_mode": "basic", **compat.node_extra(server)}]


def add_routes(app):
    r = app.router
    r.add_get("/api/nodes/{name}", node)
    r.add_get("/api/nodes", nodes)
