"""An HTTP destination for shovel tests, run as a process of its own
(python -m tests.links.http_sink PORT): it records every request and
answers 200, or fail_with for the next `failures` requests, each after
`delay` seconds. The test reads and steers it through /_sink/*:

    GET  /_sink/requests                  every request so far (body base64)
    POST /_sink/settings {"failures", "fail_with", "delay"}
"""
import asyncio
import base64
import sys

from aiohttp import web


def main(port):
    state = {"requests": [], "failures": 0, "fail_with": 500, "delay": 0}

    async def record(request):
        data = await request.read()
        if state["delay"]:
            await asyncio.sleep(state["delay"])
        if state["failures"] > 0:
            state["failures"] -= 1
            status = state["fail_with"]
        else:
            status = 200
        state["requests"].append({"method": request.method, "path": request.path_qs,
                                  "headers": dict(request.headers), "body": base64.b64encode(data).decode(),
                                  "status": status})
        return web.Response(status=status, text="ok" if status == 200 else "no")

    async def requests(_):
        return web.json_response(state["requests"])

    async def settings(request):
        state.update(await request.json())
        return web.json_response({})

    app = web.Application()
    app.router.add_get("/_sink/requests", requests)
    app.router.add_post("/_sink/settings", settings)
    app.router.add_route("*", "/{tail:.*}", record)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None, handle_signals=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
