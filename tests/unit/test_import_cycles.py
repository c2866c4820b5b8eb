"""No import circle anywhere in lavinmq/ (issue 24): every import counts,
the ones inside functions too, since a lazy import only hides a circle.
Read from the source with ast (and a regular expression for .pyx files), so
the test needs no build and imports nothing."""
import ast
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYX_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+c?import\s+\(?([\w, ]+)|c?import\s+([\w.]+))", re.M)


def modules():
    out = {}
    for dirpath, _, files in os.walk(os.path.join(ROOT, "lavinmq")):
        for f in files:
            stem, ext = os.path.splitext(f)
            if ext not in (".py", ".pyx"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, stem), ROOT).replace(os.sep, ".")
            out[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = os.path.join(dirpath, f)
    return out


def imported_names(name, path):
    """Dotted names a module imports; `from pkg import x` names pkg.x."""
    src = open(path, encoding="utf-8").read()
    names = set()
    if path.endswith(".py"):
        is_pkg = path.endswith("__init__.py")
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = name.split(".")[:len(name.split(".")) - node.level + (1 if is_pkg else 0)]
                    base = ".".join(parts + ([base] if base else []))
                names.update(f"{base}.{a.name}" for a in node.names)
    else:
        for m in PYX_IMPORT.finditer(src):
            if m.group(1):
                names.update(f"{m.group(1)}.{a.strip()}" for a in m.group(2).split(",") if a.strip())
            else:
                names.add(m.group(3))
    return names


def graph():
    mods = modules()
    edges = {}
    for name, path in mods.items():
        targets = set()
        for imported in imported_names(name, path):
            # the longest module the name starts with (pkg.x may be a name in pkg)
            while imported and imported not in mods:
                imported = imported.rpartition(".")[0]
            # a submodule's import of its own package runs that package's
            # __init__ first in any case: not an edge that can close a circle
            if imported and imported != name and not name.startswith(imported + "."):
                targets.add(imported)
        edges[name] = targets
    return edges


def circles(edges):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle():
    edges = graph()
    assert len(edges) > 100, "the walk found too few modules"
    assert circles(edges) == []


def test_the_check_finds_a_circle():
    # the checker itself: a circle of three, and one through a lazy import
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(edges) == [["a", "b", "c"]]
    assert "lavinmq.http.helpers" in graph()["lavinmq.http.controller.queues"]


def test_http_helpers_import_no_route_module():
    edges = graph()
    for helper in ("lavinmq.http.helpers", "lavinmq.http.middleware"):
        assert not [m for m in edges[helper] if m.startswith("lavinmq.http.controller")]
    for name, targets in edges.items():
        if name.startswith("lavinmq.http.controller."):
            assert "lavinmq.http.app" not in targets, name
