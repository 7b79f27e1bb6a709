"""SpanBERT's masking stage: Geometric(0.2) spans of 1-10 whole words, one 80/10/10 draw per span."""

from keras_bertology.data.span_masking import SpanMasker, geometric_span_probs


def span_masker(context, span_p=0.2, max_span=10):
    """Spans are whole words always (whatever `context.whole_word` says); adds the boundary features the
    span boundary objective reads."""
    return SpanMasker.for_tokenizer(context.tokenizer, geometric_span_probs(span_p, max_span), context.max_predictions,
                                    per_span_decision=True, boundaries=True)
