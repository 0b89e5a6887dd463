"""The sglite frontend language (SGLang-compatible): IR, @function programs, program state, interpreter."""
from .api import (assistant, assistant_begin, assistant_end, flush_cache, function, gen, gen_int, gen_string,
                  get_server_info, image, select, system, system_begin, system_end, user, user_begin, user_end,
                  video)
from .choices import greedy_token_selection, token_length_normalized, unconditional_likelihood_normalized
from .executor import ProgramError
from .default_backend import get_default_backend, set_default_backend
from .function import SglFunction
from .global_config import GlobalConfig, global_config
from ..protocol import RequestError, SamplingParams
from .state import ProgramState, ProgramStateGroup
