"""End-of-run output kinds: what a pretrained model serves and shows of what it learned (fill-ins,
continuations, span fills, words in context, stream perplexity), one module per kind."""

from keras_bertology.outputs.kind import Endpoints, FinishedRun, OutputKind, Serving
from keras_bertology.outputs.registry import OUTPUT_KINDS, every_run_entries, kinds_of, register_output_kind

__all__ = ["OUTPUT_KINDS", "Endpoints", "FinishedRun", "OutputKind", "Serving", "every_run_entries", "kinds_of",
           "register_output_kind"]
