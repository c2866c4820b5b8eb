"""Global runtime parameters (LavinMQ's /api/global-parameters, RabbitMQ's
too): named JSON values that belong to no vhost, kept in DATA_DIR/
parameters.json as LavinMQ keeps them (a list of {"component": null,
"name", "value"}). They are stored and exported; the broker acts on none
of them."""
import logging
import os

import orjson

from lavinmq.sync import fsync_dir

log = logging.getLogger("lavinmq.parameters")

FILE = "parameters.json"
MAX_VALUE_BYTES = 1 << 20      # one value, as JSON


class GlobalParameters:
    def __init__(self, data_dir):
        self.path = os.path.join(data_dir, FILE)
        self.values = {}
        try:
            with open(self.path, "rb") as f:
                for item in orjson.loads(f.read()):
                    if isinstance(item, dict) and isinstance(item.get("name"), str) and "value" in item:
                        self.values[item["name"]] = item["value"]
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            log.error("%s could not be read, global parameters start empty: %s", self.path, exc)

    def listing(self):
        return [{"name": n, "value": v, "component": None, "vhost": None} for n, v in self.values.items()]

    def get(self, name):
        return self.values.get(name)

    def set(self, name, value):
        """-> True if it was new. Raises ValueError for a value too large."""
        if len(orjson.dumps(value)) > MAX_VALUE_BYTES:
            raise ValueError(f"value larger than {MAX_VALUE_BYTES} bytes")
        new = name not in self.values
        self.values[name] = value
        self._save()
        return new

    def delete(self, name):
        if name not in self.values:
            return False
        del self.values[name]
        self._save()
        return True

    def _save(self):
        tmp = self.path + ".tmp"
        data = orjson.dumps([{"component": None, "name": n, "value": v} for n, v in self.values.items()],
                            option=orjson.OPT_INDENT_2)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fsync_dir(os.path.dirname(self.path))
