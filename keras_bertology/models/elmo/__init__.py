"""ELMo: deep contextual word vectors from a bidirectional LSTM language model over characters.

Pretraining reads the corpus as one stream of words, each sentence between
<S> and </S> (bilm-tf's), spells every word in characters for the encoder,
and trains a forward and a backward language model that predict every word
from the words on one side of it. The word vocabulary (`--vocab-size`) is
what the softmax predicts; the encoder reads any word from its characters.
"""

from keras_bertology.lazy_imports import lazy_attributes
from keras_bertology.models.elmo.presets import ELMO_PRESETS
from keras_bertology.models.family import DataRecipe, FamilyOption, InputLayout, ModelFamily, TrainingDefaults

FAMILY = ModelFamily(
    name="elmo",
    presets=ELMO_PRESETS,
    backbone_path="keras_bertology.models.elmo.backbone:ElmoBackbone",
    pretrainer_path="keras_bertology.models.elmo.pretrainer:ElmoPretrainer",
    tokenizer_path="keras_bertology.tokenizers.word:train_word_tokenizer",
    shared_tokenizer_path=None,  # its words, spelled in characters, are its recipe
    data=DataRecipe(
        instances_path="keras_bertology.models.elmo.instances:sentence_instances",
        masker_path="keras_bertology.models.elmo.instances:bidirectional_stage",
        masks_tokens=False,
        stage_draws=False,
        masks_units=False,
    ),
    inputs=InputLayout(
        # A text's vector is the mean of ELMo's word vectors (what TF-Hub's `default` serves): its first position,
        # <S>, holds what the backward LM read of the text and nothing of the forward's.
        summary_position="mean",
        segment_packer_path="keras_bertology.models.elmo.characters:pack_sentences",
        text_packer_path="keras_bertology.models.elmo.characters:pack_spelled_words",
        id_inputs_path="keras_bertology.models.elmo.characters:spell_ids",
    ),
    training=TrainingDefaults(
        # The task head and the scalar mix start from nothing: ELMo's tasks trained at 1e-3 (its paper's Adam).
        finetune_learning_rate=1e-3,
        xla_compiles=False,
        # The study's sizes: the width of every layer's output is the projection's, the FFN's counterpart is the
        # LSTM's cells; an LSTM has no heads.
        size_keys={"hidden_size": "projection_dim", "intermediate_size": "lstm_units", "num_heads": None},
    ),
    options=(
        FamilyOption("softmax_samples", int, 0, "words drawn per batch for a sampled softmax in training (the "
                     "original's 8192, for vocabularies of hundreds of thousands; 0: the full softmax)",
                     minimum=0, maximum=1_000_000, used_by=("pretrainer",)),
    ),
)

__getattr__ = lazy_attributes(__name__, {
    "ElmoBackbone": "keras_bertology.models.elmo.backbone",
    "ElmoPretrainer": "keras_bertology.models.elmo.pretrainer",
})

__all__ = ["FAMILY", "ELMO_PRESETS", "ElmoBackbone", "ElmoPretrainer"]
