"""ELECTRA pretraining: a small generator's MLM feeds replaced token detection by the discriminator."""

from keras_bertology.models.electra.sizing import generator_width
from keras_bertology.models.generator_discriminator import GeneratorDiscriminator


def generator_config(discriminator, fraction, num_layers=None):
    """ELECTRA's generator sizing (google-research/electra `get_generator_config`): hidden =
    round(fraction x the discriminator's), heads = max(1, hidden // 64) (fewer when they would not
    divide it), feed-forward = 4 x hidden; same depth, vocabulary and embeddings."""
    hidden, heads = generator_width(discriminator.hidden_size, fraction)
    config = dict(discriminator.get_config())
    for key in ("name", "trainable", "dtype", "use_pooler"):
        config.pop(key, None)
    config.update(hidden_size=hidden, num_heads=heads, intermediate_size=4 * hidden, use_pooler=False,
                  num_layers=num_layers or discriminator.num_layers,
                  embedding_size=discriminator.embedding_size or discriminator.hidden_size)
    return config


def electra_pretrainer(backbone, generator_fraction=0.25, generator_layers=None, rtd_weight=50.0,
                       temperature=1.0, two_stage_steps=0, loss_chunk_size=0):
    """A `GeneratorDiscriminator` on `backbone` (the discriminator) with ELECTRA's settings.

    With `two_stage_steps` the generator is as large as the discriminator and
    has its own embeddings, since the discriminator starts from it.

    Example:
        >>> from keras_bertology.models import BertBackbone
        >>> from keras_bertology.models.electra.pretrainer import electra_pretrainer
        >>> discriminator = BertBackbone(vocab_size=100, num_layers=1, num_heads=2, hidden_size=128,
        ...                              intermediate_size=256, embedding_size=32, use_pooler=False)
        >>> model = electra_pretrainer(discriminator, generator_fraction=0.5)
        >>> model.objectives, model.generator.hidden_size, model.generator.token_embedding is discriminator.token_embedding
        (['mlm', 'rtd'], 64, True)
    """
    if two_stage_steps:
        generator_fraction, generator_layers = 1.0, None
    config = generator_config(backbone, generator_fraction, generator_layers)
    if two_stage_steps:
        config.update(num_heads=backbone.num_heads, intermediate_size=backbone.intermediate_size)
    return GeneratorDiscriminator(backbone, config, rtd_weight=rtd_weight, temperature=temperature,
                                  embedding_sharing="none" if two_stage_steps else "full",
                                  two_stage_steps=two_stage_steps, loss_chunk_size=loss_chunk_size)
