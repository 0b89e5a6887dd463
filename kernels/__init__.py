"""Kernels, each beside its torch reference of the same signature (see docs/DESIGN.md).

Triton (GPU, or the CPU under TRITON_INTERPRET=1):
    decode_attention   paged decode attention, GQA, split-KV flash-decoding
    extend_attention   new tokens over their cached prefix + causally among themselves
    kv_store           write new K/V into the paged pool
    token_mask         apply a packed [B, ceil(V/32)] int32 token bitmask to logits
CPU (numba, or C compiled on the machine by native.py; the C sources share native.h):
    decode_attention_cpu   paged decode attention (C, else numba), reading K/V in place; cascade over a prefix
                           every request shares
    layer_ops_cpu      a decoder layer's small ops fused (numba)
    head_refine_cpu    the output head's top-k refinement (numba): select, then exact dot products
    kv_quant_cpu       quantizing new K/V into a one-byte KV pool (numba)
    trie_walk_cpu      the token classification walk over the vocabulary trie (numba)
    w4a8_cpu           4-bit weights x int8-quantized activations (C)
    w8a8_cpu           its 8-bit twin: 8-bit block weights (blocks of 16 or 32) x the same activations (C);
                       block_gemm holds what the two share
registry: which of these each op runs on this machine, and why not (`python -m sglite.kernels.registry`).

Import the submodules directly. Triton is imported only when a kernel is first used, so the torch references
work without it; TRITON_INTERPRET=1 must be set before that first use to run the kernels on the CPU.
"""
