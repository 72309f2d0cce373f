"""TaggingTask: piece-to-word alignment, the word-level loss, chunked inference
(``inference.tagger``), the learning-rate schedule, the self-describing checkpoint, and
ensembles (``models.tagger_ensemble``, ``evaluation.tagging``)."""

from __future__ import annotations

import pytest
import torch

from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.evaluation.tagging import ensemble_report, rank_subsets
from transformer.inference.tagger import chunk_sentence
from transformer.models.tagger import pool_words
from transformer.models.tagger_ensemble import TaggerEnsemble
from transformer.tasks.build import warmup_linear_factor
from transformer.tasks.tagging import TaggingTask, align_word_dims, tagging_loss

TRAIN_WORDS = ("the cat sat on the mat . the dog did n't bark , and the cats were sitting "
               "quietly ; dogs barked loudly at the U.S. border !").split() * 20
TINY_MODEL = {
    "_target_": "transformer.models.tagger.Tagger", "d_model": 16, "n_heads": 2, "n_layers": 1,
    "d_ff": 32, "dropout": 0.0, "max_len": 8, "pooling": "first", "norm_first": True,
}
TAGS = ["DET", "NOUN", "VERB", "PUNCT", "ADV"]


@pytest.fixture(scope="module")
def tokenizer() -> SubwordTokenizer:
    return SubwordTokenizer.train(TRAIN_WORDS, vocab_size=300, model="bpe")


def make_task(tokenizer, **kw) -> TaggingTask:
    return TaggingTask(
        model=dict(TINY_MODEL, **kw), piece_vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id,
        tags=TAGS, data={"name": "gum", "tagset": "upos"}, tokenizer=tokenizer.to_str(),
        train_words=sorted(set(TRAIN_WORDS)),
    )


# ----------------------------------------------------------------- alignment
@pytest.mark.parametrize("words", [
    ["the", "cat", "sat", "."],                                   # one piece each
    ["Antidisestablishmentarianism", ",", "U.S.", "n't", "!!!"],   # many pieces, punctuation
    ["naïve", "café", "—", "日本語", "x"],                          # non-ASCII, unseen bytes
])
def test_every_word_gets_its_own_contiguous_pieces(tokenizer, words):
    ids, word_ids = tokenizer.encode_words(words)
    assert len(ids) == len(word_ids) and max(word_ids) + 1 == len(words)
    assert word_ids == sorted(word_ids)  # contiguous, in order
    for w, word in enumerate(words):
        pieces = [i for i, k in zip(ids, word_ids) if k == w]
        assert pieces and tokenizer.decode(pieces) == word
    if words[0].startswith("Anti"):
        assert word_ids.count(0) >= 4  # an unseen long word splits into many pieces


def test_pooling_reads_the_right_pieces():
    h = torch.arange(7, dtype=torch.float).view(1, 7, 1).repeat(1, 1, 2)  # (1, T=7, D=2): piece t holds t
    word_ids = torch.tensor([[0, 0, 0, 1, 2, 2, -1]])  # word 0: 3 pieces, word 1: 1, word 2: 2, pad
    first = pool_words(h, word_ids, "first")[0, :, 0]  # (W,)
    mean = pool_words(h, word_ids, "mean")[0, :, 0]
    assert first.tolist() == [0.0, 3.0, 4.0]
    assert mean.tolist() == [1.0, 3.0, 4.5]


def test_loss_ignores_padding_and_non_first_pieces():
    torch.manual_seed(0)
    h = torch.randn(2, 6, 4, requires_grad=True)  # (B, T, D) piece vectors
    word_ids = torch.tensor([[0, 0, 0, 1, 2, -1], [0, 1, 1, -1, -1, -1]])
    tags = torch.tensor([[1, 2, 0], [3, 4, -100]])  # sentence 2 has 2 words: third is padding
    proj = torch.nn.Linear(4, 5)
    loss, n_words = tagging_loss(proj(pool_words(h, word_ids, "first")), tags)
    assert n_words == 5
    loss.backward()
    grad_norm = h.grad.norm(dim=-1)  # (B, T)
    first_piece = torch.tensor([[1, 0, 0, 1, 1, 0], [1, 1, 0, 0, 0, 0]], dtype=torch.bool)
    assert (grad_norm[~first_piece] == 0).all()  # non-first pieces and padding get nothing
    assert (grad_norm[first_piece] > 0).all()


def test_loss_is_the_mean_over_real_words_only():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 5)  # (B, W, C)
    tags = torch.tensor([[1, 2, 0], [3, -100, -100]])
    loss, n = tagging_loss(logits, tags)
    manual = torch.stack([
        torch.nn.functional.cross_entropy(logits[b, w], tags[b, w]) for b, w in [(0, 0), (0, 1), (0, 2), (1, 0)]
    ]).mean()
    assert n == 4 and loss.item() == pytest.approx(manual.item(), rel=1e-6)
    changed = logits.clone()
    changed[1, 1:] = 100.0  # garbage at padded words changes nothing
    assert tagging_loss(changed, tags)[0].item() == pytest.approx(loss.item(), rel=1e-6)
    empty, n0 = tagging_loss(logits, torch.full((2, 3), -100))
    assert n0 == 0 and empty.item() == 0.0


def test_word_dims_are_aligned():
    logits = torch.zeros(2, 4, 3)
    assert align_word_dims(logits, torch.zeros(2, 2, dtype=torch.long))[1].tolist()[0] == [0, 0, -100, -100]
    assert align_word_dims(logits, torch.zeros(2, 6, dtype=torch.long))[1].shape == (2, 4)


# ----------------------------------------------------------------- inference
def test_chunks_never_cut_a_word_and_cover_everything():
    word_ids = [0, 0, 1, 2, 2, 2, 3, 4, 4, 5]
    spans = chunk_sentence(word_ids, 4)
    assert spans == [(0, 3), (3, 7), (7, 10)]
    assert all(b - a <= 4 for a, b in spans)
    # a word longer than max_len keeps its first pieces, the next word starts a new chunk
    assert chunk_sentence([0, 1, 1, 1, 1, 1, 2], 3) == [(0, 1), (1, 4), (6, 7)]
    assert chunk_sentence([], 3) == []


def test_tag_keeps_order_count_and_handles_long_and_empty_sentences(tokenizer):
    task = make_task(tokenizer)  # max_len 8 pieces
    long = ("the cats were sitting quietly at the U.S. border and the dogs barked loudly " * 3).split()
    sentences = [["the", "cat"], [], long, ["Zyzzyva"]]
    out = task.tagger(max_tokens=16).tag(sentences)
    assert [len(t) for t in out] == [len(s) for s in sentences]
    assert all(t in TAGS for sent in out for t in sent)
    # batching does not change a sentence's tags: alone it gets the same ones
    assert task.tagger().tag([["the", "cat"]])[0] == out[0]


def test_schedule_warms_up_then_decays_to_zero():
    assert warmup_linear_factor(0, 4, 10) == pytest.approx(0.25)
    assert warmup_linear_factor(3, 4, 10) == pytest.approx(1.0)
    assert warmup_linear_factor(6, 4, 10) == pytest.approx(0.5)
    assert warmup_linear_factor(20, 4, 10) == 0.0


def test_checkpoint_carries_tokenizer_tags_and_training_words(tokenizer):
    task = make_task(tokenizer, pooling="mean")
    ckpt = {"state_dict": task.state_dict(), "hyper_parameters": dict(task.hparams)}
    task.on_save_checkpoint(ckpt)
    assert ckpt["transformer_task"] == "tagging"
    assert ckpt["tokenizers"]["src"] == tokenizer.to_str()
    assert set(ckpt["tagging"]["train_words"]) == set(TRAIN_WORDS)
    again = TaggingTask.from_checkpoint_dict(ckpt)
    assert again.tags == TAGS and again.tagset == "upos" and again.model.pooling == "mean"
    assert again.train_words == set(TRAIN_WORDS)
    sents = [["the", "dog", "barked", "."], ["Qwerty", "sat"]]
    assert again.tagger().tag(sents) == task.tagger().tag(sents)


def test_conll2000_tags_live_in_the_xpos_field(tokenizer):
    task = TaggingTask(model=TINY_MODEL, piece_vocab_size=tokenizer.vocab_size, pad_id=0, tags=TAGS,
                       data={"name": "conll2000", "tagset": "pos", "dev_size": 500})
    assert task.tagset == "xpos"
    with pytest.raises(ValueError, match="schedule"):
        TaggingTask(model=TINY_MODEL, piece_vocab_size=10, pad_id=0, tags=TAGS,
                    data={"name": "gum", "tagset": "upos"}, schedule="cosine")


def test_word_dropout_hides_whole_words_and_never_padding():
    from transformer.tasks.tagging import drop_words

    src = torch.tensor([[10, 11, 12, 13, 14, 0], [20, 21, 22, 0, 0, 0]])  # (B, T)
    word_ids = torch.tensor([[0, 0, 1, 2, 2, -1], [0, 1, 1, -1, -1, -1]])
    assert torch.equal(drop_words(src, word_ids, 0.0, 3), src)
    all_dropped = drop_words(src, word_ids, 1.0, 3)
    assert all_dropped.tolist() == [[3, 3, 3, 3, 3, 0], [3, 3, 3, 0, 0, 0]]
    g = torch.Generator().manual_seed(1)
    for _ in range(20):
        out = drop_words(src, word_ids, 0.5, 3, generator=g)
        for b in range(2):
            for w in range(3):
                pieces = out[b][word_ids[b] == w]
                if len(pieces):  # a word is hidden entirely or not at all
                    assert (pieces == 3).all() or (pieces != 3).all()
        assert (out[word_ids < 0] == 0).all()


def test_piece_dropout_hides_pieces_but_keeps_the_spelling(tokenizer):
    # piece_dropout=1: the model embeds only <unk> but spells the real pieces; word dropout
    # hides both. Evaluation sees the sentence unchanged.
    task = make_task(tokenizer, char_channels=8, char_dim=4)
    seen = []
    real_vectors = task.model.word_vectors
    task.model.word_vectors = lambda src, word_ids, spell=None, hook=None: (seen.append((src, spell)), real_vectors(src, word_ids, spell, hook))[1]
    ids, word_ids = tokenizer.encode_words(["the", "cat", "sat"])
    batch = {"src": torch.tensor([ids]), "word_ids": torch.tensor([word_ids]), "tags": torch.tensor([[0, 1, 2]])}
    unk = tokenizer.unk_id
    task.train()
    task.hparams.piece_dropout, task.hparams.word_dropout = 1.0, 0.0
    task._step(batch)
    src, spell = seen[-1]
    assert src.eq(unk).all() and torch.equal(spell, batch["src"])
    task.hparams.piece_dropout, task.hparams.word_dropout = 0.0, 1.0
    task._step(batch)
    src, spell = seen[-1]
    assert src.eq(unk).all() and spell.eq(unk).all()
    task.eval()
    task.hparams.piece_dropout = 1.0
    task._step(batch)
    src, spell = seen[-1]
    assert torch.equal(src, batch["src"]) and torch.equal(spell, batch["src"])


def test_character_encoder_table_comes_from_the_tokenizer(tokenizer):
    task = make_task(tokenizer, char_channels=8, char_dim=4)
    table = task.model.chars.piece_chars  # (V, L_p)
    for special in (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id, tokenizer.unk_id, tokenizer.mask_id):
        assert table[special].eq(0).all()
    piece = tokenizer.encode_words(["cat"])[0][0]
    assert table[piece].ne(0).sum() == min(len(tokenizer.id_to_token(piece)), table.size(1))
    ckpt = {"state_dict": task.state_dict(), "hyper_parameters": dict(task.hparams)}
    task.on_save_checkpoint(ckpt)
    again = TaggingTask.from_checkpoint_dict(ckpt)
    sents = [["the", "dogs", "barked", "."], ["Qwerty", "sat"]]
    assert again.tagger().tag(sents) == task.tagger().tag(sents)


def test_tag_probabilities_are_distributions_whose_argmax_is_tag(tokenizer):
    task = make_task(tokenizer, char_channels=8, char_dim=4)
    sents = [["the", "dogs", "barked", "."], [], ["Qwerty", "sat", "on", "the", "mat", "quietly", "!"]]
    tagger = task.tagger(max_tokens=16)
    probs = tagger.tag_probabilities(sents)
    assert [p.shape for p in probs] == [(4, len(TAGS)), (0, len(TAGS)), (7, len(TAGS))]
    for p in probs:
        torch.testing.assert_close(p.sum(-1), torch.ones(len(p)))
    assert tagger.tag(sents) == [[TAGS[i] for i in p.argmax(-1).tolist()] for p in probs]


def _save(task, path):
    from transformer.tasks.checkpoint import TASK_KEY

    ckpt = {"state_dict": task.state_dict(), "hyper_parameters": dict(task.hparams), TASK_KEY: "tagging"}
    task.on_save_checkpoint(ckpt)
    torch.save(ckpt, path)
    return str(path)


def _loaded(paths):
    from transformer.tasks.checkpoint import load_task

    return [load_task(p) for p in paths], paths


def test_ensemble_report_averages_members_and_refuses_other_tag_sets(tokenizer, tmp_path, mirror_root):
    torch.manual_seed(0)
    a = _save(make_task(tokenizer), tmp_path / "a.ckpt")
    torch.manual_seed(1)
    b = _save(make_task(tokenizer), tmp_path / "b.ckpt")
    common = dict(split="dev", data_dir=str(tmp_path / "cache"), mirror_root=str(mirror_root))
    one = ensemble_report(*_loaded([a]), **common)
    assert one["ensemble"]["acc"] == one["members"][0]["acc"]
    twice = ensemble_report(*_loaded([a, a]), **common)  # the same model twice is that model
    assert twice["ensemble"]["acc"] == one["ensemble"]["acc"]
    pair = ensemble_report(*_loaded([a, b]), **common)
    assert [m["checkpoint"] for m in pair["members"]] == [a, b]
    assert pair["ensemble"]["tokens"] == one["ensemble"]["tokens"] > 10000
    other = TaggingTask(model=TINY_MODEL, piece_vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id,
                        tags=TAGS[::-1], data={"name": "gum", "tagset": "upos"}, tokenizer=tokenizer.to_str())
    c = _save(other, tmp_path / "c.ckpt")
    with pytest.raises(ValueError, match="tag inventory"):
        ensemble_report(*_loaded([a, c]), **common)


@pytest.mark.slow
def test_ensemble_script_prints_the_report_and_refuses_a_mismatch_with_exit_2(tokenizer, tmp_path, mirror_root):
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "tagging_ensemble.py"
    a = _save(make_task(tokenizer), tmp_path / "a.ckpt")
    other = TaggingTask(model=TINY_MODEL, piece_vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id,
                        tags=TAGS[::-1], data={"name": "gum", "tagset": "upos"}, tokenizer=tokenizer.to_str())
    c = _save(other, tmp_path / "c.ckpt")
    common = ["--split", "dev", "--data-dir", str(tmp_path / "cache"), "--mirror-root", str(mirror_root)]
    out = tmp_path / "report.json"
    ok = subprocess.run([sys.executable, str(script), a, *common, "--output", str(out)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert json.loads(ok.stdout) == json.loads(out.read_text()) and json.loads(ok.stdout)["members"][0]["checkpoint"] == a
    bad = subprocess.run([sys.executable, str(script), a, c, *common], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and "tag inventory" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_subsets_are_ranked_by_words_right_then_by_size():
    gold = [[0, 1], [1, 2], []]  # 4 words over 3 sentences, one of them empty

    def member(*rows):
        flat = torch.tensor(rows, dtype=torch.float)
        return [flat[:2], flat[2:], flat[:0]]

    # member 0 gets words 0, 1 right; member 1 words 2, 3 right, and its wrong guesses are
    # unsure, so the pair gets all four; member 2 is a copy of member 0.
    m0 = member([0.9, 0.1, 0.0], [0.0, 0.9, 0.1], [0.9, 0.1, 0.0], [0.9, 0.0, 0.1])
    m1 = member([0.4, 0.6, 0.0], [0.0, 0.4, 0.6], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0])
    ranked = rank_subsets([m0, m1, m0], gold)
    assert len(ranked) == 7
    assert [r["members"] for r in ranked[:5]] == [(0, 1), (1, 2), (0,), (1,), (2,)]
    assert ranked[0]["correct"] == 4 and ranked[0]["acc"] == 1.0 and ranked[0]["tokens"] == 4
    correct = {r["members"]: r["correct"] for r in ranked}
    assert correct[(0,)] == correct[(1,)] == 2
    assert correct[(0, 1, 2)] == 2  # two copies of member 0 outvote member 1
    with pytest.raises(ValueError, match="member 1: its sentences do not align"):
        rank_subsets([m0, m0[:2]], gold)


@pytest.mark.slow
def test_ensemble_report_chooses_its_members_on_another_split(tokenizer, tmp_path, mirror_root):
    paths = []
    for seed in (0, 1, 2):
        torch.manual_seed(seed)
        paths.append(_save(make_task(tokenizer), tmp_path / f"m{seed}.ckpt"))
    common = dict(data_dir=str(tmp_path / "cache"), mirror_root=str(mirror_root))
    # a duplicate adds nothing, so the smaller subset wins the tie
    dup = ensemble_report(*_loaded([paths[0], paths[0]]), choose_on="dev", split="dev", **common)
    assert dup["selection"]["chosen"] == [paths[0]]
    assert [m["checkpoint"] for m in dup["members"]] == [paths[0]]
    report = ensemble_report(*_loaded(paths), choose_on="dev", split="dev", top=3, **common)
    sel = report["selection"]
    assert sel["split"] == "dev" and sel["subsets"] == 7 and len(sel["best"]) == 3
    assert [m["checkpoint"] for m in report["members"]] == sel["chosen"] == sel["best"][0]["checkpoints"]
    # scored on the split it was chosen on, the ensemble is the best subset, and no subset beats it
    assert report["ensemble"]["acc"] == pytest.approx(sel["best"][0]["acc"])
    assert report["ensemble"]["acc"] >= max(sel["single_acc"])
    assert report["ensemble"]["correct"] == sel["best"][0]["correct"]
    test = ensemble_report(*_loaded(paths), choose_on="dev", split="test", **common)
    assert test["split"] == "test" and test["selection"]["chosen"] == sel["chosen"]


# ----------------------------------------------------------------- auxiliary tag set
AUX_TAGS = ["DT", "NN", "VBD", ".", "RB", "NNS"]


def make_aux_task(tokenizer, aux_weight: float) -> TaggingTask:
    return TaggingTask(
        model=dict(TINY_MODEL), piece_vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id, tags=TAGS,
        data={"name": "gum", "tagset": "upos", "aux_tagset": "xpos"}, aux_tags=AUX_TAGS, aux_weight=aux_weight,
        tokenizer=tokenizer.to_str(), train_words=sorted(set(TRAIN_WORDS)),
    )


def aux_batch(tokenizer) -> dict:
    rows = [["the", "cat", "sat", "."], ["dogs", "barked", "loudly"]]
    encoded = [tokenizer.encode_words(w) for w in rows]
    t = max(len(ids) for ids, _ in encoded)
    src = torch.full((2, t), tokenizer.pad_id)
    word_ids = torch.full((2, t), -1)
    for r, (ids, wids) in enumerate(encoded):
        src[r, : len(ids)], word_ids[r, : len(wids)] = torch.tensor(ids), torch.tensor(wids)
    return {"src": src, "word_ids": word_ids, "tags": torch.tensor([[0, 1, 2, 3], [1, 2, 4, -100]]),
            "aux_tags": torch.tensor([[0, 1, 2, 3], [5, 2, 4, -100]])}


def test_auxiliary_tags_add_a_weighted_loss_from_a_second_head(tokenizer):
    torch.manual_seed(0)
    task = make_aux_task(tokenizer, aux_weight=0.3)
    batch = aux_batch(tokenizer)
    assert task.model.aux_classifier.out_features == len(AUX_TAGS)
    task.eval()
    loss, _, n_words, aux = task._step(batch)
    h = task.model.word_vectors(batch["src"], batch["word_ids"])  # (B, W, D)
    main_ref, _ = tagging_loss(task.model.classifier(h), batch["tags"], task.hparams.label_smoothing)
    aux_ref, aux_words = tagging_loss(task.model.aux_classifier(h), batch["aux_tags"], task.hparams.label_smoothing)
    assert torch.allclose(loss, main_ref) and torch.allclose(aux["loss"], aux_ref)
    assert n_words == aux_words == 7
    # the training loss is main + 0.3 * aux, and both heads (and the encoder) get gradients from it
    task.log = lambda *a, **k: None
    task.optimizers = lambda: torch.optim.SGD(task.parameters(), lr=0.0)
    total = task.training_step(batch, 0)
    assert torch.allclose(total, main_ref + 0.3 * aux_ref)
    total.backward()
    assert task.model.aux_classifier.weight.grad.abs().sum() > 0
    assert task.model.classifier.weight.grad.abs().sum() > 0
    # with weight 0 the auxiliary head learns nothing: training is the single-task one
    task0 = make_aux_task(tokenizer, aux_weight=0.0)
    task0.log, task0.optimizers = task.log, task.optimizers
    task0.training_step(batch, 0).backward()
    assert task0.model.aux_classifier.weight.grad.abs().sum() == 0


def test_auxiliary_tags_are_required_in_batches_and_kept_by_the_checkpoint(tokenizer):
    torch.manual_seed(0)
    task = make_aux_task(tokenizer, aux_weight=0.5)
    batch = aux_batch(tokenizer)
    with pytest.raises(ValueError, match="aux_tags"):
        task._step({k: v for k, v in batch.items() if k != "aux_tags"})
    trainer_ckpt = {"hyper_parameters": dict(task.hparams), "state_dict": task.state_dict()}
    task.on_save_checkpoint(trainer_ckpt)
    again = TaggingTask.from_checkpoint_dict(trainer_ckpt).eval()
    task.eval()
    assert again.aux_tags == AUX_TAGS
    assert torch.equal(again.model.aux_classifier.weight, task.model.aux_classifier.weight)
    # tag reads the main head; tag_fields both, keyed by annotation, from the same pass
    words = [["the", "cat", "sat", "."], [], ["dogs"] * 12]  # the last is longer than max_len pieces
    assert again.tagger().tag(words) == task.tagger().tag(words) and set(again.tagger().tag(words)[0]) <= set(TAGS)
    fields = again.tagger().tag_fields(words)
    assert set(fields) == {"upos", "xpos"} and fields["upos"] == again.tagger().tag(words)
    assert [len(t) for t in fields["xpos"]] == [4, 0, 12] and set(fields["xpos"][0]) <= set(AUX_TAGS)
    batch = aux_batch(tokenizer)
    _, aux_logits = again.model.forward_all(batch["src"][:1], batch["word_ids"][:1])
    assert fields["xpos"][0] == [AUX_TAGS[i] for i in aux_logits[0, :4].argmax(-1).tolist()]


def test_evaluate_scores_the_auxiliary_head_too(tokenizer, tmp_path, monkeypatch):
    import json

    import transformer.evaluation.tagging as evaluation
    from transformer.data.core.readers import TaggedSentence

    torch.manual_seed(0)
    task = make_aux_task(tokenizer, aux_weight=0.5).eval()
    sents = [TaggedSentence("a", ["the", "cat", "sat", "."], ["DET", "NOUN", "VERB", "PUNCT"], ["DT", "NN", "VBD", "."]),
             TaggedSentence("b", ["dogs", "barked"], ["NOUN", "VERB"], ["NNS", "VBD"])]
    monkeypatch.setattr(evaluation, "read_tagged_split", lambda *a, **k: sents)
    metrics = task.evaluate("dev", output_dir=tmp_path)
    fields = task.tagger().tag_fields([s.words for s in sents])
    for key, got in (("upos", metrics), ("xpos", metrics["aux"])):
        gold = [t for s in sents for t in getattr(s, key)]
        pred = [t for p in fields[key] for t in p]
        assert got["tagset"] == key and got["tokens"] == 6
        assert got["acc"] == pytest.approx(sum(g == p for g, p in zip(gold, pred)) / 6)
        assert json.loads((tmp_path / f"dev.{key}.json").read_text())["acc"] == got["acc"]
        rows = (tmp_path / f"dev.{key}.pred.tsv").read_text().split("\n\n")[0].split("\n")
        assert [r.split("\t")[1:] for r in rows] == [[g, p] for g, p in zip(getattr(sents[0], key), fields[key][0])]
    assert "per_tag" not in metrics["aux"] and "per_tag" in metrics


# ----------------------------------------------------------------- ensembles through load_task
def test_tagging_ensemble_averages_both_heads_of_its_members(tokenizer, tmp_path):
    from transformer.tasks.checkpoint import load_task

    paths = []
    for seed in (0, 1, 2):
        torch.manual_seed(seed)
        paths.append(_save(make_aux_task(tokenizer, aux_weight=0.5), tmp_path / f"m{seed}.ckpt"))
    singles = [load_task(p) for p in paths]
    ens = load_task(paths)
    assert isinstance(ens, TaggingTask) and isinstance(ens.model, TaggerEnsemble) and len(ens.model.taggers) == 3
    words = [["the", "cat", "sat", "."], [], ["dogs"] * 12, ["Qwerty", "barked"]]
    main, aux = ens.tagger(max_tokens=16).head_probabilities(words)
    parts = [s.tagger(max_tokens=16).head_probabilities(words) for s in singles]
    for k, got in enumerate((main, aux)):
        for i in range(len(words)):
            mean = sum(p[k][i] for p in parts) / 3
            torch.testing.assert_close(got[i], mean)
    fields = ens.tagger().tag_fields(words)
    assert fields["upos"] == [[TAGS[j] for j in p.argmax(-1).tolist()] for p in main]
    assert fields["xpos"] == [[AUX_TAGS[j] for j in p.argmax(-1).tolist()] for p in aux]
    # the members' mean differs from each member alone on these random models
    assert any(not torch.allclose(main[0], p[0][0]) for p in parts)
    # the members are submodules: moving the ensemble moves them all
    assert {id(p) for p in ens.parameters()} >= {id(p) for p in ens.model.taggers[2].parameters()}


def test_tagging_ensemble_refuses_other_inventories_and_drops_a_differing_aux_head(tokenizer, tmp_path):
    from transformer.tasks.checkpoint import load_task

    torch.manual_seed(0)
    aux = _save(make_aux_task(tokenizer, aux_weight=0.5), tmp_path / "aux.ckpt")
    plain = _save(make_task(tokenizer), tmp_path / "plain.ckpt")
    other = TaggingTask(model=TINY_MODEL, piece_vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id,
                        tags=TAGS[::-1], data={"name": "gum", "tagset": "upos"}, tokenizer=tokenizer.to_str())
    with pytest.raises(ValueError, match="member 2 has another tag inventory"):
        load_task([aux, _save(other, tmp_path / "other.ckpt")])
    xpos = TaggingTask(model=TINY_MODEL, piece_vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id,
                       tags=TAGS, data={"name": "gum", "tagset": "xpos"}, tokenizer=tokenizer.to_str())
    with pytest.raises(ValueError, match="member 2 has data tagset 'xpos'"):
        load_task([aux, _save(xpos, tmp_path / "xpos.ckpt")])
    mixed = load_task([aux, plain])  # one member has no XPOS head: main tags only
    fields = mixed.tagger().tag_fields([["the", "cat"]])
    assert set(fields) == {"upos"} and len(fields["upos"][0]) == 2


# ----------------------------------------------------------------- adversarial training
@pytest.mark.parametrize("model_kw", [{}, {"context": "word", "char_channels": 8}])
def test_adversarial_training_adds_the_loss_at_the_gradient_step(tokenizer, model_kw):
    """With ``adversarial_eps`` the training loss is the clean loss plus the loss at the encoder
    inputs moved by eps * |x| along the loss gradient (per sentence), which is higher."""
    torch.manual_seed(0)
    eps = 0.05
    model = dict(TINY_MODEL, **model_kw)
    task = TaggingTask(model=model, piece_vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id, tags=TAGS,
                       data={"name": "gum", "tagset": "upos", "aux_tagset": "xpos"}, aux_tags=AUX_TAGS,
                       aux_weight=0.3, adversarial_eps=eps, tokenizer=tokenizer.to_str())
    task.eval()  # no dropout: both passes below are deterministic
    task.log = lambda *a, **k: None
    task.optimizers = lambda: torch.optim.SGD(task.parameters(), lr=0.0)
    batch = aux_batch(tokenizer)

    # by hand: clean objective, its gradient at the encoder inputs, the moved inputs' objective
    seen = []
    clean, _, _, aux = task._step(batch, None, lambda x: seen.append(x) or x)
    x = seen[0]  # (B, L, D) encoder inputs
    objective = clean + 0.3 * aux["loss"]
    (g,) = torch.autograd.grad(objective, x)
    moved = []

    def move(v):
        b = v.size(0)
        r = eps * v.detach().reshape(b, -1).norm(dim=1) / g.reshape(b, -1).norm(dim=1)
        out = v + r.view(b, 1, 1) * g
        moved.append((v.detach(), out.detach()))
        return out

    adv_main, _, _, adv_aux = task._step(batch, None, move)
    expected_adv = adv_main + 0.3 * adv_aux["loss"]

    total = task.training_step(batch, 0)
    assert torch.allclose(total, objective + expected_adv, atol=1e-5)
    assert expected_adv > objective  # moving up the gradient raises the loss
    v, out = moved[0]
    ratio = (out - v).reshape(v.size(0), -1).norm(dim=1) / v.reshape(v.size(0), -1).norm(dim=1)
    assert torch.allclose(ratio, torch.full_like(ratio, eps), rtol=1e-4)  # |r_b| = eps |x_b|
    total.backward()  # both passes reach the parameters
    assert task.model.classifier.weight.grad.abs().sum() > 0


def test_adversarial_training_off_by_default_and_refuses_negative_eps(tokenizer):
    task = make_task(tokenizer)
    assert task.hparams.adversarial_eps == 0.0
    with pytest.raises(ValueError, match="adversarial_eps"):
        TaggingTask(model=dict(TINY_MODEL), piece_vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id,
                    tags=TAGS, data={"name": "gum", "tagset": "upos"}, adversarial_eps=-0.1)


def test_a_tag_outside_the_training_set_is_left_out_of_the_loss_and_scored_as_an_error(tokenizer):
    torch.manual_seed(0)
    logits = torch.randn(1, 3, 5)  # (B, W, C): 5 training tags
    known = torch.tensor([[1, 2, -100]])
    unknown = torch.tensor([[1, 2, 5]])  # id 5: a dev tag the training file lacks
    loss_known, n_known = tagging_loss(logits, known)
    loss_unknown, n_unknown = tagging_loss(logits, unknown)
    assert torch.isfinite(loss_unknown) and loss_unknown.item() == pytest.approx(loss_known.item())
    assert n_known == n_unknown == 2  # the loss's word count: scored words only
    task = make_task(tokenizer)
    logits[0, 2, 4] = 100.0  # however sure the model is, it cannot be right
    _, correct, n_words = task._score(logits, unknown)
    assert n_words == 3 and int(correct) <= 2  # the accuracy counts the word, as an error
    _, correct_known, n_known_words = task._score(logits, known)
    assert n_known_words == 2 and int(correct) == int(correct_known)
