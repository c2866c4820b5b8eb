"""/api/definitions: export and import of everything operators create;
LavinMQ's upload routes take the file of a form (multipart/form-data) or
JSON."""
import asyncio
import urllib.parse

from aiohttp import web

from lavinmq.http import shapes, sliced
from lavinmq.http.helpers import ADMIN, HTTPError, NO_CONTENT, body_json, parse_json, require, vhost_of

MAX_UPLOAD = 64 * 1024 * 1024       # as the app's client_max_size for JSON bodies


async def get_definitions(request):
    require(request, ADMIN)
    server = request.app["server"]
    only = request.match_info.get("vhost")
    if only is not None:
        vhost_of(request)
    # orjson: a backup of thousands of queues is encoded in a few ms, not tens
    return web.Response(body=sliced.dumps(shapes.definitions(server, only)), content_type="application/json")


async def post_definitions(request):
    require(request, ADMIN)
    body = await body_json(request)
    only = request.match_info.get("vhost")
    if only is not None:
        vhost_of(request)
    from lavinmq.http.importer import import_definitions_async
    await import_definitions_async(request.app["server"], body, only)
    from lavinmq.policy import all_applied
    await all_applied(request.app["server"].vhosts.values())   # policies apply in slices
    return web.Response(status=NO_CONTENT)


async def _uploaded_file(request):
    """The JSON object in the form's "file" part."""
    data = None
    try:
        async with asyncio.timeout(request.app["server"].config.http_read_timeout):
            reader = await request.multipart()
            async for part in reader:
                if part.name != "file":
                    await part.release()
                    continue
                chunks, size = [], 0
                while chunk := await part.read_chunk(1 << 16):
                    size += len(chunk)
                    if size > MAX_UPLOAD:
                        raise HTTPError(413, f"the file is larger than {MAX_UPLOAD} bytes")
                    chunks.append(chunk)
                data = b"".join(chunks)
    except TimeoutError:
        raise HTTPError(408, "request body not received in time (http_read_timeout)")
    except HTTPError:
        raise
    except Exception as exc:        # aiohttp's multipart parser on a body that is not one
        raise HTTPError(400, f"malformed multipart/form-data body: {str(exc)[:200]}")
    if data is None:
        raise HTTPError(400, "no file part in the form")
    body = parse_json(data)
    if not isinstance(body, dict):
        raise HTTPError(400, "Malformed JSON: expected an object")
    return body


async def upload_definitions(request):
    """LavinMQ's POST /api/definitions[/{vhost}]/upload; a browser's form is
    sent back to the page it came from."""
    require(request, ADMIN)
    only = request.match_info.get("vhost")
    if only is not None:
        vhost_of(request)
    if request.content_type == "application/json":
        body = await body_json(request)
    else:
        body = await _uploaded_file(request)
    from lavinmq.http.importer import import_definitions
    import_definitions(request.app["server"], body, only)
    referer = request.headers.get("Referer")
    if referer and urllib.parse.urlsplit(referer).netloc.lower() == request.host.lower():
        raise web.HTTPFound(referer)
    return web.Response(status=NO_CONTENT)


def add_routes(app):
    r = app.router
    r.add_get("/api/definitions", get_definitions)
    r.add_post("/api/definitions", post_definitions)
    r.add_post("/api/definitions/upload", upload_definitions)
    r.add_post("/api/definitions/{vhost}/upload", upload_definitions)
    r.add_get("/api/definitions/{vhost}", get_definitions)
    r.add_post("/api/definitions/{vhost}", post_definitions)
