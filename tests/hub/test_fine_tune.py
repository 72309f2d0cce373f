"""Fine-tuning from a BERT-family folder: ``transformer-train experiment=classify|ud_upos
init_from=hf:<folder>`` starts the encoder from the family's tensors with its switches, reads the
data with the family's tokenizer and framing (the ids ``transformers``' own tokenizer gives), and
writes an ordinary checkpoint that classifies and tags from the command line with the folder gone;
a shape typed against the folder's is one ``error: init_from:`` line. Offline: the folders are
written here (``folders.py``)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import datasets
import pytest
import torch
from cli.hydra_helpers import main_status

from folders import WORDS, write_folder
from transformer.cli import classify as classify_cli
from transformer.cli import tag as tag_cli
from transformer.cli import train as train_cli
from transformer.hub import mlm_checkpoint
from transformer.hub.families import FAMILIES
from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.tasks.checkpoint import load_task, read_checkpoint
from transformer.tasks.mlm import MaskedLMTask, electra_corrupt

transformers = pytest.importorskip("transformers")

MLM = {"_target_": "transformer.models.mlm.MaskedLanguageModel", "d_model": 16, "n_heads": 2, "n_layers": 1,
       "d_ff": 32, "max_len": 64}
QUIET = ["logger.tensorboard=null", "callbacks.progress_bar=null"]
GOOD, BAD = ["great", "good", "fine"], ["bad"]
FILLER = [w for w in WORDS if w not in GOOD + BAD][:40]


def texts(n: int, seed: int) -> list[tuple[str, str]]:
    """``(sentence, label)``: positive iff it holds a GOOD word; accents, CJK and emoji included."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        label = ("neg", "pos")[i % 2]
        words = rng.sample(FILLER, 4) + [rng.choice(GOOD if label == "pos" else BAD)]
        rng.shuffle(words)
        out.append((" ".join(words), label))
    return out


def conllu(sentences: list[str]) -> str:
    out = []
    for i, line in enumerate(sentences):
        rows = [f"{j}\t{w}\t{w}\t{'ADJ' if w in GOOD + BAD else 'X'}\t_\t_\t0\tdep\t_\t_"
                for j, w in enumerate(line.split(), 1)]
        out += [f"# sent_id = s{i}", *rows, ""]
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("finetune")
    rows = texts(60, 0)
    (root / "labels.tsv").write_text("".join(f"{t}\t{label}\n" for t, label in rows), encoding="utf-8")
    (root / "toy.conllu").write_text(conllu([t for t, _ in rows]), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return {family: write_folder(family, root / family) for family in ("bert", "roberta", "distilbert")}


def fine_tune_args(kind: str, corpus: Path, folder: Path, run: Path) -> list[str]:
    common = ["debug=fast", "task.lr=0.0", f"init_from=hf:{folder}", f"data.data_dir={run.parent / 'cache'}",
              "test_splits=[]", "model.dropout=0.0", *QUIET, f"hydra.run.dir={run}"]
    if kind == "classifier":
        data = corpus / "labels.tsv"
        return ["experiment=classify", f"data.train={data}", f"data.dev={data}", *common]
    data = corpus / "toy.conllu"
    return ["experiment=ud_upos", f"data.train={data}", f"data.dev={data}", "model.window=null",
            "model.pooling=first", "model.char_channels=0", *common]


# Two tensors of the family's own model, by its own names: layer 1's query projection and layer 0's
# LayerNorm after the feed-forward block (DistilBERT, which has no layer_norm_eps, uses 1e-12).
SPOT_CHECKS = {
    "bert": lambda base: (base.encoder.layer[1].attention.self.query.weight,
                          base.encoder.layer[0].output.LayerNorm.bias),
    "roberta": lambda base: (base.encoder.layer[1].attention.self.query.weight,
                             base.encoder.layer[0].output.LayerNorm.bias),
    "distilbert": lambda base: (base.transformer.layer[1].attention.q_lin.weight,
                                base.transformer.layer[0].output_layer_norm.bias),
}


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert"])
@pytest.mark.parametrize("kind", ["classifier", "tagger"])
def test_fine_tuning_starts_from_the_family_and_needs_nothing_of_it(kind, family, folders, corpus, tmp_path,
                                                                   capsys, monkeypatch):
    folder = tmp_path / family
    shutil.copytree(folders[family], folder)
    run = tmp_path / "run"
    code, err = main_status(train_cli, fine_tune_args(kind, corpus, folder, run), capsys, monkeypatch)
    assert code == 0, err
    tuned = read_checkpoint(run / "checkpoints" / "last.ckpt")
    # the encoder is the family's, tensor by tensor (learning rate 0), with its switches
    hf = transformers.AutoModelForMaskedLM.from_pretrained(folder)
    base = getattr(hf, FAMILIES[family].prefix.rstrip("."))
    state = tuned["state_dict"]
    assert torch.equal(state["model.encoder.embedding.weight"], base.embeddings.word_embeddings.weight)
    assert torch.equal(state["model.encoder.positional.embedding.weight"], base.embeddings.position_embeddings.weight)
    query, ffn_norm = SPOT_CHECKS[family](base)
    assert torch.equal(state["model.encoder.layers.1.self_attn.w_q.weight"], query)
    assert torch.equal(state["model.encoder.layers.0.norm_2.bias"], ffn_norm)
    source = mlm_checkpoint(f"hf:{folder}")["state_dict"]
    encoder = [k for k in state if k.startswith("model.encoder.")]
    assert encoder and all(torch.equal(state[k], source[k]) for k in encoder)
    model = tuned["hyper_parameters"]["model"]
    assert (model["d_model"], model["n_layers"], model["norm_eps"], model["embedding_norm"],
            model["scale_embeddings"]) == (32, 2, getattr(hf.config, "layer_norm_eps", 1e-12), True, False)
    # the data were read as the family reads them: the ids of transformers' own tokenizer
    hf_tok = transformers.AutoTokenizer.from_pretrained(folder)
    task = load_task(str(run / "checkpoints" / "last.ckpt"))
    assert task.tokenizer.to_str() == mlm_checkpoint(f"hf:{folder}")["tokenizers"]["src"]
    lines = [t for t, _ in texts(60, 0)]
    if kind == "classifier":
        theirs = hf_tok(lines)["input_ids"]
    else:
        theirs = hf_tok([line.split() for line in lines], is_split_into_words=True)["input_ids"]
    assert theirs[0][0] == hf_tok.cls_token_id and theirs[0][-1] == hf_tok.sep_token_id
    cached = sorted((tmp_path / "cache" / "arrow").glob("*.arrow"))
    assert cached
    for path in cached:  # what training read, row by row
        rows = datasets.Dataset.from_file(str(path))
        assert [theirs[i] for i in rows["index"]] == rows["src"]
    # the fine-tuned checkpoint is all that classifying and tagging need
    shutil.rmtree(folder)
    monkeypatch.chdir(tmp_path)
    cli = classify_cli if kind == "classifier" else tag_cli
    code, err = main_status(cli, [f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}", "output=out.txt"], capsys,
                            monkeypatch, stdin=f"{lines[0]}\n{lines[1]}\n".encode())
    assert code == 0, err
    out = (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()
    assert len(out) == 2 and all(out)
    if kind == "tagger":
        assert [len(line.split()) for line in out] == [len(lines[0].split()), len(lines[1].split())]


def test_a_shape_typed_against_the_folder_is_one_line(folders, corpus, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    args = fine_tune_args("classifier", corpus, folders["bert"], run) + ["model.d_model=64"]
    code, err = main_status(train_cli, args, capsys, monkeypatch)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("error: init_from: hf:") and "d_model=32, but model.d_model=64" in lines[0], lines[0]
    assert not run.exists()


@pytest.mark.parametrize("kind", ["classifier", "tagger"])
@pytest.mark.parametrize("long_split", ["train", "dev"])
def test_a_row_past_the_position_table_is_cut_and_named(kind, long_split, folders, corpus, tmp_path, capsys,
                                                        monkeypatch):
    """The folder's learned position table holds 64 pieces; a row longer (in training or in
    validation) is cut to them, named in a warning, instead of failing once training has begun."""
    rows = texts(20, 1)
    long = (" ".join(FILLER[:30] * 4), "pos")  # over 120 pieces, under data.max_len=256
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "dev"):
        split_rows = rows + [long] if split == long_split else rows
        (data / f"{split}.tsv").write_text("".join(f"{t}\t{label}\n" for t, label in split_rows), encoding="utf-8")
        (data / f"{split}.conllu").write_text(conllu([t for t, _ in split_rows]), encoding="utf-8")
    run = tmp_path / "run"
    args = fine_tune_args(kind, corpus, folders["bert"], run)
    ext = "tsv" if kind == "classifier" else "conllu"
    args = [a for a in args if not a.startswith(("data.train=", "data.dev="))]
    args += [f"data.train={data}/train.{ext}", f"data.dev={data}/dev.{ext}"]
    code, err = main_status(train_cli, args, capsys, monkeypatch)
    assert code == 0, err
    log = (run / "train.log").read_text(encoding="utf-8")
    warned = [line for line in log.splitlines() if "longer than the 64 pieces the model reads" in line]
    assert len(warned) == 1 and "[WARNING]" in warned[0], log
    assert f"-{long_split}: 1 of 21 rows" in warned[0] and "cut to them (row 21)" in warned[0], warned
    assert (run / "checkpoints" / "last.ckpt").is_file()


def moved_specials(folder: Path) -> str:
    """The folder's ``tokenizer.json`` with its five special tokens moved from ids 0..4 to 100..104
    (ordinary pieces take their places), as BERT's own vocabulary has ``[CLS]`` at 101."""
    tok = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    swap = {**{i: 100 + i for i in range(5)}, **{100 + i: i for i in range(5)}}
    vocab = tok["model"]["vocab"]
    tok["model"]["vocab"] = {piece: swap.get(i, i) for piece, i in vocab.items()}
    for added in tok["added_tokens"]:
        added["id"] = swap.get(added["id"], added["id"])
    post = tok["post_processor"]
    for entry in (post.get("special_tokens") or {}).values():
        entry["ids"] = [swap.get(i, i) for i in entry["ids"]]
    for key in ("sep", "cls"):
        if key in post:
            post[key] = [post[key][0], swap.get(post[key][1], post[key][1])]
    return json.dumps(tok)


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_masking_reads_the_familys_special_ids(family, folders):
    """Masked-LM training on a family's tokenizer: its framing, padding and other special tokens are
    never chosen nor drawn as replacements, and the mask is its own ``[MASK]``/``<mask>``."""
    text = moved_specials(folders[family])
    tok = SubwordTokenizer.from_str(text)
    assert min(tok.special_ids) >= 100 and tok.frame([7])[0] in tok.special_ids
    task = MaskedLMTask(model=dict(MLM), piece_vocab_size=tok.vocab_size, pad_id=tok.pad_id, data={"name": "toy"},
                        tokenizer=text, mask_rate=0.9, mask_share=0.5, random_share=0.5)
    rows = [tok.frame(ids) for ids in tok.encode_batch([t for t, _ in texts(64, 3)])]
    longest = max(map(len, rows))
    src = torch.tensor([r + [tok.pad_id] * (longest - len(r)) for r in rows])  # (B, T)
    inputs, targets = task.mask(src, torch.Generator().manual_seed(0))
    chosen = targets.ne(-100)
    specials = torch.tensor(sorted(tok.special_ids))
    assert chosen.any() and not (chosen & torch.isin(src, specials)).any()
    assert inputs[chosen].eq(tok.mask_id).any() and tok.mask_id >= 100
    replaced = inputs[chosen & inputs.ne(src) & inputs.ne(tok.mask_id)]
    assert replaced.numel() and not torch.isin(replaced, specials).any()
    # ELECTRA's proposals are never special either, however likely the generator makes them
    logits = torch.zeros(int(chosen.sum()), tok.vocab_size)
    logits[:, specials] = 50.0
    corrupted = electra_corrupt(src, chosen, logits, torch.Generator().manual_seed(0), special_ids=specials)
    assert not torch.isin(corrupted[chosen], specials).any()
