"""What the cluster tests run inside Spark's tasks, next to the connector:
a mapInArrow step that passes record batches through and leaves a marker
file per task attempt saying where it ran (executor, worker, Python pid,
partition, attempt, rows so far), optionally pausing between slices of
rows so that a test can kill a process in the middle of a task.

Imported by executors' Python workers: nothing here needs more than the
standard library, pyarrow and pyspark."""
import json
import os
import time


def executor():
    """(worker, executor id) of the executor this Python worker belongs to:
    a standalone executor works in <worker dir>/<app id>/<executor id>, and
    its Python workers inherit that directory."""
    cwd = os.getcwd()
    app_dir = os.path.dirname(cwd)
    return os.path.basename(os.path.dirname(app_dir)), os.path.basename(cwd)


def marking(directory, tag, slice_rows=0, pause=0.0):
    """A mapInArrow function (the schema is its input's)."""
    def mark(batches):
        from pyspark import TaskContext
        ctx = TaskContext.get()
        worker, ex = executor()
        info = {"tag": tag, "partition": ctx.partitionId(), "attempt": ctx.attemptNumber(),
                "stage": ctx.stageId(), "batch": ctx.getLocalProperty("streaming.sql.batchId"),
                "worker": worker, "executor": ex, "pid": os.getpid(), "rows": 0, "done": False}
        path = os.path.join(directory, f"{tag}-s{info['stage']}-p{info['partition']}-a{info['attempt']}-"
                                       f"{os.getpid()}.json")

        def write():
            tmp = path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(info, f)
            os.replace(tmp, path)
        write()
        for b in batches:
            step = slice_rows or b.num_rows or 1
            for i in range(0, b.num_rows, step):
                part = b.slice(i, step)
                yield part
                info["rows"] += part.num_rows
                if pause:
                    write()
                    time.sleep(pause)
        info["done"] = True
        write()
    return mark


def markers(directory, tag=None):
    out = []
    for name in os.listdir(directory):
        if name.endswith(".json") and (tag is None or name.startswith(tag + "-")):
            try:
                with open(os.path.join(directory, name)) as f:
                    out.append(json.load(f))
            except (OSError, ValueError):
                pass            # being replaced
    return out
