"""Prometheus metrics for `GET /metrics`, in a registry owned by one app (no process-wide globals, so two
servers in one process, as in tests, keep separate counts).

Counters and histograms are updated by the request path; engine state (queue length, KV pool use, cache hit
rate) is read from `engine.get_stats()` at scrape time by a custom collector."""
from __future__ import annotations

import time
from typing import Any, Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

from sglite.protocol import StreamChunk

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5)

# metric name, help, engine.get_stats() keys (first present wins)
ENGINE_GAUGES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("sglite_num_running_requests", "Requests in the running batch", ("num_running", "num_running_reqs")),
    ("sglite_num_queue_requests", "Requests waiting to be scheduled", ("num_waiting", "num_waiting_reqs")),
    ("sglite_cache_hit_rate", "Prompt tokens served from the prefix cache / prompt tokens, since start",
     ("cache_hit_rate",)),
    ("sglite_kv_pool_total_slots", "KV pool slots in all", ("pool_tokens", "total_slots")),
    ("sglite_kv_pool_free_slots", "KV pool slots free", ("pool_free_tokens", "free_slots")),
    ("sglite_kv_pool_cached_slots", "KV pool slots held by the prefix cache", ("cached_tree_tokens",)),
    ("sglite_forward_passes", "Model forward passes so far", ("forward_passes",)),
    ("sglite_num_retractions", "Requests preempted under memory pressure so far", ("num_retractions",)),
    ("sglite_spec_acceptance_rate", "Speculative decoding: accepted / proposed draft tokens, since start",
     ("spec_acceptance_rate",)),
    ("sglite_spec_accepted_tokens", "Speculative decoding: draft tokens accepted so far", ("spec_accepted_tokens",)),
    ("sglite_spec_row_cost", "Speculative decoding: what one more row adds to a decode step, as a share of a "
     "one-row step (measured; drafts are planned with it)", ("spec_row_cost",)),
)


class _EngineStatsCollector:
    def __init__(self, get_stats: Callable[[], dict[str, Any]]):
        self.get_stats = get_stats

    def collect(self) -> Iterable[GaugeMetricFamily]:
        try:
            stats = flatten_stats(self.get_stats())
        except Exception:  # a scrape must never fail because the engine is busy or shutting down
            return []
        values: dict[str, float] = {}
        out = []
        for name, doc, keys in ENGINE_GAUGES:
            value = next((stats[k] for k in keys if _is_number(stats.get(k))), None)
            if value is not None:
                values[name] = float(value)
                out.append(GaugeMetricFamily(name, doc, value=float(value)))
        total, free = values.get("sglite_kv_pool_total_slots"), values.get("sglite_kv_pool_free_slots")
        if total is not None and free is not None:
            out.append(GaugeMetricFamily("sglite_kv_pool_used_slots", "KV pool slots in use (requests + prefix "
                                         "cache)", value=total - free))
            out.append(GaugeMetricFamily("sglite_kv_pool_usage", "Fraction of KV pool slots in use",
                                         value=(total - free) / total if total else 0.0))
        return out


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def flatten_stats(stats: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"pool": {"used_slots": 3}} -> {"used_slots": 3, "pool.used_slots": 3} (short names keep the first)."""
    flat: dict[str, Any] = {}
    for k, v in (stats or {}).items():
        if isinstance(v, dict):
            for fk, fv in flatten_stats(v, f"{prefix}{k}.").items():
                flat.setdefault(fk, fv)
                flat.setdefault(fk.rsplit(".", 1)[-1], fv)
        else:
            flat.setdefault(f"{prefix}{k}", v)
            flat.setdefault(k, v)
    return flat


class ServerMetrics:
    """All metrics of one server. Thread-safe (prometheus_client's types are)."""

    def __init__(self, get_stats: Callable[[], dict[str, Any]] | None = None):
        self.registry = CollectorRegistry()
        r = self.registry
        self.http_requests = Counter("sglite_http_requests", "HTTP requests by path and status code",
                                     ["path", "code"], registry=r)
        self.finished = Counter("sglite_requests_finished", "Generation requests finished, by finish reason",
                                ["reason"], registry=r)
        self.aborted_by_client = Counter("sglite_requests_aborted_by_client",
                                         "Requests aborted because the client went away", registry=r)
        self.prompt_tokens = Counter("sglite_prompt_tokens", "Prompt tokens processed", registry=r)
        self.generation_tokens = Counter("sglite_generation_tokens", "Output tokens generated", registry=r)
        self.cached_tokens = Counter("sglite_cached_prompt_tokens", "Prompt tokens served from the prefix cache",
                                     registry=r)
        self.inflight = Gauge("sglite_num_inflight_requests", "Engine requests the server is waiting on",
                              registry=r)
        self.ttft = Histogram("sglite_time_to_first_token_seconds", "Time from submission to the first output token",
                              buckets=_LATENCY_BUCKETS, registry=r)
        self.tpot = Histogram("sglite_time_per_output_token_seconds", "Time between output tokens",
                              buckets=_TOKEN_BUCKETS, registry=r)
        self.e2e_latency = Histogram("sglite_e2e_request_latency_seconds", "Time from submission to the last token",
                                     buckets=_LATENCY_BUCKETS, registry=r)
        if get_stats is not None:
            r.register(_EngineStatsCollector(get_stats))

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class RequestClock:
    """Times one engine sample from its submission (first token, each later token, the end) and counts its
    tokens when it finishes."""

    def __init__(self, metrics: ServerMetrics | None):
        self.metrics = metrics
        self.t0 = self.t_last = time.perf_counter()
        self.first = True

    def on_chunk(self, chunk: StreamChunk) -> None:
        m, n = self.metrics, len(chunk.new_token_ids)
        if m is None:
            return
        now = time.perf_counter()
        if n:
            if self.first:
                m.ttft.observe(now - self.t0)
            else:
                m.tpot.observe((now - self.t_last) / n)
            self.first, self.t_last = False, now
        if chunk.finished:
            m.prompt_tokens.inc(chunk.prompt_tokens)
            m.generation_tokens.inc(chunk.completion_tokens)
            m.cached_tokens.inc(chunk.cached_tokens)
            m.finished.labels(reason=chunk.finish_reason.kind.value).inc()
            m.e2e_latency.observe(now - self.t0)
