"""`sgl.global_config`: SGLang's process-wide frontend settings, for programs that read or set them.

sglite keeps its settings explicit (a backend per run, options per gen); this object exists so that SGLang
programs run unchanged. `default_backend` is a view of `set_default_backend` / `get_default_backend`; the other
fields are SGLang's, with their defaults, and each says below what it does here. A name SGLang does not have
raises AttributeError instead of being stored unread."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .default_backend import get_default_backend, set_default_backend

if TYPE_CHECKING:
    from ..backend.base import Backend


class GlobalConfig:
    """SGLang's GlobalConfig fields:

    - `default_backend`: the backend `run()` uses without `backend=` (None until set; reading it does not
      start a Runtime). Setting it is `sgl.set_default_backend(backend)`.
    - `verbosity`: 2 or more prints each program's final text when its run() returns (SGLang's behaviour).
    - `skip_special_tokens_in_output`: the default of `skip_special_tokens` for every gen of a run.
    - `enable_precache_with_tracing`: `run_batch` prefills the text every program starts with once, found by
      tracing, before the programs start.
    - `spaces_between_special_tokens_in_out`: True only; sglite's detokenizer has no other mode.
    - `enable_parallel_encoding`: accepted, no effect: a fork joined with "concate_and_append" always
      appends the branches' text (SGLang's fallback when a backend cannot concatenate KV caches), which gives
      the same text either way.
    """

    _FIELDS = ("verbosity", "skip_special_tokens_in_output", "spaces_between_special_tokens_in_out",
               "enable_precache_with_tracing", "enable_parallel_encoding")

    def __init__(self) -> None:
        self.verbosity = 0
        self.skip_special_tokens_in_output = True
        self.spaces_between_special_tokens_in_out = True
        self.enable_precache_with_tracing = True
        self.enable_parallel_encoding = True

    @property
    def default_backend(self) -> "Backend | None":
        return get_default_backend(create=False)

    @default_backend.setter
    def default_backend(self, backend: "Backend | None") -> None:
        set_default_backend(backend)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "default_backend":
            object.__setattr__(self, name, value)   # the property's setter
            return
        if name not in self._FIELDS:
            raise AttributeError(f"global_config has no setting {name!r}; SGLang's settings are "
                                 f"{['default_backend', *self._FIELDS]}")
        if name == "spaces_between_special_tokens_in_out" and value is not True:
            raise ValueError("spaces_between_special_tokens_in_out=False is not supported: sglite's detokenizer "
                             "has no such option")
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in ("default_backend", *self._FIELDS))
        return f"GlobalConfig({fields})"


global_config = GlobalConfig()
