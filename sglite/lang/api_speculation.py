"""API speculative execution: `@sgl.function(num_api_spec_tokens=N)`, as SGLang defines it.

A program that alternates fixed text and short gens (`"Name:" + gen(stop="\\n") + "\\nJob:" + gen(...)`) costs
one model call per gen. With speculation one call writes ahead and the following gens are cut from its text:

- Completion backends (Runtime, RuntimeEndpoint, OpenAI(is_chat_model=False)): `CompletionSpeculation`. A gen
  that has stop strings, with nothing left to read, asks for max(its max_tokens, N) tokens without stops; the
  gen's value is the text up to its first stop string. Text the program appends next is matched against what
  the model wrote on: while they agree the next gen is read from the same call, once they differ the rest is
  dropped and the next gen calls again. A gen without stop strings, with a regex/json_schema/ebnf or logprob
  options cannot be cut from free text and makes an ordinary call (SGLang cuts those by character count).
- Chat backends (OpenAI chat models): `ChatSpeculation`. Inside an assistant block the gens and the text
  between them are held back; when the block ends one chat completion writes the whole message (N tokens), and
  it is split by the program's text: each text must appear in order, each gen takes what lies before its stop
  string (the last gen the rest). A reply that does not follow the text is asked again, up to 3 times; then
  the gens fail with the reply in the error (SGLang fills what it matched instead).

Both hold per-program state only (SGLang keeps the chat state on the backend, shared by every program).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

from .sampling import GenParams

CHAT_SPEC_TRIES = 3


def first_stop(text: str, stops: tuple[str, ...]) -> int:
    """Offset of the earliest stop string in `text`, or -1."""
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(hits) if hits else -1


def can_speculate(params: GenParams) -> bool:
    """Whether a gen's value can be cut from free text written ahead: it ends at a stop string, and asks
    nothing the free text does not carry (a grammar, a stop regex, logprobs)."""
    sp = params.sampling
    return bool(sp.stop) and sp.constraint is None and not sp.stop_regex and not params.return_logprob


def speculative_params(params: GenParams, num_tokens: int) -> GenParams:
    """The call that writes ahead: the gen's sampling without its stops, at least `num_tokens` long."""
    sampling = params.sampling.replace(stop=(), max_new_tokens=max(params.sampling.max_new_tokens, num_tokens))
    return dataclasses.replace(params, sampling=sampling)


@dataclass
class CompletionSpeculation:
    """Text a completion call wrote ahead of the program, not yet read by a gen or matched by its text."""
    num_tokens: int
    text: str = ""
    truncated: bool = False   # the call that wrote `text` ended at its token limit (more would have followed)

    def fill(self, value: str) -> None:
        """The program appended `value`: read it off the speculation, or drop the speculation if the model wrote
        something else there."""
        if self.text.startswith(value):
            self.text = self.text[len(value):]
        else:
            self.text = ""

    def drop(self) -> None:
        self.text = ""

    def gen(self, params: GenParams, call: Callable[[GenParams], tuple[str, dict]]) -> tuple[str, dict]:
        """A speculatable gen's value and meta_info. `call(params)` asks the backend to continue the program's
        text as it is now; it is made when nothing is left to read, or when what is left ends without the
        gen's stop string because the call that wrote it was cut short. Only the gen that made the call gets
        its meta_info; the gens read from it get {}."""
        stops = params.sampling.stop
        meta: dict = {}
        if not self.text or (first_stop(self.text, stops) < 0 and self.truncated):
            self.text, meta = call(speculative_params(params, self.num_tokens))
            self.truncated = (meta.get("finish_reason") or {}).get("type") == "length"
        cut = first_stop(self.text, stops)
        if cut < 0:
            value, self.text = self.text, ""
        else:
            value, self.text = self.text[:cut], self.text[cut:]   # the stop string stays, for the next text
        return value, meta


@dataclass
class _Term:
    text: str = ""                  # held-back text, or (after matching) the gen's value
    gen_name: str | None = None     # None: program text
    stops: tuple[str, ...] = ()
    is_gen: bool = False


@dataclass
class ChatSpeculation:
    """The assistant block being held back: its text and gens in order, and the sampling they share."""
    num_tokens: int
    terms: list[_Term] = field(default_factory=list)
    params: GenParams | None = None

    def fill(self, value: str) -> None:
        self.terms.append(_Term(value))

    def gen(self, name: str | None, params: GenParams) -> None:
        """Hold back a gen. Every gen of one block must ask the same sampling but for max_tokens and stop:
        they share one call."""
        if params.sampling.constraint is not None or params.sampling.stop_regex:
            raise ValueError("with num_api_spec_tokens on a chat model, a gen in an assistant block is cut from one "
                             "free-text reply by its stop strings: regex/json_schema/ebnf and stop_regex cannot "
                             "apply; remove num_api_spec_tokens for this program")
        shared = dataclasses.replace(params, sampling=params.sampling.replace(stop=(), max_new_tokens=self.num_tokens))
        if self.params is None:
            self.params = shared
        elif shared != self.params:
            raise ValueError("with num_api_spec_tokens on a chat model, the gens of one assistant block share one "
                             "call: give them the same sampling options (only max_tokens and stop may differ)")
        self.terms.append(_Term(gen_name=name, stops=tuple(params.sampling.stop), is_gen=True))

    def resolve(self, call: Callable[[GenParams], tuple[str, dict]]) -> list[_Term]:
        """Make the block's call (up to CHAT_SPEC_TRIES times) and return its terms with the gens' values.
        Resets the held-back block."""
        terms, params = self.terms, self.params
        self.terms, self.params = [], None
        if not any(t.is_gen for t in terms):
            return terms
        reply = ""
        for _ in range(CHAT_SPEC_TRIES):
            reply, _meta = call(params)
            matched = match_terms(terms, reply)
            if matched is not None:
                return matched
        fixed = [t.text for t in terms if not t.is_gen]
        raise RuntimeError(f"speculative chat execution: after {CHAT_SPEC_TRIES} tries the model's reply did not "
                           f"follow the program's text {fixed!r}; last reply: {reply[:300]!r}. Remove "
                           "num_api_spec_tokens, or make the gens' stop strings appear in the reply")


def match_terms(terms: list[_Term], reply: str) -> list[_Term] | None:
    """Split `reply` by the held-back text: the terms with each gen's value, or None if the reply does not
    follow the program's text (a text not where expected, or a gen before the last without its stop)."""
    out, rest = [], reply
    for i, term in enumerate(terms):
        if not term.is_gen:
            if not rest.startswith(term.text):
                return None
            rest = rest[len(term.text):]
            out.append(term)
            continue
        cut = first_stop(rest, term.stops)
        if cut < 0:
            if i != len(terms) - 1:
                return None
            cut = len(rest)
        out.append(dataclasses.replace(term, text=rest[:cut]))
        rest = rest[cut:]
    return out
