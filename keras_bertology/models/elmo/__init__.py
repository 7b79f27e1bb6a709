"""ELMo: deep contextual word vectors from a bidirectional LSTM language model over characters.

The encoder (`ElmoBackbone`) and its presets; the family record that makes
it `--model elmo` (tokenizer, data stage, pretrainer, serving) joins them
when those parts land.
"""
