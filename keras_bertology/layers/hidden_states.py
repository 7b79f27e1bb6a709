"""The hidden states of an encoder, layer by layer, as its blocks compute them: what a linear probe reads.

A block reports each call to `record_block`; outside `recording_blocks()` that costs one attribute read.
Inside it, the first call adds the states the first layer reads (the embeddings) and every call adds its
output, in call order, so a stack that reuses one block (ALBERT) gives one state per layer as well.
"""

import contextlib
import threading

_ACTIVE = threading.local()


@contextlib.contextmanager
def recording_blocks():
    """Collects [what the first block read, each block's output] of the calls made inside, in order."""
    states, outer = [], getattr(_ACTIVE, "states", None)
    _ACTIVE.states = states
    try:
        yield states
    finally:
        _ACTIVE.states = outer


def record_block(inputs, outputs):
    """A block's call: its input states (kept for the first call only) and its output states."""
    states = getattr(_ACTIVE, "states", None)
    if states is not None:
        if not states:
            states.append(inputs)
        states.append(outputs)
    return outputs
