"""The backend programs use when `run()` gets no `backend=`: one per process, set by the user or created on
first use. `sgl.set_default_backend`, `sgl.global_config.default_backend` and `run()` all read it here."""
from __future__ import annotations

import atexit
import logging
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..backend.base import Backend

logger = logging.getLogger(__name__)

_default_lock = threading.Lock()
_default_backend: "Backend | None" = None


def set_default_backend(backend: "Backend | None") -> None:
    """The backend programs use when run() gets no backend= (None: none set). Its owner shuts it down."""
    global _default_backend
    _default_backend = backend


def get_default_backend(create: bool = True) -> "Backend | None":
    """The default backend. Without one (and with `create`), an in-process `Runtime()` on the default model is
    created once, logged, and shut down at interpreter exit: the library's only atexit hook, since nobody
    else holds that runtime. A backend given to set_default_backend is never shut down by the library."""
    global _default_backend
    with _default_lock:
        if _default_backend is None and create:
            from ..backend.runtime import Runtime
            logger.warning("sglite: no backend set; starting the in-process Runtime() on the default model "
                           "(sgl.set_default_backend(...) to choose)")
            runtime = Runtime()
            atexit.register(runtime.shutdown)
            _default_backend = runtime
        return _default_backend
