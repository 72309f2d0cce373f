"""Fine-tuning from a masked-LM checkpoint: exactly the encoder's tensors are copied into a
tagger and a classifier (tensor by tensor, everything else as it was built), each mismatch of
the encoder's settings is one ``init_from:`` error naming both sides, and layer-wise decay gives
lower layers smaller learning rates."""

from __future__ import annotations

import pytest
import torch

from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.tasks.build import build_model
from transformer.tasks.checkpoint import TASK_KEY
from transformer.tasks.classification import ClassificationTask
from transformer.tasks.mlm import MaskedLMTask
from transformer.tasks.build import layer_decay_groups
from transformer.tasks.tagging import TaggingTask
from transformer.tasks.transfer import check_init_from, copy_encoder, encoder_settings_to_take

ENCODER = {"d_model": 32, "n_heads": 2, "n_layers": 2, "d_ff": 64, "dropout": 0.0, "activation": "relu",
           "norm_first": True, "max_len": 64}
MLM = {"_target_": "transformer.models.mlm.MaskedLanguageModel", **ENCODER,
       "positional": {"_target_": "transformer.modules.positional.SinusoidalPositionalEncoding", "_partial_": True}}
TAGGER = {"_target_": "transformer.models.tagger.Tagger", **ENCODER, "char_channels": 8}
CLASSIFIER = {"_target_": "transformer.models.classifier.SequenceClassifier", **ENCODER}


@pytest.fixture(scope="module")
def pretrained() -> dict:
    torch.manual_seed(1)
    tok = SubwordTokenizer.train(["the cat sat on the mat ."] * 20, 300, prefix_space=True)
    task = MaskedLMTask(model=dict(MLM), piece_vocab_size=tok.vocab_size, pad_id=tok.pad_id, data={"name": "toy"},
                        tokenizer=tok.to_str())
    ckpt = {"state_dict": task.state_dict(), "hyper_parameters": dict(task.hparams), TASK_KEY: "mlm"}
    task.on_save_checkpoint(ckpt)
    return ckpt


def fine_tuned(kind: str, ckpt: dict):
    tok = ckpt["tokenizers"]["src"]
    size = SubwordTokenizer.from_str(tok).vocab_size
    torch.manual_seed(2)
    if kind == "tagger":
        return TaggingTask(model=dict(TAGGER), piece_vocab_size=size, pad_id=0, tags=["DET", "NOUN"],
                           data={"name": "gum", "tagset": "upos"}, tokenizer=tok)
    return ClassificationTask(model=dict(CLASSIFIER), piece_vocab_size=size, pad_id=0, labels=["neg", "pos"],
                              data={"name": "toy"}, tokenizer=tok)


@pytest.mark.parametrize("kind", ["tagger", "classifier"])
def test_exactly_the_encoder_is_copied(kind, pretrained):
    task = fine_tuned(kind, pretrained)
    check_init_from(pretrained, "pre.ckpt", task.hparams.model)
    before = {k: v.clone() for k, v in task.state_dict().items()}
    copied = copy_encoder(task.model, pretrained, "pre.ckpt")
    after = task.state_dict()
    source = pretrained["state_dict"]
    encoder_keys = [k for k in after if k.startswith("model.encoder.")]
    assert sorted(f"model.encoder.{k}" for k in copied) == sorted(encoder_keys)
    assert {"model.encoder.embedding.weight", "model.encoder.layers.1.ffn.w_2.weight",
            "model.encoder.final_norm.weight"} <= set(encoder_keys)
    for key in after:
        if key in encoder_keys:
            assert torch.equal(after[key], source[key]), key  # the pretrained tensor, exactly
            if after[key].dim() == 2 and ".positional." not in key:  # a weight matrix: not what was built
                assert not torch.equal(after[key], before[key]), key
        else:
            assert torch.equal(after[key], before[key]), key  # heads, pooling, characters: as built
    # the tokenizer the model reads with is the pretrained one
    assert task.tokenizer.to_str() == pretrained["tokenizers"]["src"]


@pytest.mark.parametrize("change, message", [
    ({"d_model": 48, "n_heads": 2}, "has d_model=32, but model.d_model=48"),
    ({"n_heads": 4}, "has n_heads=2, but model.n_heads=4"),
    ({"n_layers": 3}, "has n_layers=2, but model.n_layers=3"),
    ({"d_ff": 128}, "has d_ff=64, but model.d_ff=128"),
    ({"norm_first": False}, "has norm_first=True, but model.norm_first=False"),
    ({"positional": {"_target_": "transformer.modules.positional.RelativePositionBias", "_partial_": True}},
     "has positional=.*SinusoidalPositionalEncoding.*but model.positional=.*RelativePositionBias"),
])
def test_each_encoder_mismatch_is_one_error_naming_both_sides(change, message, pretrained):
    with pytest.raises(ValueError, match=f"^init_from: pre.ckpt {message}") as info:
        check_init_from(pretrained, "pre.ckpt", {**CLASSIFIER, **change})
    assert "\n" not in str(info.value)


def test_every_mismatch_is_named_in_the_one_line(pretrained):
    with pytest.raises(ValueError, match="^init_from: pre.ckpt has d_model=32, n_layers=2, but model.d_model=64, "
                                         "model.n_layers=3: .* set them to match or leave them off the command line$"):
        check_init_from(pretrained, "pre.ckpt", {**CLASSIFIER, "d_model": 64, "n_layers": 3})


def test_the_settings_taken_are_those_that_differ_and_are_not_typed(pretrained):
    relative = {"_target_": "transformer.modules.positional.RelativePositionBias", "_partial_": True}
    model = {**CLASSIFIER, "d_model": 64, "n_layers": 3, "positional": relative}
    everything = {"d_model": 32, "n_layers": 2, "positional": MLM["positional"]}
    assert encoder_settings_to_take(pretrained, model, named=()) == everything
    assert encoder_settings_to_take(pretrained, model, named={"n_layers", "dropout"}) == {
        k: v for k, v in everything.items() if k != "n_layers"}
    assert encoder_settings_to_take(pretrained, CLASSIFIER, named=()) == {}
    # what is taken makes the configured model one that init_from accepts
    check_init_from(pretrained, "pre.ckpt", {**model, **everything})
    translation = {"_target_": "transformer.models.EncoderDecoder", "d_model": 32, "n_heads": 2, "n_encoder_layers": 4,
                   "d_ff": 64, "norm_first": True, "activation": "relu"}
    assert encoder_settings_to_take(pretrained, translation, named=()) == {"n_encoder_layers": 2}


def test_a_translation_encoder_names_its_layers_otherwise(pretrained):
    model = {"_target_": "transformer.models.EncoderDecoder", "d_model": 32, "n_heads": 2, "n_encoder_layers": 2,
             "n_decoder_layers": 1, "d_ff": 64, "norm_first": True, "activation": "relu"}
    check_init_from(pretrained, "pre.ckpt", model)
    with pytest.raises(ValueError, match="has n_layers=2, but model.n_encoder_layers=3"):
        check_init_from(pretrained, "pre.ckpt", {**model, "n_encoder_layers": 3})
    rows = pretrained["state_dict"]["model.encoder.embedding.weight"].shape[0]
    translation = build_model(model, vocab_size=rows, pad_id=0)
    copy_encoder(translation, pretrained, "pre.ckpt")
    # one joint vocabulary: the decoder's embedding (and the tied output projection) is the encoder's
    assert torch.equal(translation.decoder.embedding.weight, pretrained["state_dict"]["model.encoder.embedding.weight"])
    assert translation.decoder.output_proj.weight is translation.encoder.embedding.weight


def test_not_a_masked_lm_checkpoint_or_another_vocabulary_is_refused(pretrained):
    with pytest.raises(ValueError, match="^init_from: pre.ckpt is a 'classification' checkpoint; .*experiment=pretrain"):
        check_init_from({**pretrained, TASK_KEY: "classification"}, "pre.ckpt", CLASSIFIER)
    rows = pretrained["state_dict"]["model.encoder.embedding.weight"].shape[0]
    with pytest.raises(ValueError, match=f"has a {rows}-piece vocabulary, but data.tokenizer_path names a 500-piece"):
        check_init_from(pretrained, "pre.ckpt", CLASSIFIER, tokenizer_vocab=500)
    task = ClassificationTask(model=dict(CLASSIFIER), piece_vocab_size=rows + 7, pad_id=0, labels=["a", "b"],
                              data={"name": "toy"})
    with pytest.raises(ValueError, match=f"has a {rows}-piece vocabulary, but the model reads {rows + 7} pieces"):
        copy_encoder(task.model, pretrained, "pre.ckpt")


def test_layer_decay_gives_lower_layers_smaller_rates(pretrained):
    task = fine_tuned("classifier", pretrained)
    assert len(layer_decay_groups(task, 1e-3, 1.0)) == 1
    groups = layer_decay_groups(task, 1e-3, 0.5)
    assert [g["lr"] for g in groups] == pytest.approx([1e-3, 5e-4, 2.5e-4, 1.25e-4])  # heads, layer 1, layer 0, embeddings
    by_param = {id(p): g["lr"] for g in groups for p in g["params"]}
    encoder = task.model.encoder
    assert by_param[id(encoder.embedding.weight)] == pytest.approx(1.25e-4)
    assert by_param[id(next(encoder.layers[0].parameters()))] == pytest.approx(2.5e-4)
    assert by_param[id(encoder.final_norm.weight)] == by_param[id(task.model.classifier.weight)] == 1e-3
    assert sum(len(g["params"]) for g in groups) == len(list(task.parameters()))
