"""The optimizers, schedules and strategies a run can name, importable without Keras (the options check them)."""

SCHEDULES = ("linear", "polynomial", "cosine", "wsd")  # see engine.optimization.learning_rate_schedule
OPTIMIZERS = ("adamw", "lamb", "lion", "adafactor")  # see engine.optimization.make_optimizer
STRATEGIES = ("auto", "default", "mirrored", "multiworker", "tpu")  # see engine.strategy.make_strategy

# The families' default rates are AdamW's. The others take that rate times this factor unless a rate is
# given: Lion's sign steps are as large as the rate in every coordinate (its paper: a rate 3-10x below
# AdamW's, with a weight decay as much larger); LAMB and Adafactor step by the rate relative to each
# variable's own scale, an order of magnitude below AdamW's steps on freshly initialised weights.
RATE_FACTORS = {"adamw": 1.0, "lamb": 10.0, "lion": 1 / 3, "adafactor": 10.0}
