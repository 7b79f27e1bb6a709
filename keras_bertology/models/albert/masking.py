"""ALBERT's masking stage: whole-word n-grams, n <= 3 with p(n) proportional to 1/n."""

from keras_bertology.data.span_masking import SpanMasker, ngram_probs


def ngram_masker(tokenizer, max_predictions, whole_word=True, max_ngram=3):
    """N-grams of whole words (always; `whole_word` is accepted for the common signature), 80/10/10 per token."""
    return SpanMasker.for_tokenizer(tokenizer, ngram_probs(max_ngram), max_predictions)
