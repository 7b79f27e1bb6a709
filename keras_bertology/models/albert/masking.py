"""ALBERT's masking stage: whole-word n-grams, n <= 3 with p(n) proportional to 1/n."""

from keras_bertology.data.span_masking import SpanMasker, ngram_probs


def ngram_masker(context, max_ngram=3):
    """N-grams of whole words (always, whatever `context.whole_word` says), 80/10/10 per token."""
    return SpanMasker.for_tokenizer(context.tokenizer, ngram_probs(max_ngram), context.max_predictions)
