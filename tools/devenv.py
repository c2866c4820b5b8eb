"""What `./dev` asks of the virtual environment, run by the venv's Python.

    devenv.py requirements EXTRAS   the dependencies of the broker and of EXTRAS
                                    ("test,spark"), one a line, from pyproject.toml
    devenv.py link                  the tree on the venv's path (a .pth file) and
                                    the [project.scripts] commands in .venv/bin
    devenv.py stale                 the extensions of setup.py to compile again, one
                                    a line: missing, or older than a .pyx, .pxd or
                                    .pxi of their directory (Cython then decides)
    devenv.py built                 mark every extension checked (after a build)

`./dev` installs the dependencies with pip and compiles the Cython
extensions in place once, instead of `pip install -e .`: an editable install
compiles every extension again in a temporary directory (a minute or more of
CPU), and pulls in every extra or none."""
import os
import site
import sys
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def project():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def requirements(extras):
    p = project()
    deps = list(p["dependencies"])
    for extra in filter(None, extras.split(",")):
        if extra not in p["optional-dependencies"]:
            sys.exit(f"devenv: no extra {extra!r} in pyproject.toml "
                     f"(there are {', '.join(p['optional-dependencies'])})")
        deps += p["optional-dependencies"][extra]
    return deps


SCRIPT = """#!{python}
# written by ./dev (tools/devenv.py): [project.scripts] {name} of {root}
import sys
from {module} import {func}
sys.exit({func}())
"""


def link():
    """The tree importable from the venv, and its commands in .venv/bin."""
    with open(os.path.join(site.getsitepackages()[0], "lavinmq-tree.pth"), "w") as f:
        f.write(ROOT + "\n")
    bindir = os.path.dirname(sys.executable)
    for name, target in project()["scripts"].items():
        module, func = target.split(":")
        path = os.path.join(bindir, name)
        with open(path + ".tmp", "w") as f:
            f.write(SCRIPT.format(python=sys.executable, name=name, root=ROOT, module=module, func=func))
        os.chmod(path + ".tmp", 0o755)
        os.replace(path + ".tmp", path)


def extensions():
    """(name, source .pyx, built .so path) of what setup.py builds (as
    LAVINMQ_BUILD says): read from setup.py itself, so that an extension
    added there is watched here too."""
    import runpy
    import sysconfig
    cwd = os.getcwd()
    os.chdir(ROOT)              # setup.py names its sources relative to the tree
    try:
        ns = runpy.run_path(os.path.join(ROOT, "setup.py"), run_name="devenv")
    finally:
        os.chdir(cwd)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    return [(e.name, os.path.join(ROOT, e.sources[0]), os.path.join(ROOT, *e.name.split(".")) + suffix)
            for e in ns["extensions"]]


def stale():
    out = []
    for name, pyx, so in extensions():
        if not os.path.exists(so):
            out.append(name)
            continue
        built = os.path.getmtime(so)
        folder = os.path.dirname(pyx)
        sources = [os.path.join(folder, f) for f in os.listdir(folder) if f.endswith((".pyx", ".pxd", ".pxi"))]
        if any(os.path.getmtime(p) > built for p in sources):
            out.append(name)
    return out


def built():
    """After a build: what Cython found up to date keeps its old time; marked
    checked, so that the next start does not look again."""
    for _, _, so in extensions():
        if os.path.exists(so):
            os.utime(so)


def main(argv):
    if argv[:1] == ["requirements"] and len(argv) <= 2:
        print("\n".join(requirements(argv[1] if len(argv) == 2 else "")))
    elif argv == ["link"]:
        link()
    elif argv == ["stale"]:
        print("\n".join(stale()))
    elif argv == ["built"]:
        built()
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
