"""Triton kernels, each beside its torch reference of the same signature (see docs/DESIGN.md).

    decode_attention   paged decode attention, GQA, split-KV flash-decoding
    extend_attention   new tokens over their cached prefix + causally among themselves
    kv_store           write new K/V into the paged pool
    token_mask         apply a packed [B, ceil(V/32)] int32 token bitmask to logits
    decode_attention_cpu   paged decode attention for the CPU (numba), reading K/V in place; cascade over a
                           prefix every request shares
    layer_ops_cpu      a decoder layer's small ops fused for the CPU (numba)
    head_refine_cpu    the output head's top-k refinement for the CPU (numba): select, then exact dot products
    w4a8_cpu           4-bit weights x int8-quantized activations for the CPU (C, compiled on the machine)
    w8a8_cpu           its 8-bit twin: 8-bit block weights (blocks of 16 or 32) x the same activations

Import the submodules directly. Triton is imported only when a kernel is first used, so the torch references
work without it; TRITON_INTERPRET=1 must be set before that first use to run the kernels on the CPU.
"""
