"""Rotary position embeddings (Su et al., 2021) in the rotate-half layout.

A head of width D is read as D/2 pairs (x[k], x[k + D/2]) (the first and the
second half, not interleaved neighbours); the pair k of the token at position
p turns by the angle p * base^(-2k/D). Rotating both queries and keys makes
q.k depend on the positions only through their difference, so no absolute
position table is needed. Computed in float32 whatever the compute dtype, as
the original does: angles of long sequences lose their fraction in bfloat16.
"""

import numpy as np
from keras import ops


def inverse_frequencies(head_dim, base):
    """[D/2] float32 base^(-2k/D), computed in float32 as the reference implementations do."""
    if head_dim % 2:
        raise ValueError(f"rotary embeddings need an even head width; got {head_dim}")
    exponents = np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)
    return np.float32(1.0) / np.power(np.float32(base), exponents, dtype=np.float32)


def rotate(heads, positions, base):
    """`heads` [B, L, N, D] turned by their `positions` [B, L] (or [1, L]) with rotary `base`."""
    dtype = heads.dtype
    width = heads.shape[-1]
    x = ops.cast(heads, "float32")
    angles = ops.cast(positions, "float32")[:, :, None] * ops.convert_to_tensor(inverse_frequencies(width, base))
    angles = ops.expand_dims(ops.concatenate([angles, angles], axis=-1), axis=2)  # [B, L, 1, D]
    half = width // 2
    turned = ops.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return ops.cast(x * ops.cos(angles) + turned * ops.sin(angles), dtype)


def sequence_positions(length):
    """[1, L] int32 positions 0 .. L-1, for rows whose tokens all count from the start."""
    return ops.expand_dims(ops.arange(length, dtype="int32"), 0)
