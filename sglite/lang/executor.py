"""StreamExecutor: runs one program's IR nodes against a backend, in order, off the program's thread.

The program's Python code only submits nodes and goes on (it "runs ahead"); reading a variable blocks until
the node that produces it has run. Nodes run on a worker thread that is started when a node is queued and
none is running, and that exits once the queue is empty, so an idle or abandoned state holds no thread.
State mutated here (text, variables, meta_info, messages) is written only by the worker (at most one at a
time); readers call sync() or wait on the variable's event first."""
from __future__ import annotations

import queue
import threading
from typing import TYPE_CHECKING, Any, Iterator

from .ir import Expr, Gen, RoleBegin, RoleEnd, Select, Text, VarScopeBegin, VarScopeEnd
from .meta_info import count_logprobs, merge_meta
from .sampling import GenParams
from .api_speculation import ChatSpeculation, CompletionSpeculation, can_speculate

if TYPE_CHECKING:
    from ..backend.base import Backend, Prompt
    from .chat_template import ChatTemplate

_END = object()  # queue sentinel: the program has ended


class ProgramError(RuntimeError):
    """A variable was read whose producing call failed; `__cause__` holds the original error."""


class StreamExecutor:
    def __init__(self, backend: "Backend", defaults: GenParams | None = None, *, stream: bool = False,
                 use_thread: bool = True, trace: list[Expr] | None = None, num_api_spec_tokens: int | None = None):
        self.backend = backend
        self.defaults = defaults or GenParams()   # the run's options; each gen's own are merged over them
        self.stream = stream
        self.use_thread = use_thread
        self.trace = trace                  # when a list: every executed node is recorded (sgl trace)
        self.num_api_spec_tokens = num_api_spec_tokens
        # API speculation (api_speculation.py), off when streaming: a chat model's assistant blocks are held back
        # and written by one call at their end; a completion model's gens are read from text written ahead
        chat = bool(getattr(backend, "is_chat_model", False))
        self._chat_spec = ChatSpeculation(num_api_spec_tokens) if num_api_spec_tokens and chat and not stream else None
        self._spec = CompletionSpeculation(num_api_spec_tokens) if num_api_spec_tokens and not chat and not stream else None
        self._submit_role: str | None = None   # program thread: the role block open in what was submitted
        self._held_vars: set[str] = set()      # program thread: gens held back in the open assistant block
        self.text = ""
        self.variables: dict[str, Any] = {}
        self.meta_info: dict[str, Any] = {}
        self.messages: list[dict] = []
        self.error: BaseException | None = None
        self._template: "ChatTemplate | None" = None
        self._role: str | None = None        # open role block, if any
        self._role_start = 0                 # text offset where the open role's content starts
        self._roles_seen = 0
        self._scopes: dict[str, int] = {}    # var_scope name -> start offset
        self._events: dict[str, threading.Event] = {}
        self._pending: set[str] = set()      # variables submitted but not produced yet
        self._queue: queue.Queue = queue.Queue()   # (node, its GenParams or None), or _END
        self._lock = threading.Lock()              # guards _worker_running against queue puts
        self._worker_running = False
        self._ended = False
        self._cond = threading.Condition()   # guards _chunks/_done for streaming readers
        self._chunks: list[tuple[str | None, str, dict | None]] = []   # (variable or None, text, meta_info)
        self._done = False

    # --- program thread side ------------------------------------------------------------------------------
    def submit(self, expr: Expr) -> None:
        """Queue `expr`'s nodes. A gen's options are merged over the run's here, on the program's thread, so
        an invalid value raises RequestError from `s += ...` before any node of `expr` is queued."""
        nodes = list(expr.flatten())
        params = [node.params.over(self.defaults) if isinstance(node, Gen) else None for node in nodes]
        for node, p in zip(nodes, params):
            name = getattr(node, "name", None)
            if self._chat_spec is not None:
                self._track_held(node)
            if name is not None and isinstance(node, (Gen, Select, VarScopeEnd)):
                self._events[name] = threading.Event()
                self._pending.add(name)
            if self.use_thread and not self._ended:
                self._enqueue((node, p))
            else:
                self.sync()   # after end(): let the worker drain first, then run inline
                self._run_node(node, p)

    def sync(self) -> None:
        """Wait until every submitted node has run."""
        self._queue.join()

    def end(self) -> None:
        """No more nodes will come from the program; streaming readers finish once the queued ones have run.
        Idempotent; nodes submitted afterwards run inline."""
        if self._ended:
            return
        self._ended = True
        with self._lock:
            busy = self._worker_running
        if busy:
            self._enqueue(_END)   # marks done after the queued nodes
        else:
            self._mark_done()     # no worker: everything queued has run

    def _track_held(self, node: Expr) -> None:
        """Chat speculation: note which variables are produced only when the open assistant block ends."""
        if isinstance(node, RoleBegin):
            self._submit_role = node.role
        elif isinstance(node, RoleEnd):
            self._submit_role = None
            self._held_vars.clear()
        elif isinstance(node, Gen) and node.name is not None and self._submit_role == "assistant":
            self._held_vars.add(node.name)

    def get_var(self, name: str) -> Any:
        if name in self._held_vars:
            raise RuntimeError(f"variable {name!r} is written when its assistant block ends (num_api_spec_tokens "
                               "on a chat model holds the block back); read it after the block")
        event = self._events.get(name)
        if event is not None:
            event.wait()
        if name in self._pending and self.error is not None:
            raise ProgramError(f"variable {name!r} was not produced: {type(self.error).__name__}: "
                               f"{self.error}") from self.error
        if name not in self.variables:
            raise KeyError(f"no variable {name!r} in this program; known: {sorted(self.variables)}")
        return self.variables[name]

    def set_var(self, name: str, value: Any) -> None:
        self.sync()
        self.variables[name] = value

    def get_meta_info(self, name: str) -> Any:
        self.get_var(name)
        return self.meta_info.get(name)

    def fail(self, error: BaseException) -> None:
        """Record `error` (first one wins), skip the remaining nodes, and wake every reader."""
        if self.error is None:
            self.error = error
        for event in list(self._events.values()):
            event.set()

    def fork(self, n: int) -> list["StreamExecutor"]:
        """n copies of this state. The shared prefix goes to the backend's cache first, so the branches'
        requests all hit it instead of each prefilling it."""
        self.sync()
        if self.error is None and self.text:
            try:
                self.backend.commit_prefix(self.prompt(), self.defaults.lora_path)
            except Exception as e:   # noqa: BLE001 - reported through s.error()
                self.fail(e)
        return [self._copy() for _ in range(n)]

    def _copy(self) -> "StreamExecutor":
        child = StreamExecutor(self.backend, self.defaults, stream=self.stream, use_thread=self.use_thread,
                               trace=self.trace, num_api_spec_tokens=self.num_api_spec_tokens)
        child.text, child.error, child._template = self.text, self.error, self._template
        child.variables, child.meta_info = dict(self.variables), dict(self.meta_info)
        child.messages = [dict(m) for m in self.messages]
        child._role, child._role_start, child._roles_seen = self._role, self._role_start, self._roles_seen
        child._scopes = dict(self._scopes)
        return child

    # --- streaming readers --------------------------------------------------------------------------------
    def iter_chunks(self, var_name: str | None = None) -> Iterator[tuple[str, dict | None]]:
        """(text, meta_info) as text is appended (all of it, or only `var_name`'s), until the program or the
        variable ends. A generated chunk's meta_info is the backend's for that chunk (totals so far, logprob
        lists as increments); other text has None."""
        seen = 0
        while True:
            with self._cond:
                while seen == len(self._chunks) and not (self._done or self._var_finished(var_name)):
                    self._cond.wait()
                new, seen = self._chunks[seen:], len(self._chunks)
                last = self._done or self._var_finished(var_name)
            for var, piece, meta in new:
                if var_name is None or var == var_name:
                    yield piece, meta
            if last:
                return

    def _var_finished(self, var_name: str | None) -> bool:
        return var_name is not None and var_name not in self._pending and var_name in self.variables

    # --- worker side --------------------------------------------------------------------------------------
    def _enqueue(self, item: Any) -> None:
        with self._lock:
            self._queue.put(item)
            if self._worker_running:
                return
            self._worker_running = True
        threading.Thread(target=self._drain, daemon=True, name="sglite-program").start()

    def _drain(self) -> None:
        """The worker: runs queued items in order and exits when the queue is empty."""
        while True:
            with self._lock:
                if self._queue.empty():
                    self._worker_running = False
                    return
                item = self._queue.get_nowait()
            try:
                if item is _END:
                    self._mark_done()
                else:
                    self._run_node(*item)
            finally:
                self._queue.task_done()

    def _mark_done(self) -> None:
        with self._cond:
            self._done = True
            self._cond.notify_all()

    def _run_node(self, node: Expr, params: GenParams | None = None) -> None:
        if self.trace is not None:
            self.trace.append(node)
        if self.error is not None:   # skipped; a reader of its variable gets the error, not a hang
            event = self._events.get(getattr(node, "name", None) or "")
            if event is not None:
                event.set()
            return
        try:
            if isinstance(node, Gen):
                self._exec_gen(node, params)
            else:
                getattr(self, "_exec_" + node.op)(node)
        except Exception as e:   # noqa: BLE001 - one failing call stops this program only
            self.fail(e)

    def prompt(self) -> "Prompt":
        from ..backend.base import Prompt
        msgs = list(self.messages)
        if self._role is not None:
            msgs.append({"role": self._role, "content": self.text[self._role_start:]})
        return Prompt(self.text, tuple(msgs))

    def _append(self, text: str, var: str | None = None, meta: dict | None = None) -> None:
        self.text += text
        with self._cond:
            self._chunks.append((var, text, meta))
            self._cond.notify_all()

    def _produce(self, name: str | None, value: Any, meta: Any) -> None:
        if name is None:
            return
        self.variables[name] = value
        self.meta_info[name] = meta
        self._pending.discard(name)
        with self._cond:
            self._cond.notify_all()
        event = self._events.get(name)
        if event is not None:
            event.set()

    def _holding(self) -> bool:
        """Whether text and gens are being held back for a speculative assistant block (chat models)."""
        return self._chat_spec is not None and self._role == "assistant"

    def _fill(self, text: str, var: str | None = None, meta: dict | None = None) -> None:
        """Append text the program (not a gen) wrote; completion speculation reads it off its text ahead."""
        if self._spec is not None:
            self._spec.fill(text)
        self._append(text, var, meta)

    def _call(self, params: GenParams) -> tuple[str, dict]:
        result = self.backend.generate(self.prompt(), params)
        return result.text, dict(result.meta_info or {})

    def _exec_text(self, node: Text) -> None:
        if self._holding():
            self._chat_spec.fill(node.value)
            return
        self._fill(node.value)

    def _exec_gen(self, node: Gen, params: GenParams) -> None:
        if self._holding():
            self._chat_spec.gen(node.name, params)   # its variable is produced when the block ends
            return
        if self._spec is not None and can_speculate(params):
            out, meta = self._spec.gen(params, self._call)
            self._append(out, node.name, meta)
        else:
            if self._spec is not None:
                self._spec.drop()   # written ahead of this gen's output
            if self.stream:
                out, meta = self._gen_streamed(node.name, params)
            else:
                out, meta = self._call(params)
                meta = count_logprobs(meta)
                self._append(out, node.name, meta)
        self._produce(node.name, out, meta)

    def _gen_streamed(self, name: str | None, params: GenParams) -> tuple[str, dict]:
        """Append a gen's text chunk by chunk, each with its meta_info; returns the text and the meta_info of
        the whole (final totals, every increment)."""
        parts, meta = [], {}
        for piece in self.backend.generate_stream(self.prompt(), params):
            chunk_meta = count_logprobs(dict(piece.meta_info or {}), len(meta.get("output_token_logprobs", ())))
            parts.append(piece.text)
            self._append(piece.text, name, chunk_meta)
            meta = merge_meta(meta, chunk_meta)
        return "".join(parts), meta

    def _exec_select(self, node: Select) -> None:
        decision = self.backend.select(self.prompt(), list(node.choices), node.temperature, node.method,
                                       lora_path=node.lora_path or self.defaults.lora_path)
        self._fill(decision.decision, node.name)
        self._produce(node.name, decision.decision, decision.meta_info)

    def _exec_role_begin(self, node: RoleBegin) -> None:
        if self._role is not None:
            raise ValueError(f"role {node.role!r} begins inside the open {self._role!r} block; end it first")
        if self._template is None:
            self._template = self.backend.chat_template()
        first = self._roles_seen == 0 and not self.text
        self._fill(self._template.begin(node.role, first_role=first))
        self._role, self._role_start = node.role, len(self.text)
        self._roles_seen += 1

    def _exec_role_end(self, node: RoleEnd) -> None:
        if self._role != node.role:
            raise ValueError(f"{node.role!r} block ended but the open block is {self._role!r}")
        if self._holding():
            for term in self._chat_spec.resolve(self._call):
                self._append(term.text, term.gen_name)
                if term.is_gen:
                    self._produce(term.gen_name, term.text, {})
        self.messages.append({"role": node.role, "content": self.text[self._role_start:]})
        self._role = None
        self._fill(self._template.end(node.role))

    def _exec_var_scope_begin(self, node: VarScopeBegin) -> None:
        self._scopes[node.name] = len(self.text)

    def _exec_var_scope_end(self, node: VarScopeEnd) -> None:
        start = self._scopes.pop(node.name)
        self._produce(node.name, self.text[start:], None)
