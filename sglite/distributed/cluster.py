"""Finding Ray and the cluster: the checks that run before any replica starts, and the connection itself.

Ray is an optional dependency (`pip install "sglite[ray]"`); nothing here imports it at module level. An
unreachable address is found with a plain TCP connect of a few seconds, since `ray.init` on such an address
retries for minutes before it gives up."""
from __future__ import annotations

import logging
import socket
from typing import Any
from urllib.parse import urlsplit

CONNECT_TIMEOUT_S = 5.0
INSTALL_HINT = 'pip install "sglite[ray]"'


class ClusterError(RuntimeError):
    """Ray is missing or the cluster cannot be reached; the message says how to fix it."""


def require_ray() -> Any:
    """The ray module, or ClusterError saying how to install it."""
    try:
        import ray
    except ImportError as e:
        raise ClusterError(f"Ray is not installed ({e}); {INSTALL_HINT}") from None
    return ray


def check_address(address: str | None) -> None:
    """ClusterError unless `address` ("host:port", "ray://host:port", "auto", or None: a local Ray) names a
    port that accepts a TCP connection within CONNECT_TIMEOUT_S."""
    if address in (None, "", "auto", "local"):
        return
    host, port = _host_port(address)
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as e:
        raise ClusterError(f"cannot reach the Ray cluster at {address} ({e.strerror or e}); start it with "
                           "`ray start --head`, or fix the address (host:port of the head node's GCS, "
                           "default port 6379)") from None


def _host_port(address: str) -> tuple[str, int]:
    parts = urlsplit(address if "://" in address else "ray://" + address)
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        raise ClusterError(f"Ray address {address!r} is not host:port (or ray://host:port, or auto)")
    return parts.hostname, port


def connect(address: str | None) -> bool:
    """Attach to the cluster at `address` (None: the local one, started if none runs), unless this process is
    already attached. Returns whether this call connected (then the caller disconnects with ray.shutdown())."""
    ray = require_ray()
    if ray.is_initialized():
        return False
    check_address(address)
    try:
        ray.init(address=address or None, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise ClusterError(f"cannot connect to Ray at {address or 'a local cluster'}: {e}") from None
    return True
