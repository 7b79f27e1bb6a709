"""BigBird's block-sparse self-attention (ITC): window, global and random blocks, memory linear in length.

The sequence is cut into blocks of `block_size` tokens (padded to a whole
number of blocks inside the layer). The first and the last query blocks are
global: they attend to every key, and every query attends to them. Every
other query block attends to a window of 3 blocks (itself and its
neighbours), to the 2 global blocks, and to `random_blocks` blocks drawn
outside both. Scores exist only for those pairs: [B, N, blocks - 2, block,
(5 + r) x block] plus [B, N, 2 x block, L], so the attention's memory grows as
L x block x (5 + r) instead of L^2, and no [L, L] tensor is ever formed.

At and below (5 + 2r) x block tokens, where the blocks would cover most of
the sequence anyway, the layer computes full attention instead (the rule of
transformers' BigBird, taken per call rather than once for good).

The random plan is a deterministic function of the layer's `seed` and the
number of blocks, computed in the graph with integer arithmetic: the same on
TensorFlow and JAX, for static and dynamic lengths, at training and at
serving, and saved with the model as the seed. `random_plans` pins explicit
plans for given block counts (to reproduce another implementation's).
"""

import keras
from keras import ops

from keras_bertology.errors import ConfigError
from keras_bertology.layers.attention import MultiHeadSelfAttention
from keras_bertology.layers.dot_product import MASKED_SCORE

WINDOW_BLOCKS = 3
GLOBAL_BLOCKS = 2

# The plan's hash: arithmetic modulo a prime whose square fits int32, so every product is exact.
_PRIME = 46337
_MULTIPLIER = 40503
_INCREMENT = 12345


def dense_length_limit(block_size, random_blocks):
    """The longest sequence the layer attends to in full: (5 + 2r) x block tokens."""
    return (WINDOW_BLOCKS + GLOBAL_BLOCKS + 2 * random_blocks) * block_size


def _mix(state, value):
    """One round of the plan's hash: absorb `value` (int32, >= 0), then square to bend it."""
    state = ops.mod(ops.mod(state + value, _PRIME) * _MULTIPLIER, _PRIME)
    return ops.mod(state * state + _INCREMENT, _PRIME)


def random_plan(seed, num_heads, num_blocks, random_blocks):
    """[heads, num_blocks - 2, random_blocks] int32: the key blocks each middle query block (1 to
    num_blocks - 2) attends to at random, per head.

    Drawn without replacement among blocks 1 to num_blocks - 2 outside the query's window, and, as
    the original, block 1 never draws block num_blocks - 2 nor that block draws block 1. Each
    candidate gets a pseudo-random priority hashed from (seed, head, query block, key block), and
    the `random_blocks` highest win: uniform over the candidates, the same for any backend.
    `num_blocks` may be a tensor (a length known only when the graph runs).
    """
    heads = ops.reshape(ops.arange(num_heads, dtype="int32"), (-1, 1, 1))
    queries = ops.reshape(ops.arange(1, num_blocks - 1, dtype="int32"), (1, -1, 1))
    keys = ops.reshape(ops.arange(num_blocks, dtype="int32"), (1, 1, -1))
    priority = ops.full((1, 1, 1), seed % _PRIME, "int32")
    for value in (heads, queries, keys, heads + queries):
        priority = _mix(_mix(priority, value), keys)
    last = num_blocks - 2
    valid = ops.logical_and(ops.logical_and(keys >= 1, keys <= last), ops.abs(keys - queries) > 1)
    valid = ops.logical_and(valid, ops.logical_not(ops.logical_and(queries == 1, keys == last)))
    valid = ops.logical_and(valid, ops.logical_not(ops.logical_and(queries == last, keys == 1)))
    priority = ops.where(valid, priority, -1)
    return ops.cast(ops.top_k(priority, random_blocks)[1], "int32")


@keras.saving.register_keras_serializable(package="keras_bertology")
class BlockSparseSelfAttention(MultiHeadSelfAttention):
    """Multi-head self-attention over BigBird's ITC pattern (see the module's docstring).

    The projections, their names and the score scale are `MultiHeadSelfAttention`'s, so a block-sparse
    encoder loads a dense one's weights and back. Padding is the original's: padded keys are hidden
    from every query and padded queries return a zero context (then the output projection's bias).
    Attention-probability dropout applies to full attention only; the block-sparse path has none, as
    the original's.

    Args:
        num_heads, head_dim, dropout, initializer_range, use_bias: as `MultiHeadSelfAttention`.
        block_size: int, tokens per block.
        random_blocks: int, random key blocks per query block (r).
        seed: int, the seed of this layer's random plan (an encoder gives each layer its own).
        random_plans: optional {number of blocks: [heads, blocks - 2, r] nested list}, plans pinned for
            those block counts (a JSON-able dict; keys may be strings); they need the length to be
            known when the graph is traced.

    Call args:
        x: [B, L, H].
        attention_mask: optional [B, 1, L] (or [B, L]) key padding mask, 1 for real tokens; a mask
            per query ([B, L, L]) has no place in the block-sparse pattern.

    Example:
        >>> from keras import ops
        >>> from keras_bertology.layers import BlockSparseSelfAttention
        >>> layer = BlockSparseSelfAttention(num_heads=2, block_size=4, random_blocks=1)
        >>> tuple(layer(ops.ones((1, 40, 8))).shape)
        (1, 40, 8)
    """

    def __init__(self, num_heads, block_size=64, random_blocks=3, seed=0, random_plans=None, **kwargs):
        if kwargs.get("causal"):
            raise ValueError("BlockSparseSelfAttention is bidirectional: causal=True is not supported")
        super().__init__(num_heads, **kwargs)
        if block_size < 1 or random_blocks < 0:
            raise ConfigError(f"block_size must be >= 1 and random_blocks >= 0; got {block_size}, {random_blocks}")
        self.block_size = int(block_size)
        self.random_blocks = int(random_blocks)
        self.seed = int(seed)
        self.random_plans = {int(blocks): plan for blocks, plan in (random_plans or {}).items()}

    @staticmethod
    def options_for_layer(options, index):
        """The options of the encoder's layer `index`: each layer draws its own plan (seed + index), or
        takes its entry of `layer_plans` (a list of `random_plans`, one per layer) as its pinned plans."""
        options = dict(options, seed=options.get("seed", 0) + index)
        layer_plans = options.pop("layer_plans", None)
        if layer_plans is not None:
            options["random_plans"] = layer_plans[index]
        return options

    def call(self, x, attention_mask=None, training=None, **streams):
        key_mask = self._one_sequence(x, attention_mask, streams)
        limit = dense_length_limit(self.block_size, self.random_blocks)
        length = x.shape[1]
        if length is not None:
            if length <= limit:
                return super().call(x, attention_mask, training=training)
            return self._block_sparse(x, key_mask)
        full = super().call  # the cond's branches are closures, where super() has no arguments
        return ops.cond(ops.shape(x)[1] <= limit, lambda: full(x, attention_mask, training=training),
                        lambda: self._block_sparse(x, key_mask))

    def _plan(self, num_blocks):
        pinned = self.random_plans.get(num_blocks) if isinstance(num_blocks, int) else None
        if pinned is not None:
            plan = ops.convert_to_tensor(pinned, "int32")
            expected = (self.num_heads, num_blocks - 2, self.random_blocks)
            if tuple(plan.shape) != expected:
                raise ValueError(f"the pinned random plan for {num_blocks} blocks has shape {tuple(plan.shape)}; "
                                 f"expected {expected}")
            return plan
        if self.random_plans and not isinstance(num_blocks, int):
            raise ValueError("pinned random plans need a sequence length known when the graph is traced")
        return random_plan(self.seed, self.num_heads, num_blocks, self.random_blocks)

    def _blocks(self, heads, num_blocks):
        """[B, L, N, D] -> [B, N, blocks, block, D]."""
        heads = ops.transpose(heads, (0, 2, 1, 3))
        return ops.reshape(heads, (ops.shape(heads)[0], self.num_heads, num_blocks, self.block_size,
                                   self._head_dim))

    def _block_sparse(self, x, key_mask):
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        size, heads, width = self.block_size, self.num_heads, self._head_dim
        padding = (-length) % size
        padded = length + padding
        num_blocks = padded // size
        if isinstance(padding, int) and padding == 0:
            states = x
        else:
            states = ops.pad(x, [[0, 0], [0, padding], [0, 0]])
            key_mask = ops.pad(key_mask, [[0, 0], [0, padding]])
        scale = ops.cast(self._scale, x.dtype)
        query = self._blocks(self._split_heads(self.query_dense(states)) * scale, num_blocks)
        key, value = (self._blocks(part, num_blocks) for part in self.key_value(states))
        mask_blocks = ops.reshape(key_mask, (batch, num_blocks, size))

        # The global query blocks (first and last) see every key.
        global_queries = ops.concatenate([query[:, :, 0], query[:, :, -1]], axis=2)  # [B, N, 2 block, D]
        all_keys = ops.reshape(key, (batch, heads, padded, width))
        all_values = ops.reshape(value, (batch, heads, padded, width))
        scores = ops.einsum("bnqd,bnkd->bnqk", global_queries, all_keys)
        probs = self._softmax(scores, key_mask[:, None, None, :])
        global_context = ops.einsum("bnqk,bnkd->bnqd", probs, all_values)
        global_context = ops.reshape(global_context, (batch, heads, GLOBAL_BLOCKS, size, width))

        # Every other query block sees its window, the global blocks and its random blocks.
        index = self._key_blocks(num_blocks)  # [N, blocks - 2, S]
        slots = ops.shape(index)[-1]
        flat_index = ops.reshape(index + ops.reshape(ops.arange(heads, dtype="int32") * num_blocks, (-1, 1, 1)),
                                 (-1,))
        gathered = (batch, heads, num_blocks - 2, slots * size, width)
        keys = ops.reshape(ops.take(ops.reshape(key, (batch, heads * num_blocks, size, width)), flat_index, axis=1),
                           gathered)
        values = ops.reshape(ops.take(ops.reshape(value, (batch, heads * num_blocks, size, width)), flat_index,
                                      axis=1), gathered)
        visible = ops.reshape(ops.take(mask_blocks, ops.reshape(index, (-1,)), axis=1),
                              (batch, heads, num_blocks - 2, 1, slots * size))
        visible = visible * ops.repeat(self._distinct_slots(num_blocks, slots), size, axis=-1)
        scores = ops.einsum("bnmqd,bnmkd->bnmqk", query[:, :, 1:-1], keys)
        probs = self._softmax(scores, visible)
        middle_context = ops.einsum("bnmqk,bnmkd->bnmqd", probs, values)

        context = ops.concatenate([global_context[:, :, :1], middle_context, global_context[:, :, 1:]], axis=2)
        context = ops.reshape(context, (batch, heads, padded, width))
        context = context * ops.cast(key_mask, context.dtype)[:, None, :, None]  # padded queries: zero context
        context = ops.reshape(ops.transpose(context, (0, 2, 1, 3)), (batch, padded, heads * width))
        return self.output_dense(context[:, :length])

    def _key_blocks(self, num_blocks):
        """[N, blocks - 2, 5 + r]: per middle query block i, the key blocks i - 1, i, i + 1, 0, last, and
        the random plan's."""
        middle = ops.arange(1, num_blocks - 1, dtype="int32")
        fixed = ops.stack([middle - 1, middle, middle + 1, ops.zeros_like(middle),
                           ops.full(ops.shape(middle), num_blocks - 1, "int32")], axis=-1)
        fixed = ops.broadcast_to(fixed[None], (self.num_heads, num_blocks - 2, WINDOW_BLOCKS + GLOBAL_BLOCKS))
        return ops.concatenate([fixed, self._plan(num_blocks)], axis=-1)

    @staticmethod
    def _distinct_slots(num_blocks, slots):
        """[blocks - 2, 1, S] float32: 0 where a global slot repeats a window block (block 1's window holds
        block 0, the second-to-last block's holds the last), so no key counts twice."""
        middle = ops.arange(1, num_blocks - 1, dtype="int32")[:, None, None]
        slot = ops.arange(slots, dtype="int32")[None, None, :]
        repeats = ops.logical_or(ops.logical_and(middle == 1, slot == WINDOW_BLOCKS),
                                 ops.logical_and(middle == num_blocks - 2, slot == WINDOW_BLOCKS + 1))
        return ops.cast(ops.logical_not(repeats), "float32")

    def _softmax(self, scores, visible):
        scores = ops.where(visible > 0, ops.cast(scores, "float32"), MASKED_SCORE)
        return ops.cast(ops.softmax(scores, axis=-1), self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(block_size=self.block_size, random_blocks=self.random_blocks, seed=self.seed,
                      random_plans={str(blocks): plan for blocks, plan in self.random_plans.items()})
        return config

