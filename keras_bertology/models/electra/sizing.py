"""ELECTRA's generator width, without Keras: benchmarks size their peers' generators with it in processes
that never build our model."""


def generator_width(discriminator_hidden, fraction):
    """(hidden, heads) of ELECTRA's generator: round(fraction x the discriminator's hidden size), one head per
    64 units (fewer when they would not divide it)."""
    hidden = max(1, round(discriminator_hidden * fraction))
    heads = max(1, hidden // 64)
    while hidden % heads:
        heads -= 1
    return hidden, heads
