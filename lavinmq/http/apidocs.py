"""The API reference at /docs, written from the OpenAPI document
(lavinmq/http/openapi.py) that tests/integration/test_http_openapi.py
checks against real answers, so the page cannot drift from the API. Plain
HTML with the UI's stylesheet: no script, nothing fetched from elsewhere.
Every text from the document is escaped."""
import html
import json

from lavinmq.http.openapi import DOCUMENT

METHOD_ORDER = ("get", "put", "post", "delete")


def _schema_text(schema, depth=0):
    """A short reading of a JSON schema: a link for a $ref, the type, an
    object's fields."""
    if not isinstance(schema, dict) or not schema:
        return "any JSON value"
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f'<a href="#schema-{html.escape(name)}">{html.escape(name)}</a>'
    if "oneOf" in schema:
        return " or ".join(_schema_text(s, depth) for s in schema["oneOf"])
    if "enum" in schema:
        return "one of " + ", ".join(f"<code>{html.escape(json.dumps(v))}</code>" for v in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        return "a list of " + _schema_text(schema.get("items"), depth)
    if kind == "object" and schema.get("properties") and depth < 2:
        required = set(schema.get("required", ()))
        rows = "".join(f"<li><code>{html.escape(k)}</code>{'' if k in required else ' (optional)'}: "
                       f"{_schema_text(v, depth + 1)}</li>" for k, v in schema["properties"].items())
        return f"an object<ul>{rows}</ul>"
    if isinstance(kind, list):
        return " or ".join(html.escape(str(k)) for k in kind)
    return html.escape(str(kind or "any"))


def _operation(path, method, op):
    anchor = html.escape(f"{method}-{path}".replace("/", "-").replace("{", "").replace("}", ""))
    parts = [f'<section class="card api-op" id="{anchor}">',
             f'<h2><span class="badge">{method.upper()}</span> <code>{html.escape(path)}</code></h2>',
             f"<p>{html.escape(op.get('summary', ''))}</p>"]
    params = op.get("parameters") or []
    if params:
        rows = "".join(f"<tr><td><code>{html.escape(p['name'])}</code></td><td>{html.escape(p['in'])}</td>"
                       f"<td>{'yes' if p.get('required') else 'no'}</td><td>{_schema_text(p.get('schema'))}</td></tr>"
                       for p in params)
        parts.append("<h3>Parameters</h3><table><thead><tr><th>Name</th><th>In</th><th>Required</th>"
                     f"<th>Type</th></tr></thead><tbody>{rows}</tbody></table>")
    body = (op.get("requestBody") or {}).get("content") or {}
    for media, spec in body.items():
        parts.append(f"<h3>Body ({html.escape(media)})</h3><div>{_schema_text(spec.get('schema'))}</div>")
    rows = []
    for status, resp in sorted(op.get("responses", {}).items()):
        content = resp.get("content") or {}
        what = "; ".join(f"{html.escape(m)}: {_schema_text(c.get('schema'))}" for m, c in content.items())
        rows.append(f"<tr><td>{html.escape(status)}</td><td>{html.escape(resp.get('description', ''))}</td>"
                    f"<td>{what}</td></tr>")
    parts.append("<h3>Responses</h3><table><thead><tr><th>Status</th><th>Meaning</th><th>Body</th></tr>"
                 f"</thead><tbody>{''.join(rows)}</tbody></table></section>")
    return "".join(parts)


def render(document=DOCUMENT, up=""):
    """up: what leads from the page's URL to the app's root ("" at /docs,
    "../" at /docs/); links stay relative, so a proxy's path prefix works."""
    info = document["info"]
    ops = [(path, m, spec[m]) for path, spec in sorted(document["paths"].items())
           for m in METHOD_ORDER if m in spec]
    index = "".join(f'<li><a href="#{html.escape(f"{m}-{p}".replace("/", "-").replace("{", "").replace("}", ""))}">'
                    f"<code>{m.upper()} {html.escape(p)}</code></a></li>" for p, m, _ in ops)
    schemas = "".join(f'<section class="card" id="schema-{html.escape(name)}"><h2>{html.escape(name)}</h2>'
                      f"<div>{_schema_text(schema)}</div></section>"
                      for name, schema in sorted(document["components"]["schemas"].items()))
    return f"""<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>{html.escape(info['title'])} {html.escape(info['version'])}</title>
  <link rel="icon" href="{up}static/favicon.svg" type="image/svg+xml">
  <link rel="stylesheet" href="{up}static/app.css">
</head>
<body class="api-docs">
<main id="main">
  <h1>{html.escape(info['title'])} <small>{html.escape(info['version'])}</small></h1>
  <p>{html.escape(info.get('description', ''))} Requests are authenticated with HTTP Basic (a user
  with a management tag). The same document as JSON: <a href="{up}docs/openapi.json">docs/openapi.json</a>
  (OpenAPI {html.escape(document['openapi'])}).</p>
  <section class="card"><h2>Routes</h2><ul class="api-index">{index}</ul></section>
  {''.join(_operation(p, m, op) for p, m, op in ops)}
  <h1>Schemas</h1>
  {schemas}
</main>
</body>
</html>
"""
