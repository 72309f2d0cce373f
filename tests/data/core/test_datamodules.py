"""DataModules on small subsets of the mirrored corpora."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch

from transformer.data.core.datamodule import length_filter_columns
from transformer.data.parallel.datamodule import TranslationDataModule
from transformer.data.tagged.corpus import PRESETS, UposFromXpos, read_tagged_file
from transformer.data.tagged.datamodule import TaggingDataModule

SUBSET = 400


def read_conll2000_train(data_dir, mirror_root):
    """The CoNLL-2000 preset's whole training file."""
    return read_tagged_file(PRESETS["conll2000"]["files"]["train"], "conll2000", data_dir, mirror_root)


@pytest.fixture(scope="module")
def mt(mirror_root, tmp_path_factory):
    dm = TranslationDataModule("de", "en", data_dir=tmp_path_factory.mktemp("mt"), mirror_root=mirror_root,
                               vocab_size=600, max_tokens=512, max_len=20, train_subset=SUBSET)
    dm.setup()
    return dm


def test_translation_setup(mt):
    assert mt.splits == ["train", "val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco"]
    assert mt.test_splits == ["test_2016_flickr", "test_2017_flickr", "test_2017_mscoco"]
    assert mt.src_tokenizer is mt.tgt_tokenizer and mt.src_tokenizer.vocab_size == 600
    assert len(mt.raw("train")) == SUBSET and len(mt.raw("val")) == 1014
    report = mt.filter_report["train"]
    assert report.n_dropped > 0  # max_len=20 pieces drops the longest captions, counted
    assert len(mt.dataset("train")) == SUBSET - report.n_dropped


def test_translation_train_batches(mt):
    loader = mt.train_dataloader()
    seen = []
    tok = mt.tgt_tokenizer
    for batch in loader:
        b, s = batch["src"].shape
        t = batch["tgt_in"].shape[1]
        assert batch["tgt_out"].shape == (b, t) and batch["tgt_pad_mask"].shape == (b, t)
        assert batch["src_pad_mask"].shape == (b, s) and batch["index"].shape == (b,)
        assert max(s, t) * b <= 512
        assert (batch["tgt_in"][:, 0] == tok.bos_id).all()
        seen += batch["index"].tolist()
        i = 0
        src, tgt = mt.raw("train")[batch["index"][i]]
        assert tok.decode(batch["tgt_out"][i].tolist()) == tgt
        assert tok.decode(batch["src"][i].tolist()) == src
    assert sorted(seen) == sorted(set(seen)) and len(seen) == len(mt.dataset("train"))


def test_translation_eval_loader_restores_order(mt):
    seen = []
    for batch in mt.dataloader("val"):
        seen += batch["index"].tolist()
    assert sorted(seen) == list(range(1014))
    loaders = mt.test_dataloader()
    assert len(loaders) == 3 and sum(len(l.batch_sampler.lengths) for l in loaders) == 2461
    # eval over train covers the length-filtered examples too
    assert sum(len(b["index"]) for b in mt.dataloader("train")) == SUBSET


def test_translation_ddp_shares(mt):
    shares = []
    for rank in range(2):
        mt.trainer = SimpleNamespace(global_rank=rank, world_size=2, current_epoch=0)  # a Trainer in its first epoch
        try:
            shares.append([i for b in mt.train_dataloader() for i in b["index"].tolist()])
        finally:
            mt.trainer = None
    assert not set(shares[0]) & set(shares[1])
    assert len(shares[0]) + len(shares[1]) == len(mt.dataset("train"))


def test_translation_cached_restart_and_tokenizer_reuse(mt, mirror_root, tmp_path):
    again = TranslationDataModule("de", "en", data_dir=mt.hparams.data_dir, mirror_root=mirror_root,
                                  vocab_size=600, max_tokens=512, max_len=20, train_subset=SUBSET)
    again.setup()
    assert again.src_tokenizer == mt.src_tokenizer
    assert again.dataset("val").cache_files == mt.dataset("val").cache_files
    path = mt.src_tokenizer.save(tmp_path)
    reuse = TranslationDataModule("de", "en", data_dir=tmp_path / "c", mirror_root=mirror_root, tokenizer_path=path,
                                  train_subset=50, eval_splits=["val"])
    reuse.setup()
    assert reuse.src_tokenizer == mt.src_tokenizer and reuse.splits == ["train", "val"]


def test_translation_separate_vocab_and_distilled_files(mirror_root, tmp_path):
    src, tgt = tmp_path / "d.de", tmp_path / "d.en"
    src.write_text("ein Hund läuft .\nzwei Katzen schlafen\n" * 40)
    tgt.write_text("a dog runs .\ntwo cats sleep\n" * 40)
    dm = TranslationDataModule("de", "en", data_dir=tmp_path / "c", mirror_root=mirror_root, vocab_size=300,
                               joint_vocab=False, train_files={"src": str(src), "tgt": str(tgt)}, eval_splits=["val"])
    dm.setup()
    assert dm.src_tokenizer != dm.tgt_tokenizer
    assert dm.raw("train")[1] == ("zwei Katzen schlafen", "two cats sleep")
    batch = next(iter(dm.train_dataloader()))
    assert dm.tgt_tokenizer.decode(batch["tgt_out"][0].tolist()) == dm.raw("train")[batch["index"][0]][1]


def test_translation_czech_2017_rejected(mirror_root, tmp_path):
    with pytest.raises(ValueError, match="cs"):
        TranslationDataModule("en", "cs", data_dir=tmp_path, eval_splits=["val", "test_2017_flickr"])
    dm = TranslationDataModule("en", "cs", data_dir=tmp_path, mirror_root=mirror_root)
    assert dm.eval_splits == ["val", "test_2016_flickr"]


def _check_tagging_batch(batch, n_tags):
    b, t = batch["src"].shape
    assert batch["word_ids"].shape == (b, t) and batch["index"].shape == (b,)
    w = batch["tags"].shape[1]
    for row in range(b):
        n_words = int((batch["tags"][row] != -100).sum())
        wid = batch["word_ids"][row]
        assert int(wid.max()) + 1 == n_words <= w
        assert ((wid == -1) == ~batch["src_pad_mask"][row]).all()
    assert int(batch["tags"].max()) < n_tags


def test_tagging_gum(mirror_root, tmp_path):
    dm = TaggingDataModule("gum", "upos", data_dir=tmp_path, mirror_root=mirror_root, vocab_size=600,
                           train_subset=300, max_tokens=1024)
    dm.setup()
    assert dm.splits == ["train", "dev", "test"]
    assert len(dm.tag_vocab) == 17 and "NOUN" in dm.tag_vocab
    assert [len(dm.raw(s)) for s in dm.splits] == [300, 784, 890]
    for loader in (dm.train_dataloader(), dm.val_dataloader(), dm.test_dataloader("test")):
        batch = next(iter(loader))
        _check_tagging_batch(batch, len(dm.tag_vocab))
    # tags line up with the raw sentence
    batch = next(iter(dm.val_dataloader()))
    sent = dm.raw("dev")[int(batch["index"][0])]
    assert [dm.tag_vocab[i] for i in batch["tags"][0].tolist() if i != -100] == sent.upos
    # dev words unseen in the 300 training sentences still encode without <unk>
    assert all(dm.tokenizer.unk_id not in dm.tokenizer.encode_words(s.words)[0] for s in dm.raw("dev")[:50])


def test_tagging_conll2000_dev_carved_from_train(mirror_root, tmp_path):
    dm = TaggingDataModule("conll2000", "pos", data_dir=tmp_path, mirror_root=mirror_root, vocab_size=600,
                           tokenizer_model="word", dev_size=500, train_subset=1000)
    dm.setup()
    full = read_conll2000_train(tmp_path, mirror_root)
    assert [s.words for s in dm.raw("dev")] == [s.words for s in full[-500:]]
    assert dm.raw("train")[0].words == full[0].words
    assert len(dm.raw("train")) == 1000 and len(dm.raw("test")) == 2012
    assert "NN" in dm.tag_vocab
    _check_tagging_batch(next(iter(dm.val_dataloader())), len(dm.tag_vocab))


def test_tagging_gum_with_auxiliary_xpos(mirror_root, tmp_path):
    dm = TaggingDataModule("gum", "upos", data_dir=tmp_path, mirror_root=mirror_root, vocab_size=600,
                           train_subset=300, max_tokens=1024, aux_tagset="xpos")
    dm.setup()
    assert "NN" in dm.aux_tag_vocab and "NOUN" not in dm.aux_tag_vocab
    for loader in (dm.train_dataloader(), dm.val_dataloader()):
        batch = next(iter(loader))
        assert batch["aux_tags"].shape == batch["tags"].shape
        assert torch.equal(batch["aux_tags"].eq(-100), batch["tags"].eq(-100))
    batch = next(iter(dm.val_dataloader()))
    sent = dm.raw("dev")[int(batch["index"][0])]
    assert [dm.aux_tag_vocab[i] for i in batch["aux_tags"][0].tolist() if i != -100] == sent.xpos
    assert [dm.tag_vocab[i] for i in batch["tags"][0].tolist() if i != -100] == sent.upos


def test_tagging_gum_with_conll2000_as_auxiliary_corpus(mirror_root, tmp_path):
    dm = TaggingDataModule("gum", "upos", data_dir=tmp_path, mirror_root=mirror_root, vocab_size=600,
                           train_subset=300, max_tokens=4096, aux_tagset="xpos", aux_corpus="conll2000")
    dm.setup()
    wsj = read_conll2000_train(tmp_path, mirror_root)
    assert len(dm.raw("train")) == 300  # GUM's own sentences: what unseen-word accuracy counts against
    train = dm.dataset("train")
    assert len(train) + len(dm.filter_report["train"].dropped) == 300 + len(wsj)
    # every WSJ tag is in the auxiliary vocabulary, beside GUM's own XPOS tags
    # one auxiliary tag set: WSJ's bracket tags spelt as GUM's, every other tag kept
    assert "(" not in dm.aux_tag_vocab and {"-LRB-", "-RRB-", "$", "LS"} <= set(dm.aux_tag_vocab)
    assert {t for s in wsj for t in s.xpos} - {"(", ")"} <= set(dm.aux_tag_vocab)
    by_index = {int(i): k for k, i in enumerate(train["index"])}
    gum_row, wsj_row = train[by_index[0]], train[by_index[300]]
    assert [dm.tag_vocab[i] for i in gum_row["tags"]] == dm.raw("train")[0].upos
    assert wsj_row["tags"] == [-100] * len(wsj[0].words)  # no UPOS for WSJ: ignored by the loss
    assert [dm.aux_tag_vocab[i] for i in wsj_row["aux_tags"]] == wsj[0].xpos and "(" not in wsj[0].xpos
    batches = list(dm.train_dataloader())
    assert sum(int(b["aux_tags"].ne(-100).sum()) for b in batches) > sum(int(b["tags"].ne(-100).sum()) for b in batches)
    # dev and test stay GUM's
    assert len(dm.dataset("dev")) == 784


def test_tagging_auxiliary_corpus_with_converted_upos(mirror_root, tmp_path):
    kw = dict(data_dir=tmp_path, mirror_root=mirror_root, vocab_size=600, train_subset=300, max_tokens=4096,
              aux_tagset="xpos", aux_corpus="conll2000")
    dm = TaggingDataModule("gum", "upos", aux_corpus_upos=True, **kw)
    dm.setup()
    wsj = read_conll2000_train(tmp_path, mirror_root)
    convert = UposFromXpos(dm.raw("train"))
    train = dm.dataset("train")
    by_index = {int(i): k for k, i in enumerate(train["index"])}
    decided = ignored = 0
    for k in range(20):
        row, sent = train[by_index[300 + k]], wsj[k]
        expected = convert(sent.words, [{"(": "-LRB-", ")": "-RRB-"}.get(t, t) for t in sent.xpos])
        assert [None if i == -100 else dm.tag_vocab[i] for i in row["tags"]] == expected
        decided += sum(t is not None for t in expected)
        ignored += sum(t is None for t in expected)
    assert decided > 5 * ignored > 0  # most WSJ words now train the UPOS head; the undecided stay ignored
    # the GUM rows and the dev set are untouched, and the cache does not mix the two variants
    assert [dm.tag_vocab[i] for i in train[by_index[0]]["tags"]] == dm.raw("train")[0].upos
    plain = TaggingDataModule("gum", "upos", **kw)
    plain.setup()
    plain_rows = {int(i): k for k, i in enumerate(plain.dataset("train")["index"])}
    assert plain.dataset("train")[plain_rows[300]]["tags"] == [-100] * len(wsj[0].words)
    with pytest.raises(ValueError, match="aux_corpus_upos"):
        TaggingDataModule("gum", "upos", aux_corpus_upos=True)
    with pytest.raises(ValueError, match="aux_corpus_upos"):
        TaggingDataModule("gum", "xpos", aux_tagset="upos", aux_corpus_upos=True)


def test_tagging_extra_train_conllu_adds_sentences_with_their_tags(mirror_root, tmp_path):
    extra = tmp_path / "silver.conllu"
    first_block = ("1\tZorblax\t_\tPROPN\tNNP\t_\t_\t_\t_\t_\n"
                   "2\tsnorfed\t_\tVERB\t_\t_\t_\t_\t_\t_\n"
                   "3\t.\t_\tPUNCT\t.\t_\t_\t_\t_\t_\n\n")
    # 40 copies of the first sentence (frequent enough for the tokenizer to learn its words), then one
    extra.write_text(first_block * 40 + "1\tqwuxes\t_\t_\tNNS\t_\t_\t_\t_\t_\n\n", encoding="utf-8")
    kw = dict(data_dir=tmp_path / "cache", mirror_root=mirror_root, vocab_size=600, train_subset=200,
              max_tokens=4096, aux_tagset="xpos")
    dm = TaggingDataModule("gum", "upos", extra_train=[str(extra)], **kw)
    dm.setup()
    assert len(dm.raw("train")) == 200  # unseen-word accuracy still counts against GUM's words only
    assert "Zorblax" not in {w for s in dm.raw("train") for w in s.words}
    train = dm.dataset("train")
    by_index = {int(i): k for k, i in enumerate(train["index"])}
    assert len(train) + len(dm.filter_report["train"].dropped) == 241
    first, second = train[by_index[200]], train[by_index[240]]
    assert [dm.tag_vocab[i] for i in first["tags"]] == ["PROPN", "VERB", "PUNCT"]
    # "_" is no tag: ignored by the loss, and never part of a tag vocabulary
    assert [None if i == -100 else dm.aux_tag_vocab[i] for i in first["aux_tags"]] == ["NNP", None, "."]
    assert second["tags"] == [-100] and [dm.aux_tag_vocab[i] for i in second["aux_tags"]] == ["NNS"]
    assert "_" not in dm.tag_vocab and "_" not in dm.aux_tag_vocab
    # the tokenizer learnt from the extra words too: the invented word is one piece
    plain = TaggingDataModule("gum", "upos", **kw)
    plain.setup()
    assert len(dm.tokenizer.encode_words(["Zorblax"])[0]) < len(plain.tokenizer.encode_words(["Zorblax"])[0])
    assert len(dm.dataset("dev")) == 784
    with pytest.raises(FileNotFoundError, match="extra_train: file not found: .*missing.conllu"):
        TaggingDataModule("gum", "upos", extra_train=[str(tmp_path / "missing.conllu")])
    with pytest.raises(ValueError, match="chunk"):
        TaggingDataModule("conll2000", "chunk", extra_train=[str(extra)])


def test_length_filter_counts_and_logs(caplog):
    with caplog.at_level(logging.WARNING):
        r = length_filter_columns([(3, 4), (10, 2), (5, 5), (1, 11)], max_len=5, name="toy")
    assert r.kept.tolist() == [0, 2] and r.dropped.tolist() == [1, 3] and r.n_dropped == 2
    assert "dropped 2 of 4" in caplog.text
    assert length_filter_columns([1, 2, 3], max_len=3).n_dropped == 0


def test_tagging_bad_tagset():
    with pytest.raises(ValueError, match="tagset"):
        TaggingDataModule("conll2000", "upos")
    with pytest.raises(ValueError, match="aux_tagset"):
        TaggingDataModule("gum", "upos", aux_tagset="lemma")
    with pytest.raises(ValueError, match="same annotation"):
        TaggingDataModule("gum", "upos", aux_tagset="pos")
    for bad in (dict(dataset="gum", tagset="upos", aux_tagset=None), dict(dataset="conll2000", tagset="pos", aux_tagset="chunk"),
                dict(dataset="gum", tagset="xpos", aux_tagset="upos")):
        with pytest.raises(ValueError, match="aux_corpus"):
            TaggingDataModule(aux_corpus="conll2000", **bad)


def test_lightning_stays_out_of_core_modules():
    import subprocess
    import sys

    code = ("import sys, transformer.data, transformer.data.core.readers, transformer.data.core.batching, "
            "transformer.data.core.tokenizer, transformer.data.core.sources; assert 'lightning' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
    assert torch.is_tensor(torch.zeros(1))


def test_lightning_epoch_hook_reshuffles(mt):
    from lightning.fabric.utilities.data import _set_sampler_epoch

    loader = mt.train_dataloader()
    _set_sampler_epoch(loader, 0)
    first = [b.tolist() for b in (batch["index"] for batch in loader)]
    _set_sampler_epoch(loader, 1)
    second = [b.tolist() for b in (batch["index"] for batch in loader)]
    assert first != second and sorted(sum(first, [])) == sorted(sum(second, []))


def test_trainer_fit_runs_two_epochs(mt):
    import lightning as L

    class Probe(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(1, 1)
            self.first = []

        def training_step(self, batch, i):
            if i == 0:
                self.first.append(batch["index"].tolist())
            return self.lin(batch["src"][:, :1].float()).sum()

        def validation_step(self, batch, i):
            assert batch["tgt_out"].shape == batch["tgt_in"].shape

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    probe = Probe()
    trainer = L.Trainer(max_epochs=2, limit_train_batches=2, limit_val_batches=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(probe, mt)
    assert len(probe.first) == 2 and probe.first[0] != probe.first[1]
    mt.trainer = None


def test_a_training_pair_with_one_empty_side_is_left_out_with_a_warning(mirror_root, tmp_path, caplog):
    src, tgt = tmp_path / "d.de", tmp_path / "d.en"
    src.write_text("ein Hund läuft .\nzwei Katzen schlafen\n\n" * 20)
    tgt.write_text("a dog runs .\n\n\n" * 20)  # line 2 lost its translation; line 3 is empty on both sides
    dm = TranslationDataModule("de", "en", data_dir=tmp_path / "c", mirror_root=mirror_root, vocab_size=300,
                               train_files={"src": str(src), "tgt": str(tgt)}, eval_splits=["val"])
    with caplog.at_level("WARNING"):
        dm.setup()
    assert "20 pair(s) with one side empty left out of training (line 2, 5, 8" in caplog.text
    assert all(bool(s.strip()) == bool(t.strip()) for s, t in dm.raw("train"))
    assert len(dm.dataset("train")) == 40


def test_a_corrupted_tokenizer_cache_is_rebuilt_with_a_warning(mirror_root, tmp_path, caplog):
    def build():
        dm = TranslationDataModule("de", "en", data_dir=tmp_path, mirror_root=mirror_root, vocab_size=400,
                                   train_subset=200, eval_splits=["val"])
        dm.setup()
        return dm

    first = build()
    (cached,) = (tmp_path / "tokenizers").glob("*.json")
    cached.write_text(cached.read_text(encoding="utf-8")[:500], encoding="utf-8")  # cut short
    with caplog.at_level("WARNING"):
        again = build()
    assert f"cache file {cached} has sha256" in caplog.text and "rebuilding it" in caplog.text
    assert again.src_tokenizer == first.src_tokenizer


def test_a_training_loader_resumed_mid_epoch_hands_out_the_rest_of_that_epoch():
    from transformer.data.core.batching import TokenBudgetBatchSampler
    from transformer.data.core.datamodule import ResumableLoader

    lengths = [3, 5, 2, 8, 4, 4, 6, 1, 7, 3, 2, 5]

    def loader():
        sampler = TokenBudgetBatchSampler(lengths, max_tokens=10, shuffle=True, seed=3)
        return ResumableLoader(list(range(len(lengths))), batch_sampler=sampler, collate_fn=list)

    first = loader()
    first.batch_sampler.set_epoch(1)
    whole = list(first)
    first.batch_sampler.set_epoch(1)
    it = iter(first)
    seen = [next(it) for _ in range(3)]
    state = first.state_dict()
    assert state == {"epoch": 1, "batches": 3} and seen == whole[:3]

    resumed = loader()
    resumed.load_state_dict(state)
    resumed.batch_sampler.set_epoch(1)  # what Lightning does before iterating
    assert list(resumed) == whole[3:] and resumed.state_dict() == {"epoch": 1, "batches": len(whole)}
    resumed.batch_sampler.set_epoch(2)
    assert sorted(i for b in resumed for i in b) == list(range(len(lengths)))  # the next epoch is whole
    # a state saved after an epoch's last batch resumes at the next epoch's start
    again = loader()
    again.load_state_dict({"epoch": 1, "batches": len(whole)})
    assert again.batch_sampler.epoch == 2 and again.batch_sampler.first_batch == 0


def test_a_second_run_on_the_same_cache_waits_for_the_first_to_finish_building(mirror_root, tmp_path):
    """Two runs sharing a cache folder take turns: while one holds the folder's lock the other
    builds nothing, and afterwards it reuses what the first built."""
    import threading

    from transformer.data.core.cache import cache_lock

    def build():
        dm = TranslationDataModule("de", "en", data_dir=tmp_path, mirror_root=mirror_root, vocab_size=400,
                                   train_subset=200, eval_splits=["val"])
        dm.setup()
        done.append(dm)

    done: list = []
    with cache_lock(tmp_path):  # the first run, building
        second = threading.Thread(target=build)
        second.start()
        second.join(timeout=2.0)
        assert second.is_alive() and not (tmp_path / "tokenizers").exists() and not (tmp_path / "arrow").exists()
    second.join(timeout=120)
    assert not second.is_alive() and len(done) == 1
    built = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.json")}
    build()  # a later run finds every file complete and builds nothing again
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.json")} == built and len(built) == 1
