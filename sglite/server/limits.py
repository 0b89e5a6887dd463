"""What one request may ask of the server, the same on the OpenAI routes and on /generate: past these a request is
a 400 naming the field, before anything is queued."""
from __future__ import annotations

MAX_N = 64                # samples per prompt
MAX_TOP_LOGPROBS = 20     # alternatives reported per token (OpenAI's own limit)
HEALTH_GENERATE_TIMEOUT_S = 20.0   # /health_generate: one token within this, or the engine counts as stuck
