"""A TCP relay between one node and etcd that a test can cut, as a network
partition cuts: what either side sends is dropped without a word (no RST,
no FIN), so the node learns of it only by its own timeouts. Restored, the
relay passes new connections on again; the ones that lived through the cut
are closed (after a real partition they would have timed out)."""
import socket
import threading


class Relay:
    def __init__(self, target_host, target_port, host="127.0.0.1"):
        self.target = (target_host, target_port)
        self.listener = socket.create_server((host, 0))
        self.endpoint = f"{host}:{self.listener.getsockname()[1]}"
        self.is_cut = False
        self.lock = threading.Lock()
        self.pairs = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True, name="relay-accept").start()

    def cut(self):
        self.is_cut = True

    def restore(self):
        with self.lock:
            pairs, self.pairs = self.pairs, []
            self.is_cut = False
        for a, b in pairs:
            for s in (a, b):
                s.close()

    def close(self):
        self.closed = True
        self.listener.close()
        self.restore()

    def _accept(self):
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self.lock:
                self.pairs.append((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True, name="relay-pump").start()

    def _pump(self, src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if not self.is_cut:         # cut: read and dropped, as a partition drops packets
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
