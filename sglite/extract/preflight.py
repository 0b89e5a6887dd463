"""Checks that run before the model loads, so a job that cannot succeed fails in seconds, not after every
document ran: the schema (valid, and every keyword enforceable), the server behind `--url`, and Ray and the
cluster behind `--ray`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .setup_error import SetupError

SERVER_TIMEOUT_S = 5.0


def load_schema(path: Path) -> dict[str, Any]:
    """The schema file as a dict; SetupError if it is not JSON or not a valid JSON Schema."""
    import jsonschema

    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise SetupError(f"--schema {path}: cannot read ({e.strerror or e})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SetupError(f"--schema {path} is not JSON: {e}") from None
    if not isinstance(schema, dict):
        raise SetupError(f"--schema {path}: a JSON Schema for a record is an object, got {type(schema).__name__}")
    try:
        validator_class(schema).check_schema(schema)
    except jsonschema.SchemaError as e:
        where = "#" + "".join(f"/{p}" for p in e.path)
        raise SetupError(f"--schema {path} is not a valid JSON Schema at {where}: {e.message}") from None
    return schema


def check_schema_dict(spec: Any, where: str = "schema") -> None:
    """SetupError unless the job's schema is a valid JSON Schema whose every keyword the engine enforces."""
    import jsonschema

    try:
        validator_class(spec.schema).check_schema(spec.schema)
    except jsonschema.SchemaError as e:
        at = "#" + "".join(f"/{p}" for p in e.path)
        raise SetupError(f"{where} is not a valid JSON Schema at {at}: {e.message}") from None
    check_enforceable(spec.schema_text, where)


def load_model_schema(spec: str) -> type:
    """`module:Model` (a pydantic model class importable from here) -> the class; SetupError otherwise."""
    import importlib
    import sys

    module_name, _, name = spec.partition(":")
    if "" not in sys.path:
        sys.path.insert(0, "")   # a module beside the user, as `python -m` finds it
    try:
        model = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as e:
        raise SetupError(f"--schema {spec}: cannot import it ({type(e).__name__}: {e}); give module:Model with the "
                         "module importable from here, or a JSON Schema file") from None
    if not (isinstance(model, type) and hasattr(model, "model_json_schema")):
        raise SetupError(f"--schema {spec}: {name} is not a pydantic model class")
    return model


def validator_class(schema: dict[str, Any]) -> Any:
    """The jsonschema validator for the schema's `$schema` dialect (2020-12 when it names none), the same
    choice the grammar compiler makes."""
    import jsonschema
    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)


def check_enforceable(schema_text: str, path: Path | str) -> None:
    """Lower the schema the engine will compile to the grammar IR, as the engine's compiler does in generation
    mode. This needs no tokenizer (only token masks do) and takes well under a second, so an unsupported keyword
    is refused here, before the model loads, with its name and JSON pointer."""
    from ..runtime.constrained import GrammarError, UnsupportedSchemaError
    from ..runtime.constrained.schema.schema_compiler import SchemaCompiler

    from ..grounding import without_sources
    from ..protocol import RequestError

    label = f"--schema {path}" if isinstance(path, Path) else path
    try:
        # grounded fields name the input document (the job gives it to each record's gen as "document")
        schema = without_sources(json.loads(schema_text), {"document"})
    except RequestError as e:
        raise SetupError(f"{label}: {e.message}") from None
    try:
        SchemaCompiler(schema, {}, canonical=True).compile(schema, "#")
    except UnsupportedSchemaError as e:
        raise SetupError(f"{label}: {e}") from None
    except GrammarError as e:
        raise SetupError(f"{label}: cannot compile: {e}") from None
    except RecursionError:
        raise SetupError(f"{label}: nests too deeply to compile") from None


def check_server(url: str) -> None:
    """SetupError unless `url` answers /get_model_info (an sglite or SGLang server) within a few seconds."""
    import httpx

    target = url.rstrip("/") + "/get_model_info"
    try:
        r = httpx.get(target, timeout=SERVER_TIMEOUT_S)
    except (httpx.HTTPError, httpx.InvalidURL) as e:
        raise SetupError(f"--url {url}: cannot reach the server ({type(e).__name__}: {e or 'no answer'}); "
                         "start one with `sglite serve`, or fix the address") from None
    if r.status_code >= 400:
        raise SetupError(f"--url {url}: GET /get_model_info answered HTTP {r.status_code}; is this an sglite "
                         "or SGLang server?")


def check_ray(address: str | None, replicas: int | None, shard_size: int | None) -> None:
    """SetupError unless Ray is installed, the counts are >= 1 and the cluster's address (None: the local one)
    accepts a connection within a few seconds."""
    from ..distributed.cluster import ClusterError, check_address, require_ray

    for flag, value in (("--replicas", replicas), ("--shard-size", shard_size)):
        if value is not None and value < 1:
            raise SetupError(f"{flag} must be >= 1, got {value}")
    try:
        require_ray()
        check_address(address)
    except ClusterError as e:
        raise SetupError(f"--ray: {e}") from None
