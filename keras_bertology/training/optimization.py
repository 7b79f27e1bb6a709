"""BERT's optimizer: AdamW with linear warm-up then linear decay, no decay on norms/biases."""

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


def bert_adamw(peak_learning_rate, total_steps, warmup_fraction=0.1, weight_decay=0.01):
    """AdamW as in BERT pretraining: betas (0.9, 0.999), eps 1e-6, clip-norm 1.0."""
    optimizer = keras.optimizers.AdamW(
        learning_rate=WarmupLinearDecay(
            peak_learning_rate, int(total_steps * warmup_fraction), total_steps
        ),
        weight_decay=weight_decay,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-6,
        global_clipnorm=1.0,
    )
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    return optimizer
