"""Recomputed blocks (`--remat`): a block keeps its inputs, not its activations, for the backward pass.

A training step holds every block's intermediate activations (attention
scores and probabilities, the feed-forward's inner width) until the
backward pass reads them. A recomputed block holds only its inputs and runs
its forward pass again in the backward pass, through `keras.remat`
(TensorFlow's `recompute_grad`, JAX's `checkpoint`). The second pass must
drop what the first dropped: inside a block every `HashedDropout` takes its
seed from the one the block drew for this call and the order of the call,
never from its own generator, whose state would have moved on.

On TensorFlow, `recompute_grad` registers a gradient function per traced
call that keeps its graph alive until the process ends (measured: about
85 MiB per traced 2-layer BERT step): a run traces its step once, but a
process that builds many recomputed models keeps them all.
"""

import contextlib
import threading

import keras
from keras import ops

GOLDEN = 0x9E3779B9  # 2^32 over the golden ratio: its multiples spread evenly over 32-bit words
_SCOPE = threading.local()  # tf.distribute traces each replica's step in a thread of its own


@contextlib.contextmanager
def _dropout_seed_scope(seed):
    outer = getattr(_SCOPE, "active", None)
    _SCOPE.active = {"seed": seed, "calls": 0}
    try:
        yield
    finally:
        _SCOPE.active = outer


def scoped_dropout_seed():
    """The seed of the next dropout call inside a block, or None outside every block."""
    scope = getattr(_SCOPE, "active", None)
    if scope is None:
        return None
    offset = scope["calls"] * GOLDEN % 2**32
    scope["calls"] += 1
    return ops.cast(scope["seed"], "uint32") + ops.convert_to_tensor([offset, 0], "uint32")


class RecomputableBlock:
    """Mixin of a layer that runs through `run_block`: it owns the seed of its dropouts and a `remat` switch.

    Call `init_recomputable()` in `__init__` (it creates the seed's variable).
    """

    def init_recomputable(self):
        self.remat = False
        self.block_seed_generator = keras.random.SeedGenerator()

    def run_block(self, forward, *args, training=None, **kwargs):
        """`forward(*args, training=training, **kwargs)` with this call's dropout seed; recomputed in the
        backward pass when `self.remat` is set and the call trains. Every tensor a gradient reaches must
        be in `args` or `kwargs` (TensorFlow's recompute_grad gives none to a tensor `forward` closes
        over); the floating-point ones are handed to the recomputed function, integer and boolean ones
        (masks, positions), which no gradient reaches, are closed over."""
        if not training:
            return forward(*args, training=training, **kwargs)
        seed = self.block_seed_generator.next()
        structure = (args, kwargs)
        leaves = keras.tree.flatten(structure)
        positions = [index for index, leaf in enumerate(leaves)
                     if ops.is_tensor(leaf) and keras.backend.is_float_dtype(leaf.dtype)]

        def run(*tensors):
            filled = list(leaves)
            for index, tensor in zip(positions, tensors):
                filled[index] = tensor
            given, named = keras.tree.pack_sequence_as(structure, filled)
            with _dropout_seed_scope(seed):
                return forward(*given, training=training, **named)

        tensors = [leaves[index] for index in positions]
        return keras.remat(run)(*tensors) if self.remat else run(*tensors)


def set_remat(model, remat=True):
    """Turns recomputation on (or off) for every recomputable block of `model`; returns how many."""
    blocks = [layer for layer in model._flatten_layers(include_self=True, recursive=True)
              if isinstance(layer, RecomputableBlock)]
    for block in blocks:
        block.remat = remat
    return len(blocks)
