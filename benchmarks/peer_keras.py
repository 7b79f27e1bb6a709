"""The Keras systems of the peer suite: keras-bertology's pretrainers and keras-hub's tasks.

Both train with `fit` on the shared batches held in memory, with AdamW(1e-4)
and each system's own default `jit_compile`: ours compiles its step with XLA
on one device (`--xla auto`), keras-hub takes Keras' choice (on TensorFlow with
only CPUs: no XLA; JAX: XLA always). The variants `ours_no_xla` and `ours_xla` measure ours
with XLA off and on.
"""

import keras

from benchmarks.peer_models import MODELS, our_config, synthetic_features, teacher_shape

OPTIMIZER = "AdamW(learning_rate=1e-4)"


def _batches(x, y, weights, batch_size):
    """The shared arrays as endless training batches: a prefetched tf.data pipeline on TensorFlow, a
    Python generator on other backends (the GPU machine has no TensorFlow)."""
    x, y, weights = keras.tree.map_structure(keras.ops.convert_to_numpy, (x, y, weights))
    if keras.config.backend() == "tensorflow":
        import tensorflow as tf

        data = tf.data.Dataset.from_tensor_slices((x, y, weights))
        return data.batch(batch_size, drop_remainder=True).repeat().prefetch(tf.data.AUTOTUNE)
    rows = len(keras.tree.flatten(x)[0])

    def cycle():
        while True:
            for start in range(0, rows - batch_size + 1, batch_size):
                yield keras.tree.map_structure(lambda a: a[start:start + batch_size], (x, y, weights))

    return cycle()


def build_ours(model, shape, precision, xla="auto"):
    """Our family's pretrainer at `shape`, compiled with its declared objectives as `bertology pretrain
    --xla` compiles it, and its batches."""
    from keras_bertology.engine.xla import resolve_jit_compile

    from keras_bertology.models.registry import FAMILIES

    family = FAMILIES[model.family]
    config = our_config(model, shape)
    backbone = family.backbone_cls(**config, dtype=precision)
    pretrainer = family.build_pretrainer(backbone, options=dict(model.options), preset=model.preset,
                                         batch_size=shape.batch_size, context=_teacher_context(model, shape, precision))
    jit_compile = resolve_jit_compile(xla, precision, family.training.xla_compiles)
    pretrainer.compile(optimizer=keras.optimizers.AdamW(1e-4), jit_compile=jit_compile)
    features = synthetic_features(model, shape, config["vocab_size"])
    x, y, weights = pretrainer.split_features(features)
    return pretrainer, _batches(x, y, weights, shape.batch_size)


def _teacher_context(model, shape, precision):
    """The `RunContext` of a row with a teacher: a new pretrainer of the teacher's row, twice as deep (its
    weights do not change the work of a step); None for the others."""
    from keras_bertology.models.family import RunContext
    from keras_bertology.models.registry import FAMILIES

    if not model.teacher:
        return None
    teacher_model = MODELS[model.teacher]
    family = FAMILIES[teacher_model.family]
    backbone = family.backbone_cls(**our_config(teacher_model, teacher_shape(shape)), dtype=precision)
    teacher = family.build_pretrainer(backbone, options=dict(teacher_model.options), preset=teacher_model.preset,
                                      batch_size=shape.batch_size)
    return RunContext(pretrainer_kwargs={"teacher": teacher})


def build_keras_hub(model, shape, precision):
    """keras-hub's pretraining task on a backbone of the same shape: masked LM (MLM only: keras-hub has no
    NSP/SOP), GPT-2's causal LM, or T5's seq2seq LM."""
    import keras_hub

    config = our_config(model, shape)
    if model.family == "t5":
        return _keras_hub_t5(model, shape, precision, config)
    common = dict(vocabulary_size=config["vocab_size"], num_layers=shape.num_layers, num_heads=shape.num_heads,
                  hidden_dim=shape.hidden_size, intermediate_dim=shape.intermediate_size,
                  max_sequence_length=config["max_positions"], dtype=precision)
    labels, weights = "mask_ids", "mask_weights"
    if model.family == "gpt":
        backbone = keras_hub.models.GPT2Backbone(**common)
        labels, weights = "next_token_ids", "next_token_weights"
    elif model.family == "albert":
        backbone = keras_hub.models.AlbertBackbone(embedding_dim=config["embedding_size"], num_groups=1,
                                                   num_inner_repetitions=1, num_segments=2, **common)
    elif model.family == "roberta":
        backbone = keras_hub.models.RobertaBackbone(**common)
    elif model.family == "deberta-v3":
        backbone = keras_hub.models.DebertaV3Backbone(bucket_size=config["position_buckets"], **common)
    else:
        backbone = keras_hub.models.BertBackbone(num_segments=2, **common)
    task = getattr(keras_hub.models, model.hub_task)(backbone, preprocessor=None)
    task.compile(
        optimizer=keras.optimizers.AdamW(1e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight"),
        weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    features = synthetic_features(model, shape, config["vocab_size"])
    x = {name: features[name] for name in task.input} if isinstance(task.input, dict) else features["token_ids"]
    return task, _batches(x, features[labels], features[weights], shape.batch_size)


def _keras_hub_t5(model, shape, precision, config):
    """keras-hub's `T5Seq2SeqLM` (v1.0: ReLU, tied embeddings) on the teacher-forced span batches."""
    import keras_hub

    backbone = keras_hub.models.T5Backbone(
        vocabulary_size=config["vocab_size"], num_layers=shape.num_layers, num_heads=shape.num_heads,
        hidden_dim=shape.hidden_size, intermediate_dim=shape.intermediate_size,
        key_value_dim=shape.hidden_size // shape.num_heads, activation="relu", use_gated_activation=False,
        tie_embedding_weights=True, dtype=precision)
    task = keras_hub.models.T5Seq2SeqLM(backbone, preprocessor=None)
    task.compile(
        optimizer=keras.optimizers.AdamW(1e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight"),
        weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    features = synthetic_features(model, shape, config["vocab_size"])
    x = {"encoder_token_ids": features["token_ids"], "encoder_padding_mask": features["padding_mask"],
         "decoder_token_ids": features["decoder_token_ids"], "decoder_padding_mask": features["decoder_padding_mask"]}
    return task, _batches(x, features["target_ids"], features["target_weights"], shape.batch_size)


def train_keras(model, dataset, clock, steps):
    """`fit` for the warm-up and timed steps, every step reported to `clock`."""
    from benchmarks.peer_timing import keras_callback

    # keras.Model.fit itself: keras-hub's Task.fit would want TensorFlow for a preprocessor it does not have.
    keras.Model.fit(model, dataset, epochs=1, steps_per_epoch=clock.warmup + steps, verbose=0,
                    callbacks=[keras_callback(clock)])
    details = {"num_params": int(model.count_params()), "jit_compile": bool(model.jit_compile)}
    if keras.config.backend() == "jax":
        import jax

        stats = jax.devices()[0].memory_stats() or {}
        if "peak_bytes_in_use" in stats:
            details["device_peak_mib"] = stats["peak_bytes_in_use"] / 2 ** 20
    return details
