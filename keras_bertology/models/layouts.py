"""How a family's weights are split over the `model` axis of a device mesh (`--model-parallel N` on
JAX, `keras.distribution.ModelParallel`): (regular expression over a variable's path, one mesh axis or
None per dimension). Pure data, so that family records load without Keras.

The generic block's layout is Megatron's: the query, key and value projections and the feed-forward's
first layer (GeGLU's two halves too) split their outputs, the attention's output projection and the
feed-forward's second layer their inputs, so each block needs one all-reduce after attention and one
after the feed-forward; the token table splits its rows (the vocabulary). Weights no rule names (norms,
positions, heads of other shapes) are replicated, and so is a split dimension the mesh does not divide.
"""

TRANSFORMER_BLOCK_LAYOUT = (
    (r".*attention/(query|key|value)/kernel", (None, "model")),
    (r".*attention/(query|key|value)/bias", ("model",)),
    (r".*attention/output/kernel", ("model", None)),
    (r".*block[^/]*/intermediate(_gate)?/kernel", (None, "model")),
    (r".*block[^/]*/intermediate(_gate)?/bias", ("model",)),
    (r".*block[^/]*/output/kernel", ("model", None)),
    (r".*(token|word)_embedding/embeddings", ("model", None)),
)
