"""T5's data stage for `ModelFamily.build_masker`: span corruption into `seq_len` inputs."""

from keras_bertology.data.span_corruption import SpanCorruptionConfig, SpanCorruptionMasker
from keras_bertology.errors import ConfigError


def span_corruption_stage(context, noise_density=0.15, mean_noise_span_length=3.0):
    """Rows of the stream (`instances.stream_chunks`) -> encoder inputs of the context's `seq_len` and the
    decoder's inputs and targets; the sentinels are the tokenizer's last ids, EOS its `sep` token (T5's </s>)."""
    if context.whole_word:
        raise ConfigError("--whole-word does not apply to T5's span corruption, which draws spans of tokens")
    if not context.seq_len:
        raise ConfigError("--model t5's masking stage needs the sequence length")
    tokenizer = context.tokenizer
    return SpanCorruptionMasker(tokenizer.vocab_size, tokenizer.sep_id, context.seq_len, pad_id=tokenizer.pad_id,
                                config=SpanCorruptionConfig(noise_density, mean_noise_span_length))
