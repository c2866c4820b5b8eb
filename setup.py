"""Build the Cython extensions in lavinmq/_core. Cython is required: the hot
path has no pure-Python fallback, so a missing Cython must fail the build."""
import os
import sys

from setuptools import Extension, setup

try:
    from Cython.Build import cythonize
except ImportError:  # pragma: no cover - build-time guard
    sys.exit("lavinmq needs Cython to build its _core extensions: pip install cython")

DEBUG = os.environ.get("LAVINMQ_DEBUG") == "1"
MODULES = [m for m in ["buffer", "codec", "segment", "flusher", "prio_store", "deadletter", "dedup", "queue", "delayed", "routing", "channel", "flow", "connection", "debug", "perfscan", "stream_store", "stream", "exchange_store", "replay", "relay"] if os.path.exists(f"lavinmq/_core/{m}.pyx")]

extensions = [
    Extension(
        f"lavinmq._core.{name}",
        [f"lavinmq/_core/{name}.pyx"],
        extra_compile_args=["-O2"] if not DEBUG else ["-O0", "-g"],
        define_macros=[("LAVINMQ_DEBUG", "1")] if DEBUG else [],
    )
    for name in MODULES
] + [
    # the Spark connector's decoders: its own extensions, not the broker's
    Extension(f"lavinmq.spark.{name}", [f"lavinmq/spark/{name}.pyx"],
              extra_compile_args=["-O2"] if not DEBUG else ["-O0", "-g"])
    for name in ["_columns", "_publish"] if os.path.exists(f"lavinmq/spark/{name}.pyx")
] + [
    # MQTT's per-message path (lavinmq/mqtt), the WebSocket framing (lavinmq/websocket)
    # and the MQTT load generator's packet scanner
    Extension(f"lavinmq.{name}", [f"lavinmq/{name.replace('.', '/')}.pyx"],
              extra_compile_args=["-O2"] if not DEBUG else ["-O0", "-g"],
              define_macros=[("LAVINMQ_DEBUG", "1")] if DEBUG else [])
    for name in ["mqtt._mqtt", "websocket._ws", "perf._mqttscan"] if os.path.exists(f"lavinmq/{name.replace('.', '/')}.pyx")
]

# what cythonize is given; tools/arm64.py reads it to cross-compile the same
# C for aarch64 (run_path with another run_name: no setup() then)
CYTHON_OPTIONS = dict(language_level=3, compile_time_env={"DEBUG": DEBUG},
                      compiler_directives={"embedsignature": True})

# -g0: Python's own CFLAGS carry -g; without debug info the first build
# takes a quarter less CPU and the extensions are 7x smaller (the code is
# the same: -g never changes it). LAVINMQ_DEBUG=1 builds keep it.
if not DEBUG:
    for ext in extensions:
        ext.extra_compile_args.append("-g0")

# LAVINMQ_BUILD=broker: the broker's extensions only, not the Spark
# connector's (./dev run, which installs no Spark)
if os.environ.get("LAVINMQ_BUILD", "all") == "broker":
    extensions = [e for e in extensions if not e.name.startswith("lavinmq.spark.")]

if __name__ == "__main__":
    # Cython's C generation on every core too (build_ext -j spreads only gcc)
    setup(ext_modules=cythonize(extensions, nthreads=os.cpu_count() or 1, **CYTHON_OPTIONS))
