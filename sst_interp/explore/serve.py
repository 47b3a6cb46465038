"""Bind the explorer's port and serve it with uvicorn until interrupted."""

from __future__ import annotations

import socket

from sst_interp.kernels.errors import UsageError
from sst_interp.explore.server import Explorer, create_app


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: any free one); a port in use is a UsageError, raised before the
    run is opened so that nothing else happens."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        raise UsageError(f"--host {host} does not resolve ({err.strerror})") from None
    family = infos[0][0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    # SO_REUSEADDR only lets a restarted explorer reuse a port in TIME_WAIT; a live listener still refuses the bind
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(infos[0][4])
        sock.listen(128)
    except OSError as err:
        sock.close()
        reason = "is in use" if err.errno in (98, 48) else f"cannot be bound ({err.strerror})"
        raise UsageError(f"port {port} on {host} {reason}; pass another --port (0 picks a free one)") from None
    return sock


def url_of(sock: socket.socket) -> str:
    """``http://HOST:PORT/`` of a bound socket (IPv6 hosts in brackets)."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def serve(explorer: Explorer, sock: socket.socket) -> None:
    """Serve ``explorer`` on ``sock`` until Ctrl-C (uvicorn's own logging: warnings only)."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(create_app(explorer), log_level="warning", access_log=False))
    print(f"exploring {explorer.config.run} at {url_of(sock)} (Ctrl-C stops)", flush=True)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        # uvicorn shuts down on Ctrl-C, then raises the signal again; stopping is what the user asked for
        pass
    print("stopped", flush=True)


