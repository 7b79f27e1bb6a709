# Two entry points on a fresh machine: `make run` (pretrain + export) and `make test`.
# Each creates .venv/ and installs what it needs; re-runs only install what changed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# uv installs the pinned requirements (requirements/uv.txt) in seconds where pip takes minutes (5.3 min -> 0.6
# min for the test environment on 2 cores); it reads no pip configuration, so it is handed pip's --find-links
# (a machine's local wheels, e.g. its CPU build of torch).
UV := $(BIN)/uv
FIND_LINKS := $(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null)
PIP := $(UV) pip install --quiet --python $(BIN)/python $(addprefix --find-links ,$(sort $(PIP_FIND_LINKS) $(FIND_LINKS)))

# Bytecode for everything installed: uv writes none, and where PYTHONDONTWRITEBYTECODE is set (as on this project's
# CI machines) Python would otherwise compile TensorFlow, Keras and JAX from source in every process: 12 s an
# `import tensorflow` instead of 6 s, paid by each test worker and each process the tests start. A file that
# cannot compile on this Python (torch ships one for 3.12) is left to fail where it is imported, as it would.
BYTECODE := $(BIN)/python -c "import compileall, sysconfig; compileall.compile_dir(sysconfig.get_path('purelib'), quiet=2, workers=0)"

RUNTIME := $(VENV)/.runtime-installed
TESTING := $(VENV)/.test-installed

.PHONY: run test durations test-all check-wheel benchmark study clean

# The package's dependencies and every extra (jax, beam, hub, onnx), pinned in requirements/; then the protobuf
# that both Beam and the tests' transformers run on (requirements/protobuf.txt says why).
EXTRAS := requirements/base.txt requirements/jax.txt requirements/beam.txt requirements/hub.txt requirements/onnx.txt
$(RUNTIME): pyproject.toml setup.py requirements/uv.txt $(EXTRAS) requirements/protobuf.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	test -x $(UV) || $(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements/uv.txt
	$(PIP) $(addprefix -r ,$(EXTRAS))
	$(PIP) --no-deps -r requirements/protobuf.txt
	$(PIP) --no-deps -e .
	$(BYTECODE)
	touch $@

$(TESTING): $(RUNTIME) requirements/test.txt requirements/test-assets.txt
	$(PIP) -r requirements/test.txt
	$(PIP) --no-deps -r requirements/test-assets.txt
	$(BYTECODE)
	touch $@

# Pretrain BERT-Tiny on the bundled Shakespeare corpus, then export a SavedModel
# to savedmodels/bert-tiny-shakespeare/ (run folder: runs/bert-tiny-shakespeare/).
# The recipe was chosen by measurement on 2 cores (docs/pretraining.md#the-main-jobs-recipe):
# 64-token sequences buy twice the steps of 128 in the same time, at twice the peak rate.
# --resume: an interrupted run continues from its newest checkpoint; a finished one
# is only re-exported.
MAIN_RECIPE := --seq-len 64 --steps 1200 --learning-rate 2e-3 --dupe-factor 5
run: $(RUNTIME)
	$(BIN)/bertology pretrain --model bert --preset bert-tiny $(MAIN_RECIPE) --out runs/bert-tiny-shakespeare --resume

# Two pytest workers (one per core of the CI machine), each taking whole test files so that a file's
# module fixtures are built once, the longest files first (tests/conftest.py). Then the model code on
# the JAX backend: every family's parity with transformers at 1e-5, the real MiniLM weights and the
# pretrainers (test_layers.py passes there too).
JAX_TESTS := tests/convert/test_hf_parity.py tests/convert/test_minilm_parity.py tests/models/test_pretrainer.py tests/layers/test_dropout.py \
	tests/layers/test_attention_streams.py tests/layers/test_fused_attention.py tests/models/test_ranked_precision.py \
	tests/layers/test_vocabulary_scores.py tests/models/test_loss_chunks.py::test_the_families_with_language_models_over_a_vocabulary_offer_it \
	'tests/models/test_loss_chunks.py::test_training_with_the_loss_in_chunks_equals_training_on_all_the_logits[bert-False]' \
	'tests/models/test_loss_chunks.py::test_training_with_the_loss_in_chunks_equals_training_on_all_the_logits[gpt-False]' \
	tests/models/test_loss_chunks.py::test_the_head_scores_targets_only_with_a_chunk_size \
	tests/models/gpt/test_gpt.py::test_converted_gpt2_matches_transformers_on_both_padding_sides \
	tests/layers/test_remat.py::test_a_recomputed_step_has_the_plain_steps_gradients[bert] \
	tests/models/gpt/test_gpt.py::test_each_position_sees_only_itself_and_the_positions_before_it \
	tests/models/transformer_xl/test_transformer_xl.py::test_convert_matches_the_numpy_reference_with_memory \
	tests/models/transformer_xl/test_transformer_xl.py::test_training_steps_carry_the_memory_of_the_previous_segment \
	tests/models/xlnet/test_xlnet.py::test_content_stream_matches_transformers \
	tests/models/xlnet/test_xlnet.py::test_query_stream_logits_match_transformers \
	tests/models/xlnet/test_xlnet.py::test_tied_config_with_differing_layer_biases_converts_per_layer_and_serves \
	tests/models/xlnet/test_xlnet.py::test_untied_lm_head_matches_transformers \
	tests/models/electra/test_electra.py::test_discriminator_matches_transformers tests/models/electra/test_electra.py::test_generator_matches_transformers \
	tests/models/electra/test_electra.py::test_two_stage_variant_trains_generator_then_discriminator_from_it \
	tests/models/albert/test_albert.py::test_albert_model_matches_transformers \
	tests/models/albert/test_albert.py::test_albert_pretraining_heads_match_transformers \
	tests/models/spanbert/test_spanbert.py::test_span_boundary_head_matches_a_numpy_reference \
	tests/models/elmo/test_elmo_layers.py tests/models/elmo/test_elmo.py::test_every_output_matches_torch_composition_of_bilm_parts \
	tests/models/elmo/test_elmo.py::test_each_language_model_scores_a_word_it_has_not_read \
	tests/models/t5/test_t5.py::test_encoder_and_decoder_states_match_transformers \
	tests/models/t5/test_t5.py::test_teacher_forced_logits_match_t5_for_conditional_generation \
	tests/models/modernbert/test_modernbert.py::test_converted_masked_lm_matches_transformers tests/layers/test_rotary_window.py \
	tests/models/t5/test_t5.py::test_decoding_one_position_a_step_gives_the_teacher_forced_logits \
	tests/models/t5/test_t5.py::test_span_corruption_trains_the_pretrainer \
	tests/models/bigbird/test_bigbird.py::test_block_sparse_equals_dense_attention_under_the_block_mask \
	tests/models/bigbird/test_bigbird.py::test_converted_bigbird_matches_transformers \
	tests/models/linformer/test_linformer.py::test_low_rank_attention_matches_the_papers_equations \
	tests/models/linformer/test_linformer.py::test_layerwise_sharing_gives_every_layer_one_matrix \
	'tests/pretraining/test_resume.py::test_the_long_sequence_attentions_resume_exactly[bigbird]' \
	'tests/pretraining/test_resume.py::test_the_long_sequence_attentions_resume_exactly[modernbert]' \
	tests/models/distilbert/test_distilbert.py::test_converted_distilbert_matches_transformers \
	tests/models/distilbert/test_distilbert.py::test_the_loss_is_the_three_weighted_losses_written_out \
	tests/models/distilbert/test_distilbert.py::test_only_the_student_trains_and_the_teacher_runs_without_dropout \
	tests/models/ernie/test_ernie.py::test_converted_ernie_matches_transformers \
	tests/models/deberta/test_deberta.py::test_v2_states_match_transformers tests/models/deberta/test_deberta.py::test_v1_states_match_transformers \
	tests/models/deberta/test_deberta.py::test_the_enhanced_mask_decoder_matches_a_numpy_reference \
	tests/models/deberta/test_deberta_v3.py::test_detection_trains_the_deltas_and_never_the_generators_embeddings \
	tests/models/deberta/test_deberta_v3.py::test_the_served_discriminator_folds_the_deltas \
	'tests/pretraining/test_resume.py::test_runs_killed_at_random_moments_end_with_the_weights_of_an_uninterrupted_run[mixed_bfloat16]' \
	tests/engine/test_large_batch.py::test_four_micro_batches_give_the_weights_of_one_batch_of_four_times_their_rows \
	'tests/engine/test_large_batch.py::test_each_optimizer_trains_both_objectives_of_albert_and_keeps_the_library_additions[adamw]' \
	tests/engine/test_large_batch.py::test_held_out_evaluation_leaves_no_trace_on_training
# `make test-all` adds the JAX runs of what CI checks there in another form: the other optimizers (one class
# with the library's additions), the whole large-batch run (its accumulation and held-out evaluation are
# the tests above), the compiled steps of BigBird and DeBERTa-v3 (on JAX every step is compiled: their
# resume and detection tests above train compiled), the chunked loss of the heads other than BERT's masked
# LM and GPT's causal one, and ELMo's recomputed step (BERT's above: the same remat wrapper).
JAX_EXTENDED_TESTS := tests/engine/test_large_batch.py tests/models/test_loss_chunks.py \
	'tests/layers/test_remat.py::test_a_recomputed_step_has_the_plain_steps_gradients[elmo]' \
	tests/models/bigbird/test_bigbird.py::test_compiled_block_sparse_training_steps_match_the_uncompiled_ones \
	tests/models/deberta/test_deberta_v3.py::test_compiled_training_steps_run_and_change_both_tables
# CI leaves out the tests marked extended (pytest.ini): the other benchmarks' smokes and the families'
# repeats of a path it checks on the families whose code on that path differs. `make test-all` runs them too.
# Each stage is held to its time budget in tests/support/durations.json at the speed of the machine that recorded it
# (tests/support/stage_budget.py): a stage over it fails.
MAIN_STAGE := -n 2 --dist loadfile --no-loadscope-reorder --durations=30 -m "not extended and not alone"
JAX_STAGE := -n 2 --dist loadfile --no-loadscope-reorder --durations=15 -m "not extended and not alone" $(JAX_TESTS)
# The alone stage collects only the files that mark a test `@pytest.mark.alone`: collecting the whole suite to
# find them cost 18 s of CPU on 2 cores, the one file 6.5 s.
ALONE_FILES := $(shell grep -rl --include='test_*.py' 'pytest\.mark\.alone' tests)
ALONE_STAGE := -p no:xdist --durations=5 -m "alone and not extended" $(ALONE_FILES)
# The checkout's own modules as bytecode too: where PYTHONDONTWRITEBYTECODE is set, every process the tests start
# (a command, a forked script, the fresh-process driver that imports the package anew for each of its paths)
# would compile the ~160 modules it imports from source again.
SOURCE_BYTECODE := $(BIN)/python -m compileall -q keras_bertology benchmarks tests/support

test: $(TESTING)
	$(SOURCE_BYTECODE)
	BERTOLOGY_TEST_STAGE=main $(BIN)/python -m pytest -q $(MAIN_STAGE)
	BERTOLOGY_TEST_STAGE=jax KERAS_BACKEND=jax $(BIN)/python -m pytest -q $(JAX_STAGE)
	BERTOLOGY_TEST_STAGE=alone $(BIN)/python -m pytest -q $(ALONE_STAGE)

# Runs `make test`'s stages and rewrites the time they took, per stage and per file, in tests/support/durations.json
# (their order in the next runs), leaving the budgets as they are. Run it on a quiet 2-core machine.
durations: $(TESTING)
	BERTOLOGY_RECORD_DURATIONS=1 $(MAKE) test

# The package as users install it (.ci/wheel-check): the wheel alone in a fresh virtualenv runs the main
# job and a built-in fine-tuning task from a folder outside the checkout.
check-wheel: $(TESTING)
	bash .ci/wheel-check

test-all: $(TESTING)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=30 -m "not alone"
	KERAS_BACKEND=jax $(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=15 -m "not alone" $(JAX_TESTS) $(JAX_EXTENDED_TESTS)
	$(BIN)/python -m pytest -q -p no:xdist --durations=5 -m alone

# The peer suite: every pretraining model against keras-hub and transformers (eager, compiled), CPU.
benchmark: $(TESTING)
	$(BIN)/python -m benchmarks.peer_suite

# The objective study (`bertology study`, --scale tiny: 2 CPU cores, resumable; time in docs/study.md); its
# table, JSON and plot are then copied to benchmarks/results/study_tiny/, the copy docs/study.md shows.
study: $(RUNTIME)
	$(BIN)/bertology study --out studies/objectives --workers 2
	mkdir -p benchmarks/results/study_tiny
	cp studies/objectives/results.md studies/objectives/results.json studies/objectives/score_vs_compute.png \
		benchmarks/results/study_tiny/

clean:
	rm -rf $(VENV) runs savedmodels/*/
