"""Fill-mask on raw text: a sentence with ``[MASK]`` is read as the model was trained on it (the
filler brings its own space, the text after a mask continues the sentence), a tiny model
trained on a toy corpus ranks the right word first, batches keep input order, and a line
without a mask is an error naming it."""

from __future__ import annotations

import random

import pytest
import torch

from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.inference.fill import MaskFiller
from transformer.tasks.mlm import MaskedLMTask

MODEL = {"_target_": "transformer.models.mlm.MaskedLanguageModel", "d_model": 48, "n_heads": 2, "n_layers": 2,
         "d_ff": 96, "dropout": 0.0, "max_len": 32}
# The object is fixed by the verb: a model that reads the sentence knows which one is hidden.
VERBS = {"sat on": "mat", "climbed": "tree", "drank": "milk", "read": "book"}
SUBJECTS = ["the cat", "the dog", "my friend", "a child", "the teacher"]


def corpus(n: int = 200) -> list[str]:
    rng = random.Random(0)
    rows = []
    for _ in range(n):
        verb = rng.choice(list(VERBS))
        rows.append(f"{rng.choice(SUBJECTS)} {verb} the {VERBS[verb]} .")
    return rows


@pytest.fixture(scope="module")
def trained() -> MaskedLMTask:
    torch.manual_seed(0)
    texts = corpus()
    tok = SubwordTokenizer.train(texts, 400, prefix_space=True)
    assert all(tok.token_to_id("\u0120" + word) is not None for word in VERBS.values())  # a filler is one piece
    task = MaskedLMTask(model=dict(MODEL), piece_vocab_size=tok.vocab_size, pad_id=0, data={"name": "toy"},
                        tokenizer=tok.to_str(), mask_rate=0.3)
    src = torch.nn.utils.rnn.pad_sequence([torch.tensor(tok.encode(t)) for t in texts], batch_first=True)
    optimizer = torch.optim.AdamW(task.parameters(), lr=3e-3)
    for step in range(200):
        loss, _ = task._step({"src": src[torch.randint(0, len(texts), (32,))], "key": step}, epoch=0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return task.eval()


def test_the_right_word_is_ranked_first(trained):
    filler = trained.filler()
    lines = ["the cat sat on the [MASK] .", "my friend drank the [MASK] .", "the dog climbed the <mask> .",
             "a child read the [MASK] ."]
    results = filler.fill(lines, top_k=3)
    assert [r[0][0].token_str for r in results] == ["mat", "milk", "tree", "book"]
    for r in results:
        scores = [f.score for f in r[0]]
        assert scores == sorted(scores, reverse=True) and 0 < sum(scores) <= 1 and scores[0] > 0.5
    assert results[0][0][0].sequence == "the cat sat on the mat ."
    assert results[2][0][0].sequence == "the dog climbed the tree ."


def test_several_masks_a_line_and_input_order_in_any_batching(trained):
    lines = ["the cat [MASK] the [MASK] .", "my friend drank the [MASK] ."] * 5
    one_batch = trained.filler(max_tokens=4096).fill(lines, top_k=2)
    small = trained.filler(max_tokens=12).fill(lines, top_k=2)
    assert [[[f.token for f in m] for m in r] for r in one_batch] == [[[f.token for f in m] for m in r] for r in small]
    assert [len(r) for r in one_batch] == [2, 1] * 5
    first = one_batch[0]
    assert first[1][0].sequence.startswith("the cat [MASK] the ")  # the other mask is left as it was


def test_a_sentence_is_read_as_in_training(trained):
    tok, filler = trained.tokenizer, trained.filler()
    ids, positions = filler.encode("the cat sat on the [MASK] .")
    assert positions == [5] and ids[:5] == tok.encode("the cat sat on the") and ids[6:] == tok.encode(" .")
    # the whole sentence with the filler in place reads the same pieces
    assert ids[:5] + [tok.token_to_id("\u0120mat")] + ids[6:] == tok.encode("the cat sat on the mat .")
    # text written against a mask continues the word: no space is added before it
    ids, positions = filler.encode("[MASK]s sat .")
    assert positions == [0] and tok.decode(ids[1:2]) == "s"


def test_a_line_without_a_mask_or_with_one_past_the_model_is_an_error(trained):
    with pytest.raises(ValueError, match="line 2: no \\[MASK\\] or <mask> to fill"):
        trained.filler().fill(["the [MASK] sat .", "no mask here"])
    filler = MaskFiller(trained.model, trained.tokenizer, max_len=8)
    with pytest.raises(ValueError, match="line 1: a mask at piece 13, past the 8 pieces"):
        filler.fill(["the cat sat on the mat the cat sat on the mat [MASK]"])
    assert filler.fill(["the [MASK] sat on the mat the cat sat on the mat ."])[0][0]
    assert filler.truncated == 1
