"""What the training, conversion and export code needs to know about a model family."""

from dataclasses import dataclass

from keras_bertology.lazy_imports import import_object


@dataclass(frozen=True)
class ModelFamily:
    """A model family: its presets, its classes and the data recipe it pretrains with.

    Generic code (training, export, CLI) asks the family for each piece and
    never compares family names, so a new family is a new record. Classes and
    recipe functions are named by "module:name" import paths, loaded on first
    use, so that listing families and presets does not start TensorFlow.

    Attributes:
        name: CLI name (`--model`).
        presets: preset name -> {"config", "params", "description"}.
        backbone_path: the backbone class built from a preset's config.
        pretrainer_path: the `models.pretrainer.Pretrainer` wrapping a backbone
            with the family's objectives.
        tokenizer_path: `train(sentences, vocab_size) -> Tokenizer`.
        instances_path: `build(documents, seq_len, specials, rng, copies, packing) ->
            dict of arrays`, documents being lists of token-id arrays.
        masking: default masking, "static" (written once) or "dynamic".
        masker_path: `build(tokenizer, max_predictions, whole_word) -> masker`,
            the masking stage mapped over batches of instances.
        packings: the `--packing` choices the instance builder takes, default
            first; empty when it takes none.
        hf_model_types: the Hugging Face `model_type`s this family imports.
        converter_path: `convert(family, config, weights) -> (backbone,
            pretrainer or None, head names, tensor names used)`.
    """

    name: str
    presets: dict
    backbone_path: str
    pretrainer_path: str
    tokenizer_path: str
    instances_path: str
    masking: str
    packings: tuple = ()
    hf_model_types: tuple = ()
    converter_path: str | None = None
    masker_path: str = "keras_bertology.data.masking:token_masker"

    @property
    def backbone_cls(self):
        return import_object(self.backbone_path)

    @property
    def pretrainer_cls(self):
        return import_object(self.pretrainer_path)

    def train_tokenizer(self, sentences, vocab_size):
        """The family's tokenizer, trained on `sentences`."""
        return import_object(self.tokenizer_path)(sentences, vocab_size)

    def build_instances(self, documents, seq_len, specials, rng, copies=1, packing=None):
        """Pretraining instances of tokenized `documents`, built `copies` times."""
        packing = packing or (self.packings[0] if self.packings else None)
        return import_object(self.instances_path)(documents, seq_len, specials, rng, copies, packing)

    def build_masker(self, tokenizer, max_predictions, whole_word=False):
        """The family's masking stage for batches of its instances."""
        return import_object(self.masker_path)(tokenizer, max_predictions, whole_word)

    def convert_hf(self, config, weights):
        """This family's model from a Hugging Face config and tensors (see `converter_path`)."""
        return import_object(self.converter_path)(self, config, weights)

    def instance_kind(self, packing=None):
        """A name for metrics.json: the builder, and the packing when it takes one."""
        builder = self.instances_path.rpartition(":")[2]
        packing = packing or (self.packings[0] if self.packings else None)
        return f"{builder} ({packing})" if packing else builder

    def backbone_config(self, preset, **overrides):
        """The backbone kwargs of `preset` with `overrides` applied."""
        return dict(self.presets[preset]["config"], **overrides)


def sized_preset(base_config, num_layers, hidden_size, params, description):
    """A preset in the BERT sizing rule: 64-wide heads and a 4x feed-forward."""
    return {
        "config": dict(base_config, num_layers=num_layers, hidden_size=hidden_size,
                       num_heads=hidden_size // 64, intermediate_size=4 * hidden_size),
        "params": params,
        "description": description,
    }
