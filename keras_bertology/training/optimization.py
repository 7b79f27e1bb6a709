"""BERT's optimizer: AdamW with linear warm-up then linear decay (or ModernBERT's warmup-stable-decay), no
decay on norms/biases; optionally ELECTRA's layer-wise learning-rate decay."""


import keras


@keras.saving.register_keras_serializable(package="keras_bertology")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Learning rate rising linearly for `warmup_steps`, then falling linearly to 0 at `total_steps`."""

    def __init__(self, peak_learning_rate, warmup_steps, total_steps):
        self.peak_learning_rate = peak_learning_rate
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        warmup = keras.ops.cast(max(self.warmup_steps, 1), "float32")
        decay = keras.ops.cast(max(self.total_steps - self.warmup_steps, 1), "float32")
        rising = step / warmup
        falling = keras.ops.maximum(0.0, (self.total_steps - step) / decay)
        return self.peak_learning_rate * keras.ops.where(step < warmup, rising, falling)

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
        }


@keras.saving.register_keras_serializable(package="keras_bertology")
class WarmupStableDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Warmup-stable-decay (trapezoidal): the rate rises linearly for `warmup_steps`, stays at its peak,
    and over the last `decay_steps` falls as 1 - sqrt(progress) to 0 at `total_steps` (ModernBERT's).
    A run at the peak can be cut and decayed at any point, and most steps train at the full rate."""

    def __init__(self, peak_learning_rate, warmup_steps, total_steps, decay_steps):
        self.peak_learning_rate = peak_learning_rate
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.decay_steps = decay_steps

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        warmup = keras.ops.cast(max(self.warmup_steps, 1), "float32")
        decay = keras.ops.cast(max(self.decay_steps, 1), "float32")
        progress = keras.ops.clip((step - (self.total_steps - self.decay_steps)) / decay, 0.0, 1.0)
        stable_or_decaying = 1.0 - keras.ops.sqrt(progress)
        return self.peak_learning_rate * keras.ops.where(step < warmup, step / warmup, stable_or_decaying)

    def get_config(self):
        return {"peak_learning_rate": self.peak_learning_rate, "warmup_steps": self.warmup_steps,
                "total_steps": self.total_steps, "decay_steps": self.decay_steps}


def learning_rate_schedule(kind, peak_learning_rate, total_steps, warmup_fraction=0.1, decay_share=0.1):
    """The `kind` schedule ("linear": BERT's warmup then linear decay; "wsd": `WarmupStableDecay` decaying
    over the last `decay_share` of the steps)."""
    warmup = int(total_steps * warmup_fraction)
    if kind == "wsd":
        return WarmupStableDecay(peak_learning_rate, warmup, total_steps, max(int(total_steps * decay_share), 1))
    return WarmupLinearDecay(peak_learning_rate, warmup, total_steps)


@keras.saving.register_keras_serializable(package="keras_bertology")
class LayerwiseAdamW(keras.optimizers.AdamW):
    """AdamW whose learning rate is multiplied per variable, e.g. by `layerwise_decay`.

    `lr_multipliers` maps variable paths to factors (missing paths: 1). The
    factor scales the Adam step; the decoupled weight decay keeps the base rate.
    Variables whose names hold one of `no_decay_names` get no weight decay; it
    is part of the config, so a run resumed from a checkpoint keeps it.
    """

    def __init__(self, lr_multipliers=None, no_decay_names=(), **kwargs):
        super().__init__(**kwargs)
        self.lr_multipliers = dict(lr_multipliers or {})
        self.no_decay_names = list(no_decay_names)
        if self.no_decay_names:
            self.exclude_from_weight_decay(var_names=self.no_decay_names)

    def build(self, variables):
        super().build(variables)
        self._lr_scales = [float(self.lr_multipliers.get(variable.path, 1.0)) for variable in variables]

    def _clip_gradients(self, grads):
        if _across_replicas():  # clipped once summed over the replicas, in _all_reduce_sum_gradients
            return grads
        return super()._clip_gradients(_dense(grads))

    def _all_reduce_sum_gradients(self, grads_and_vars):
        """Sum over the replicas, then clip by the global norm of the sum: clipping each replica's share
        by its own norm (what the base class does first) would not clip what the update applies."""
        reduced = super()._all_reduce_sum_gradients(grads_and_vars)
        if not _across_replicas():
            return reduced
        grads = super()._clip_gradients(_dense([grad for grad, _ in reduced]))
        return [(grad, variable) for grad, (_, variable) in zip(grads, reduced)]

    # A traced train step holds every op an update makes, variable by variable: Keras's Adam and AdamW
    # recompute the step's scalars (bias corrections, the scheduled rate) for each variable and go
    # through one tf.distribute update call per variable; on one device, here, the scalars are made once
    # per step and the variables are updated directly. Same values, to the bit; BERT-Tiny's step traces
    # about 40% fewer optimizer ops.
    _step_scalars = None  # {(dtype, rate factor): Adam's step size}, while `apply` runs

    def apply(self, grads, trainable_variables=None):
        # Under a strategy Keras's own per-variable path runs, as it always did (each replica's update
        # makes its own scalars on its own device).
        self._step_scalars = None if _across_replicas() else {}
        try:
            return super().apply(grads, trainable_variables)
        finally:
            self._step_scalars = None

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        if _across_replicas():
            return super()._backend_update_step(grads, trainable_variables, learning_rate)
        for grad, variable in zip(grads, trainable_variables):
            self.update_step(grad, variable, learning_rate)

    def _apply_weight_decay(self, variables):
        if self.weight_decay is None or _across_replicas():
            return super()._apply_weight_decay(variables)
        rates = {}
        for variable in variables:
            if self._use_weight_decay(variable):
                if variable.dtype not in rates:
                    rates[variable.dtype] = (keras.ops.cast(self.weight_decay, variable.dtype),
                                             keras.ops.cast(self.learning_rate, variable.dtype))
                decay, rate = rates[variable.dtype]
                variable.assign(variable - variable * decay * rate)

    def update_step(self, gradient, variable, learning_rate):
        """Adam's update (as Keras computes it) at this variable's share of the rate."""
        index = self._get_variable_index(variable)
        scale, dtype = self._lr_scales[index], variable.dtype
        if self._step_scalars is None or self.amsgrad:  # outside `apply`, or across replicas
            if scale != 1.0:
                learning_rate = keras.ops.cast(learning_rate, dtype) * scale
            return super().update_step(gradient, variable, learning_rate)
        if (dtype, scale) not in self._step_scalars:
            rate = keras.ops.cast(learning_rate, dtype)
            if scale != 1.0:
                rate = rate * scale
            step = keras.ops.cast(self.iterations + 1, dtype)
            beta_1_power = keras.ops.power(keras.ops.cast(self.beta_1, dtype), step)
            beta_2_power = keras.ops.power(keras.ops.cast(self.beta_2, dtype), step)
            self._step_scalars[dtype, scale] = rate * keras.ops.sqrt(1 - beta_2_power) / (1 - beta_1_power)
        step_size = self._step_scalars[dtype, scale]
        gradient = keras.ops.cast(gradient, dtype)
        m, v = self._momentums[index], self._velocities[index]
        self.assign_add(m, keras.ops.multiply(keras.ops.subtract(gradient, m), 1 - self.beta_1))
        self.assign_add(v, keras.ops.multiply(keras.ops.subtract(keras.ops.square(gradient), v), 1 - self.beta_2))
        self.assign_sub(variable, keras.ops.divide(keras.ops.multiply(m, step_size),
                                                   keras.ops.add(keras.ops.sqrt(v), self.epsilon)))

    # Trains a model whose trainable weights are a part of those it was built for (see stateless_apply).
    updates_a_part = True

    def stateless_apply(self, optimizer_variables, grads, trainable_variables):
        """JAX's update. Keras's JAX trainer hands over the weights that train now; where they are a part
        of those this optimizer was built for (the stages of the two-stage ELECTRA, which keep both
        stages' slots, as on TensorFlow), only that part is updated and the rest keep weights and slots."""
        if len(trainable_variables) == len(self._trainable_variables):
            return super().stateless_apply(optimizer_variables, grads, trainable_variables)
        training = [variable for variable in self._trainable_variables if variable.trainable]
        if len(training) != len(trainable_variables):  # not a part: the base class's own error
            return super().stateless_apply(optimizer_variables, grads, trainable_variables)
        mapping = list(zip(training, trainable_variables)) + list(zip(self.variables, optimizer_variables))
        with keras.StatelessScope(state_mapping=mapping) as scope:
            self.apply(grads, training)
        return ([scope.get_current_value(variable) for variable in training],
                [scope.get_current_value(variable) for variable in self.variables])

    def get_config(self):
        return dict(super().get_config(), lr_multipliers=self.lr_multipliers, no_decay_names=self.no_decay_names)


def _across_replicas():
    """In a replica context of a strategy with several replicas (MirroredStrategy, multi-worker, TPU)."""
    if keras.config.backend() != "tensorflow":  # tf.distribute's replicas exist there only
        return False
    import tensorflow as tf  # here only: the optimizer also trains on JAX where TensorFlow is not installed

    context = tf.distribute.get_replica_context()
    return context is not None and context.num_replicas_in_sync > 1


def _dense(grads):
    """Embedding-lookup gradients as dense tensors. Their sparse form repeats a row for each lookup (and,
    all-reduced, for each replica); the update and the clipping norm need each row's sum."""
    if keras.config.backend() != "tensorflow":
        return grads
    import tensorflow as tf

    return [tf.convert_to_tensor(grad) if isinstance(grad, tf.IndexedSlices) else grad for grad in grads]


def layerwise_decay(backbone, decay):
    """ELECTRA's layer-wise decay for `backbone`'s variables: {path: factor}.

    With N layers: embeddings (depth 0) decay ** (N + 2), block i (depth
    i + 1) decay ** (N + 1 - i), anything else in the backbone (pooler, final
    norm, a shared stack: depth N + 1) decay; heads outside the backbone keep
    the full rate. Depths come from `backbone.variable_depths()`.
    """
    top = backbone.num_layers + 2
    return {path: decay ** (top - depth) for path, depth in backbone.variable_depths().items()}


def bert_adamw(peak_learning_rate, total_steps, warmup_fraction=0.1, weight_decay=0.01, lr_multipliers=None,
               schedule="linear", decay_share=0.1):
    """AdamW as in BERT pretraining: betas (0.9, 0.999), eps 1e-6, clip-norm 1.0, no weight decay on norms and
    biases; with `lr_multipliers` (see `layerwise_decay`), per-variable learning rates; `schedule` and
    `decay_share` as `learning_rate_schedule` takes them."""
    return LayerwiseAdamW(
        lr_multipliers=lr_multipliers,
        no_decay_names=("bias", "gamma", "beta"),
        learning_rate=learning_rate_schedule(schedule, peak_learning_rate, total_steps, warmup_fraction,
                                             decay_share),
        weight_decay=weight_decay,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-6,
        global_clipnorm=1.0,
    )
