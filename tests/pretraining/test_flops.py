"""Training FLOPs counted from the traced step (`pretraining.flops`), against counts written out by hand."""

import keras
import numpy as np
import tensorflow as tf

from keras_bertology.models import BertBackbone
from keras_bertology.models.bert.pretrainer import BertPretrainer
from keras_bertology.models.registry import FAMILIES
from keras_bertology.pretraining.flops import graph_flops, pretraining_flops, step_flops

B, L, H, F, N, V, S = 4, 16, 32, 64, 2, 97, 3  # batch, length, hidden, FFN, layers, vocabulary, MLM slots


def _bert_batch(pretrainer, rng):
    features = {"token_ids": rng.integers(5, V, (B, L)), "segment_ids": np.zeros((B, L)),
                "padding_mask": np.ones((B, L)), "mask_positions": np.tile(np.arange(1, S + 1), (B, 1)),
                "mask_ids": rng.integers(5, V, (B, S)), "mask_weights": np.ones((B, S)),
                "nsp_labels": rng.integers(0, 2, (B,))}
    return pretrainer.split_features({k: np.asarray(v) for k, v in features.items()})


def test_einsum_and_matmul_count_two_flops_per_multiply_add():
    @tf.function
    def products(a, b, c):
        return tf.einsum("bqnd,bknd->bnqk", a, b), tf.matmul(c, c, transpose_a=True), tf.einsum("ij->ji", c)

    traced = products.get_concrete_function(tf.zeros((2, 3, 4, 5)), tf.zeros((2, 7, 4, 5)), tf.zeros((6, 8)))
    assert graph_flops(traced.graph) == 2 * (2 * 3 * 4 * 5 * 7) + 2 * (8 * 6 * 8)


def test_a_dense_layer_step_is_its_forward_and_its_kernel_gradient():
    """No gradient for the inputs (they are data): 2 x the forward, not 3 x."""
    model = keras.Sequential([keras.Input((H,)), keras.layers.Dense(F)])
    model.compile(loss="mse")

    class Wrapped:  # step_flops needs what a pretrainer has: a call, compute_loss, trainable_variables
        trainable_variables = model.trainable_variables
        __call__ = staticmethod(model.__call__)
        compute_loss = staticmethod(model.compute_loss)

    batch = (np.ones((B, H), "float32"), np.ones((B, F), "float32"), np.ones((B,), "float32"))
    assert step_flops(Wrapped(), batch) == 2 * (2 * B * H * F)


def test_a_bert_step_is_three_times_its_forward_written_out():
    """Every matmul of BERT has a trained operand upstream of both inputs (the embeddings are trained),
    so the backward pass costs two forwards: input and weight gradients."""
    keras.utils.set_random_seed(0)
    backbone = BertBackbone(vocab_size=V, num_layers=N, num_heads=2, hidden_size=H, intermediate_size=F,
                            max_positions=L)
    pretrainer = BertPretrainer(backbone)
    pretrainer.compile()
    tokens = B * L
    layer = 2 * tokens * H * 3 * H + 2 * (2 * B * L * L * H) + 2 * tokens * H * H + 2 * (2 * tokens * H * F)
    heads = 2 * B * H * H + 2 * B * H * 2 + 2 * B * S * H * H + 2 * B * S * H * V  # pooler, NSP, MLM
    forward = N * layer + heads
    assert step_flops(pretrainer, _bert_batch(pretrainer, np.random.default_rng(0))) == 3 * forward
    total, stages = pretraining_flops(pretrainer, _bert_batch(pretrainer, np.random.default_rng(1)), 10)
    assert (total, stages) == (30 * forward, [(10, 3 * forward)])


def test_two_stage_electra_counts_each_stage_by_what_trains_in_it():
    """Stage 1 trains the generator, stage 2 the discriminator, and both run the whole forward pass:
    stage 1 + stage 2 = joint training + one forward."""
    family = FAMILIES["electra"]
    keras.utils.set_random_seed(0)
    backbone = family.backbone_cls(**family.backbone_config(
        "electra-tiny", vocab_size=V, num_layers=1, hidden_size=H, num_heads=2, intermediate_size=F,
        embedding_size=H))
    pretrainer = family.build_pretrainer(backbone, {"two_stage_steps": 3}, "electra-tiny")
    pretrainer.compile()
    rng = np.random.default_rng(0)
    features = {"token_ids": rng.integers(5, V, (B, L)), "segment_ids": np.zeros((B, L)),
                "padding_mask": np.ones((B, L)), "mask_positions": np.tile(np.arange(1, S + 1), (B, 1)),
                "mask_ids": rng.integers(5, V, (B, S)), "mask_weights": np.ones((B, S))}
    batch = pretrainer.split_features({k: np.asarray(v) for k, v in features.items()})
    total, stages = pretraining_flops(pretrainer, batch, 10)
    (first_steps, first), (second_steps, second) = stages
    assert (first_steps, second_steps) == (3, 7) and total == 3 * first + 7 * second

    pretrainer.set_stage(None)
    joint = step_flops(pretrainer, batch)
    forward = graph_flops(tf.function(lambda x: pretrainer(x, training=True)).get_concrete_function(batch[0]).graph)
    assert first + second == joint + forward
    assert first != second and max(first, second) < joint


def _attention_forward_flops(layer, batch, length, hidden):
    @tf.function(autograph=False)
    def forward(x):
        return layer(x)

    return graph_flops(forward.get_concrete_function(tf.TensorSpec((batch, length, hidden), "float32")).graph)


def test_each_attention_kind_is_counted_as_its_pattern_written_out():
    """The long-sequence attentions' own cost (what the study charges BigBird and Linformer): full
    attention's scores and context grow as L^2, BigBird's as L x block x (5 + r) plus the two global
    blocks' 2 x block x L, Linformer's as L x k (E and F applied, then scores and context)."""
    from keras_bertology.layers import BlockSparseSelfAttention, LowRankSelfAttention, MultiHeadSelfAttention

    batch, hidden, heads, block, random, k = 2, 16, 2, 8, 1, 8
    projections = 4 * 2 * hidden * hidden  # query, key, value and output, per token
    for length in (128, 192):
        full = MultiHeadSelfAttention(num_heads=heads)
        assert _attention_forward_flops(full, batch, length, hidden) == batch * (
            length * projections + 2 * 2 * length * length * hidden)
        sparse = BlockSparseSelfAttention(num_heads=heads, block_size=block, random_blocks=random)
        middle = 2 * 2 * (length - 2 * block) * (3 + 2 + random) * block * hidden
        global_blocks = 2 * 2 * (2 * block) * length * hidden
        assert _attention_forward_flops(sparse, batch, length, hidden) == batch * (
            length * projections + global_blocks + middle)
        low_rank = LowRankSelfAttention(num_heads=heads, projected_length=k, max_length=256)
        assert _attention_forward_flops(low_rank, batch, length, hidden) == batch * (
            length * projections + 2 * 2 * k * length * hidden + 2 * 2 * length * k * hidden)


def _layer_step_flops(layer, inputs):
    """FLOPs of the step that trains `layer` alone on `inputs` (data: no gradient for them)."""
    layer(inputs)

    @tf.function(autograph=False)
    def step(inputs):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(inputs))
        return loss, tape.gradient(loss, layer.trainable_variables)  # a training step reports its loss

    return graph_flops(step.get_concrete_function(inputs).graph)


def test_a_recurrent_layer_counts_its_loop_body_once_per_step():
    """A projected LSTM over T steps: x @ W_x once for all steps, then per step m @ W_m and h @ W_p; the step
    adds W_x's gradient (the inputs are data) and, in the backward loop, two products per forward product."""
    from keras_bertology.layers import ProjectedLSTM

    batch, steps, inputs, units, projection = 2, 7, 5, 8, 4
    forward_loop = 2 * batch * (projection * 4 * units + units * projection)
    input_products = 2 * batch * steps * inputs * 4 * units
    counted = _layer_step_flops(ProjectedLSTM(units, projection), tf.zeros((batch, steps, inputs)))
    assert counted == 2 * input_products + 3 * steps * forward_loop


def test_a_convolution_and_its_two_gradients_count_each_window():
    """A character CNN without highways: each width's convolution forward, then its filter gradient and its
    input gradient (the character table trains), then the projection and its two gradients."""
    from keras_bertology.layers import CharacterCNN

    batch, tokens, chars, width_in, project = 2, 7, 10, 4, 6
    filters = ((1, 3), (2, 5))
    cnn = CharacterCNN(num_characters=20, char_embedding_dim=width_in, filters=filters, num_highway=0,
                       output_dim=project)
    convolutions = sum(2 * batch * tokens * (chars - width + 1) * count * width * width_in for width, count in filters)
    projection = 2 * batch * tokens * sum(count for _, count in filters) * project
    assert _layer_step_flops(cnn, tf.ones((batch, tokens, chars), tf.int32)) == 3 * convolutions + 3 * projection


def test_a_two_dimensional_window_counts_its_height_and_width():
    """Conv2D's filter is [h, w, in, out]: each output value costs h x w x in multiply-adds, forward and both
    gradients (the input's and the filter's)."""
    images, kernel = tf.zeros((2, 9, 8, 3)), tf.Variable(tf.zeros((3, 2, 3, 5)))

    @tf.function(autograph=False)
    def step(images):
        with tf.GradientTape() as tape:
            tape.watch(images)
            loss = tf.reduce_sum(tf.nn.conv2d(images, kernel, strides=1, padding="VALID"))
        return loss, tape.gradient(loss, [images, kernel])

    outputs = 2 * (9 - 3 + 1) * (8 - 2 + 1) * 5
    assert graph_flops(step.get_concrete_function(images).graph) == 3 * 2 * outputs * 3 * 2 * 3


def test_a_product_no_output_needs_is_not_counted():
    """TensorFlow prunes what no output needs, so it costs nothing (Keras' recurrence on TensorFlow runs its
    step once outside the loop, only for the shape of its output)."""
    rows = tf.ones((2, 3))

    @tf.function(autograph=False)
    def step(rows):
        tf.matmul(rows, rows, transpose_b=True)
        return tf.matmul(rows, tf.ones((3, 4)))

    assert graph_flops(step.get_concrete_function(rows).graph) == 2 * 3 * 2 * 4
