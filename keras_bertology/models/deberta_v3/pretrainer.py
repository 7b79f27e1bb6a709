"""DeBERTa-v3 pretraining: a generator of half the discriminator's depth fills the masked positions; the
discriminator tells each token original or replaced, reading the generator's embeddings through
gradient-disentangled sharing."""

from keras_bertology.errors import ConfigError
from keras_bertology.models.generator_discriminator import DISENTANGLED, GeneratorDiscriminator


def generator_config(discriminator, num_layers=None):
    """The discriminator's configuration at `num_layers` (default half its depth): DeBERTa-v3's generator
    keeps the width, the vocabulary and the relative positions."""
    config = dict(discriminator.get_config())
    for key in ("name", "trainable", "dtype"):
        config.pop(key, None)
    config["num_layers"] = num_layers or max(1, discriminator.num_layers // 2)
    return config


def deberta_v3_pretrainer(backbone, objective="rtd", generator_layers=None, rtd_weight=10.0,
                          embedding_sharing=DISENTANGLED, temperature=1.0, loss_chunk_size=0):
    """A `GeneratorDiscriminator` on `backbone` (a `DebertaBackbone`, the discriminator) with DeBERTa-v3's
    settings: loss = MLM + 10 x RTD, samples at temperature 1, the head reading LayerNorm(state + the
    first token's state). `objective="mlm"`: a `DebertaPretrainer` on the last layer instead (the
    paper's masked-LM baseline of the same encoder; the generator's options then do not apply).

    Example:
        >>> from keras_bertology.models.deberta import DebertaBackbone
        >>> from keras_bertology.models.deberta_v3.pretrainer import deberta_v3_pretrainer
        >>> discriminator = DebertaBackbone(vocab_size=100, num_layers=2, num_heads=2, hidden_size=16,
        ...                                 intermediate_size=32, position_buckets=8, max_relative_positions=32)
        >>> model = deberta_v3_pretrainer(discriminator)
        >>> model.objectives, model.generator.num_layers, model.embedding_sharing
        (['mlm', 'rtd'], 1, 'disentangled')
    """
    if objective == "mlm":
        from keras_bertology.models.deberta.pretrainer import DebertaPretrainer

        return DebertaPretrainer(backbone, enhanced_mask_decoder=False, loss_chunk_size=loss_chunk_size)
    if objective != "rtd":
        raise ConfigError(f"--objective must be rtd or mlm (got {objective!r})")
    return GeneratorDiscriminator(backbone, generator_config(backbone, generator_layers), rtd_weight=rtd_weight,
                                  rtd_reads_context=True, temperature=temperature,
                                  embedding_sharing=embedding_sharing, loss_chunk_size=loss_chunk_size)
