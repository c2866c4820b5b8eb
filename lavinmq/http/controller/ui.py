"""The management web UI: static files (plain ES modules, CSS and SVG,
shipped as package data under static/) served at / by the management
app, and the security headers of every answer of that app: a CSP that
allows only our own scripts and styles (no inline code), no framing, and
no caching of API answers."""
import os

from aiohttp import web

STATIC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "static")

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; "
       "frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": "no-referrer", "Cross-Origin-Opener-Policy": "same-origin",
           "Cross-Origin-Resource-Policy": "same-origin"}


async def index(request):
    path = os.path.join(STATIC, "index.html")
    if not os.path.isfile(path):
        return web.Response(status=503, text="the management UI's files are not installed\n",
                            content_type="text/plain")
    return web.FileResponse(path, headers={"Content-Type": "text/html; charset=utf-8"})


async def security_headers(request, response):
    for key, value in HEADERS.items():
        response.headers.setdefault(key, value)
    if request.path.startswith("/api/") or request.path == "/metrics":
        response.headers.setdefault("Cache-Control", "no-store")
    else:
        # assets change with an upgrade: revalidate (Last-Modified) every time
        response.headers.setdefault("Cache-Control", "no-cache")


_DOCS = {}      # the page's path -> its HTML


async def docs(request):
    """The API reference, from the OpenAPI document; public, as LavinMQ's,
    at its /docs/ (and /docs/index.html) and at /docs, its links relative
    to each."""
    page = _DOCS.get(request.path)
    if page is None:
        from lavinmq.http.apidocs import render
        page = _DOCS[request.path] = render(up="" if request.path == "/docs" else "../")
    return web.Response(text=page, content_type="text/html", charset="utf-8")


async def docs_document(request):
    from lavinmq.http.openapi import DOCUMENT
    return web.json_response(DOCUMENT)


def add_routes(app):
    app.router.add_get("/", index)
    app.router.add_get("/docs", docs)
    app.router.add_get("/docs/", docs)
    app.router.add_get("/docs/index.html", docs)       # the file LavinMQ serves there
    app.router.add_get("/docs/openapi.json", docs_document)
    if os.path.isdir(STATIC):
        app.router.add_static("/static/", STATIC, follow_symlinks=False, show_index=False)
    app.on_response_prepare.append(security_headers)
