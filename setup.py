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
MODULES = [m for m in ["buffer", "codec", "segment", "prio_store", "deadletter", "dedup", "queue", "delayed", "routing", "channel", "connection", "debug", "perfscan", "stream_store", "stream", "exchange_store", "replay"] if os.path.exists(f"lavinmq/_core/{m}.pyx")]

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
]

# what cythonize is given; tools/arm64.py reads it to cross-compile the same
# C for aarch64 (run_path with another run_name: no setup() then)
CYTHON_OPTIONS = dict(language_level=3, compile_time_env={"DEBUG": DEBUG},
                      compiler_directives={"embedsignature": True})

if __name__ == "__main__":
    setup(ext_modules=cythonize(extensions, **CYTHON_OPTIONS))
