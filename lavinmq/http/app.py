"""The management HTTP API as one aiohttp application: RabbitMQ's routes and
JSON shapes, one route module per resource in lavinmq/http/controller/
(as LavinMQ's http/controller/), behind the middleware."""
from aiohttp import web

from lavinmq.http.controller import (bindings, channels, connections, consumers, definitions, exchanges,
                                     federation, health, logs, main, messages, nodes, parameters, permissions,
                                     policies, prometheus, queues, shovels, ui, users, vhosts)
from lavinmq.http.middleware import errors_and_auth

# registration order matters where paths overlap: /api/users/bulk-delete
# before /api/users/{user}, ...
CONTROLLERS = (main, health, nodes, connections, channels, consumers, vhosts, users, permissions, exchanges,
               bindings, queues, parameters, shovels, federation, definitions, policies, messages, logs, ui)


def build_app(server, open_access=False):
    """open_access: the metrics-only listener (no auth, /metrics only)."""
    app = web.Application(middlewares=[errors_and_auth], client_max_size=64 * 1024 * 1024)
    app["server"] = server
    app["open"] = open_access
    if not open_access:
        from lavinmq.websocket.upgrade import install
        install(app)        # AMQP and MQTT over WebSocket (not on the open metrics listener)
        for controller in CONTROLLERS:
            controller.add_routes(app)
    prometheus.add_routes(app)
    return app
