"""The data half of training's validation step (``check_data_config``, ``data/core/datamodule.py``) and the readers'
own guards: a column map that misses a language, columns that are no columns, two sources for
one split, a pair of one language, no validation split, a hub dataset that cannot be there;
a byte-order mark is no text; a training subset still reads its files to the end."""

from __future__ import annotations

import gzip
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from transformer.data.core.datamodule import check_data_config, plain
from transformer.data.core.readers import DataFormatError, check_hub, iter_hub_rows, iter_lines, iter_rows, read_conllu
from transformer.data.parallel.corpus import ParallelCorpus, check_columns, make_corpus
from transformer.data.tagged.corpus import read_tagged_splits

PARALLEL = "transformer.data.parallel.datamodule.TranslationDataModule"
CLASSIFICATION = "transformer.data.labelled.datamodule.ClassificationDataModule"
BOM = "\ufeff"
CONLLU = ("# sent_id = a1\n# text = The dog\n1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n"
          "2\tdog\tdog\tNOUN\tNN\t_\t0\troot\t_\t_\n\n"
          "# sent_id = a2\n1\tA\ta\tDET\tDT\t_\t2\tdet\t_\t_\n2\tcat\tcat\tNOUN\tNN\t_\t0\troot\t_\t_\n\n")


def parallel(**data) -> OmegaConf:
    """A translation ``data`` node as a composed config holds it."""
    return OmegaConf.create({"_target_": PARALLEL, "corpus_name": "parallel", "src_lang": None, "tgt_lang": None,
                             "train": None, "valid": None, "test": None, "tests": {}, "valid_name": "valid",
                             "format": None, "columns": None, "header": False, "holdout": None, "hub": None,
                             "train_files": None, "eval_splits": None, **data})


def classification(**data) -> OmegaConf:
    return OmegaConf.create({"_target_": CLASSIFICATION, "train": None, "dev": None, "test": None,
                             "file_format": None, "text_column": 0, "label_column": 1, "header": False,
                             "holdout": None, **data})


@pytest.fixture
def tsv(tmp_path) -> Path:
    path = tmp_path / "pairs.tsv"
    path.write_text("Hi.\t嗨。\tcc\nRun!\t跑！\tcc\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------ column maps
@pytest.mark.parametrize("columns", [{"en": 0, "cn": 1}, {"zh": 1}, {"zh": 0, "src": 1}, {"en": 0, "zh": 1, "fr": 2}])
def test_a_column_map_must_name_each_language_of_the_pair_once(columns, tsv):
    with pytest.raises(ValueError, match=r"^data\.columns=\{.*\} names .*, but the pair is zh-en: name each of zh "
                                         r"and en \(or src and tgt\) once$") as err:
        check_data_config(parallel(src_lang="zh", tgt_lang="en", train=str(tsv), valid=str(tsv), format="tsv",
                                   columns=columns))
    assert ", ".join(columns) in str(err.value)
    # the data module refuses it too: before, {en: 0, cn: 1} read English on both sides
    with pytest.raises(ValueError, match="but the pair is zh-en"):
        make_corpus("zh", "en", {"train": str(tsv)}, format="tsv", columns=columns)


@pytest.mark.parametrize("columns, message", [
    ({"en": 0, "zh": 0}, r"en and zh both read column 0"),
    ({"src": "1", "tgt": 1}, r"src and tgt both read column 1"),
    ({"en": -1, "zh": 1}, r"data\.columns\.en=-1: expected a 0-based column index"),
    ({"en": 0.5, "zh": 1}, r"data\.columns\.en=0\.5"),
    ({"en": True, "zh": 1}, r"data\.columns\.en=True"),
    ([0, 1], r"data\.columns=\[0, 1\]: expected a map"),
])
def test_two_languages_never_read_one_column(columns, message):
    with pytest.raises(ValueError, match=message):
        check_columns(columns, "en", "zh")


def test_a_map_by_language_or_side_reads_each_side(tsv):
    for columns in ({"en": 0, "zh": 1}, {"src": 0, "tgt": 1}, {"zh": 1, "src": 0}):
        corpus = make_corpus("en", "zh", {"train": str(tsv)}, format="tsv", columns=columns)
        assert list(ParallelCorpus(corpus).stream("train")) == [("Hi.", "嗨。"), ("Run!", "跑！")]
    check_columns({"src": "translation.{lang}", "tgt": "translation.{lang}"}, "en", "zh")  # two keys once filled
    check_data_config(parallel(src_lang="zh", tgt_lang="en", train=str(tsv), valid=str(tsv), format="tsv",
                               columns={"en": 0, "zh": 1}))


def test_a_column_the_file_lacks_names_the_file_and_line_before_training(tsv):
    with pytest.raises(DataFormatError, match=r"pairs\.tsv:1: expected at least 6 columns, found 3"):
        check_data_config(parallel(src_lang="en", tgt_lang="zh", train=str(tsv), valid=str(tsv), format="tsv",
                                   columns={"en": 0, "zh": 5}))


# ------------------------------------------------------------------ classification columns
@pytest.mark.parametrize("key, value, message", [
    ("label_column", -5, r"data\.label_column=-5: expected a 0-based column index"),
    ("text_column", -1, r"data\.text_column=-1"),
    ("label_column", 0, r"data\.text_column=0 and data\.label_column=0: one column for both"),
    ("file_format", "text", r"data\.file_format='text'"),
])
def test_classification_columns_are_checked_before_any_file_is_read(tsv, key, value, message):
    with pytest.raises(ValueError, match=message):
        check_data_config(classification(train=str(tsv), dev=str(tsv), **{key: value}))


def test_a_label_column_past_the_row_names_the_file_and_line(tsv, tmp_path):
    with pytest.raises(DataFormatError, match=r"pairs\.tsv:1: expected at least 6 columns, found 3"):
        check_data_config(classification(train=str(tsv), dev=str(tsv), label_column=5))
    # the reader itself never reads a negative index from the row's end (an IndexError before)
    with pytest.raises(ValueError, match="column -5: a column index is 0-based and not negative"):
        list(iter_rows(tsv, (0, -5), "tsv"))


# ------------------------------------------------------------------ splits and languages
def test_one_split_from_two_sources_is_refused(tsv):
    with pytest.raises(ValueError, match=r"^data\.holdout\.dev and data\.dev=.*pairs\.tsv: two sources for the dev "
                                         r"split"):
        check_data_config(classification(train=str(tsv), dev=str(tsv), holdout={"dev": 0.1}))
    with pytest.raises(ValueError, match=r"^data\.holdout\.valid and data\.valid=.*: two sources for the valid split"):
        check_data_config(parallel(src_lang="en", tgt_lang="zh", train=str(tsv), valid=str(tsv),
                                   holdout={"valid": 1}))
    with pytest.raises(ValueError, match=r"data\.holdout\.test and data\.test="):
        check_data_config(parallel(src_lang="en", tgt_lang="zh", train=str(tsv), test=str(tsv),
                                   holdout={"valid": 1, "test": 1}))
    with pytest.raises(ValueError, match=r"data\.holdout\.train: "):
        check_data_config(classification(train=str(tsv), holdout={"train": 0.5, "dev": 0.1}))
    with pytest.raises(ValueError, match=r"data\.holdout\.dev=1\.5: expected a row count"):
        check_data_config(classification(train=str(tsv), holdout={"dev": 1.5}))


def test_a_pair_of_one_language_is_refused():
    with pytest.raises(ValueError, match=r"^data\.src_lang=en and data\.tgt_lang=en: the same language twice"):
        check_data_config(parallel(src_lang="en", tgt_lang="en"))


def test_training_needs_a_validation_split(tsv):
    with pytest.raises(ValueError, match=r"^data\.valid: training needs a validation split; set data\.valid=.*"
                                         r"data\.holdout=\{valid: 1000\}"):
        check_data_config(parallel(src_lang="en", tgt_lang="zh", train=str(tsv), format="tsv"))
    with pytest.raises(ValueError, match=r"^data\.dev: training needs a validation split; set data\.dev=<file>"):
        check_data_config(classification(train=str(tsv)))
    with pytest.raises(ValueError, match=r"data\.eval_splits=\['test'\]: leaves out the validation split 'valid'"):
        check_data_config(parallel(src_lang="en", tgt_lang="zh", train=str(tsv), valid=str(tsv), test=str(tsv),
                                   eval_splits=["test"]))
    # a file or a held-out share is a validation split; a preset without files waits for them
    check_data_config(parallel(src_lang="en", tgt_lang="zh", train=str(tsv), format="tsv", holdout={"valid": 1}))
    check_data_config(classification(train=str(tsv), holdout={"dev": 0.5}))
    check_data_config(parallel())
    check_data_config(classification())
    check_data_config(parallel(corpus_name="multi30k", src_lang="de", tgt_lang="en"))  # the preset's own val


def test_values_that_resolve_only_under_hydra_are_kept_as_written(tsv):
    node = parallel(src_lang="en", tgt_lang="en", data_dir="${hydra:runtime.output_dir}/cache")
    assert plain(node)["data_dir"] == "${hydra:runtime.output_dir}/cache"
    with pytest.raises(ValueError, match="the same language twice"):  # the rest is still checked
        check_data_config(node)


# ------------------------------------------------------------------ hub datasets
def test_offline_a_hub_name_without_a_cached_copy_is_refused_at_once(monkeypatch, tmp_path):
    import datasets.config
    from huggingface_hub import constants

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_DATASETS_OFFLINE")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(ValueError, match=r"^data\.hub\.name=nonexistent/xyz: not a local folder, and HF_HUB_OFFLINE=1 "
                                         r"keeps the hub offline"):
        check_data_config(parallel(src_lang="ro", tgt_lang="en", train="train", valid="validation",
                                   hub={"name": "nonexistent/xyz", "config": None}))
    assert time.monotonic() - start < 5
    (tmp_path / "datasets" / "nonexistent___xyz").mkdir(parents=True)  # downloaded before: readable offline
    check_hub({"name": "nonexistent/xyz"})
    monkeypatch.delenv("HF_HUB_OFFLINE")
    check_hub({"name": "another/one"})  # online: only loading can tell
    with pytest.raises(ValueError, match=r"data\.hub\.name: required"):
        check_hub({"name": "???", "config": None})


def test_a_folder_that_is_not_a_dataset_is_one_error(tmp_path, monkeypatch):
    import datasets.config

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "README.md").write_text("not data\n")
    (folder / ".hidden").mkdir()
    (folder / ".hidden" / "x.json").write_text("{}\n")
    with pytest.raises(ValueError, match=r"data\.hub\.name=.*notes: a folder, but not a dataset"):
        check_hub({"name": str(folder)})
    # files datasets cannot parse: its DatasetGenerationError becomes one error naming the key
    (folder / "train.json").write_text("{not json\n")
    check_hub({"name": str(folder)})
    columns = ("translation.en", "translation.zh")
    with pytest.raises(ValueError, match=r"^data\.hub\.name=.*notes: cannot load it \(.*\)$") as err:
        list(iter_hub_rows({"name": str(folder)}, "train", columns))
    assert "\n" not in str(err.value)
    # offline, a name that is not there fails at once as a ValueError, not a ConnectionError
    with pytest.raises(ValueError, match=r"data\.hub\.name=nonexistent/xyz: cannot load it \(ConnectionError"):
        list(iter_hub_rows({"name": "nonexistent/xyz"}, "train", columns))


# ------------------------------------------------------------------ byte-order marks
def test_a_conllu_file_with_a_byte_order_mark_reads_like_one_without(tmp_path):
    plain, marked = tmp_path / "plain.conllu", tmp_path / "marked.conllu"
    plain.write_text(CONLLU, encoding="utf-8")
    marked.write_text(BOM + CONLLU, encoding="utf-8")
    assert read_conllu(marked) == read_conllu(plain)
    assert read_conllu(marked)[0].sent_id == "a1"
    files = {"name": "bom", "format": "conllu", "files": {"train": str(marked), "dev": str(marked), "test": None}}
    assert read_tagged_splits(files, ["train", "dev"])["train"][1].words == ["A", "cat"]


def test_tag_input_with_a_byte_order_mark(tmp_path):
    from transformer.inference.tag_lines import tag_lines

    class Tagger:
        tagset = "upos"

        def tag_fields(self, sentences):
            return {"upos": [["X"] * len(s) for s in sentences]}

    lines = (BOM + CONLLU).splitlines()
    out = tag_lines(Tagger(), lines)
    assert out[0] == "# sent_id = a1" and len(out) == len(lines)
    assert out[2].split("\t")[3] == "X"


# ------------------------------------------------------------------ subsets read to the end
def _lines(n: int, word: str) -> str:
    return "".join(f"{word} {i}\n" for i in range(n))


def _module(tmp_path, train, **kwargs):
    from transformer.data.parallel.datamodule import TranslationDataModule

    return TranslationDataModule("en", "de", data_dir=tmp_path / "cache", corpus_name="toy", train=train,
                                 valid=train, train_subset=4, vocab_size=60, tokenizer_model="word", **kwargs)


def test_a_subset_still_checks_the_whole_parallel_files(tmp_path):
    (tmp_path / "ok.en").write_text(_lines(50, "dog"), encoding="utf-8")
    (tmp_path / "ok.de").write_text(_lines(50, "hund"), encoding="utf-8")
    dm = _module(tmp_path, str(tmp_path / "ok"), eval_splits=[])
    dm.setup()
    assert len(dm.raw("train")) == 4
    (tmp_path / "short.en").write_text(_lines(50, "dog"), encoding="utf-8")
    (tmp_path / "short.de").write_text(_lines(49, "hund"), encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"short\.en:50: parallel files differ in length: .*short\.de ends at "
                                              r"line 49"):
        _module(tmp_path, str(tmp_path / "short"), eval_splits=[]).setup()


def test_a_subset_still_decompresses_a_gz_to_its_end(tmp_path):
    (tmp_path / "cut.en").write_text(_lines(5000, "dog"), encoding="utf-8")
    whole = gzip.compress(_lines(5000, "hund").encode("utf-8"))
    (tmp_path / "cut.de.gz").write_bytes(whole[: len(whole) - 40])  # a download cut short
    train = {"src": str(tmp_path / "cut.en"), "tgt": str(tmp_path / "cut.de.gz")}
    with pytest.raises(DataFormatError, match=r"cut\.de\.gz:\d+: cannot be read"):
        _module(tmp_path, train, eval_splits=[]).setup()
    flipped = bytearray(whole)
    flipped[100] ^= 0xFF  # damaged inside: zlib's own error, named like the others
    (tmp_path / "bad.de.gz").write_bytes(bytes(flipped))
    with pytest.raises(DataFormatError, match=r"bad\.de\.gz:\d+: cannot be read"):
        list(iter_lines(tmp_path / "bad.de.gz"))


TARGETS = {"TranslationDataModule": PARALLEL, "ClassificationDataModule": CLASSIFICATION,
           "TaggingDataModule": "transformer.data.tagged.datamodule.TaggingDataModule"}


@pytest.mark.parametrize("target, model, size, ok", [
    ("TranslationDataModule", "bpe", 260, False), ("TaggingDataModule", "bpe", 261, True),
    ("TaggingDataModule", "unigram", 100, False), ("ClassificationDataModule", "word", 5, True),
    ("ClassificationDataModule", "word", 4, False), ("TaggingDataModule", "sentencepiece", 8000, False),
])
def test_a_vocabulary_no_tokenizer_can_have_is_refused_before_any_data(target, model, size, ok):
    """Every data module, tagging too: the size is judged from the config, not after preparing."""
    cfg = OmegaConf.create({"_target_": TARGETS[target], "tokenizer_model": model,
                            "vocab_size": size})
    if ok:
        check_data_config(cfg)
    else:
        with pytest.raises(ValueError, match=r"data\.(vocab_size|tokenizer_model)="):
            check_data_config(cfg)
