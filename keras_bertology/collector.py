"""Python's cyclic garbage collector, run less often while a command traces and trains.

Tracing a step (TensorFlow's graphs, JAX's jaxprs, Keras's layers) makes millions of short-lived Python
objects, and at the collector's default a young-generation pass runs every 700 of them and a full pass,
which walks every live object of TensorFlow and Keras (about a million), every hundred young passes. For the
commands' tiny to small models that is a tenth of the work: BERT-Tiny's 6-step `bertology pretrain` (2 CPU
cores) took 26.2 s at the default and 23.4-24.4 s with young passes every 10,000 objects, at the same peak
memory (1.71 and 1.74 GB). A larger model spends the same seconds in its traces and many more in its steps.

The garbage is collected all the same, in passes 14 times rarer (each a little longer).
"""

import contextlib
import gc

# Young passes every 10,000 net allocations; the older generations' multipliers as Python's own.
THRESHOLDS = (10_000, 10, 10)


@contextlib.contextmanager
def fewer_collections():
    """The collector at `THRESHOLDS` inside the block, then as it was. A caller's collector that already
    runs as rarely, or not at all (threshold 0), is left alone."""
    previous = gc.get_threshold()
    if 0 < previous[0] < THRESHOLDS[0]:
        gc.set_threshold(*THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*previous)
