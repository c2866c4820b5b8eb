"""systemd's readiness protocol (sd_notify(3)) without libsystemd: one
datagram to $NOTIFY_SOCKET. With Type=notify, systemd considers the
service started only once the listeners are up."""
import os
import socket


def notify(state):
    """Send e.g. "READY=1" or "STOPPING=1"; a no-op outside systemd."""
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return False
    if path.startswith("@"):            # abstract namespace
        path = "\0" + path[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
        s.connect(path)
        s.sendall(state.encode())
    return True
