"""BERT masking and the masked-LM task: the masking's statistics on a large random batch (15 %
chosen, 80/10/10, never a special token), a new draw each epoch and the same draw for the same
seed, epoch and batch, whole words kept together, and a tiny model's loss falling on a toy
corpus."""

from __future__ import annotations

import random

import pytest
import torch

from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.data.text.datamodule import TextCollator
from transformer.tasks.mlm import IGNORE_INDEX, N_SPECIAL, MaskedLMTask, bert_mask, masking_seed, word_ids_of

V, MASK = 1000, 4
TINY_MLM = {"_target_": "transformer.models.mlm.MaskedLanguageModel", "d_model": 32, "n_heads": 2, "n_layers": 1,
            "d_ff": 64, "dropout": 0.0, "max_len": 64}


def random_batch(b: int = 512, t: int = 128, seed: int = 0) -> torch.Tensor:
    """``(B, T)`` ordinary pieces with rows padded to random lengths and special tokens sprinkled in."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(N_SPECIAL, V, (b, t), generator=g)
    lengths = torch.randint(t // 4, t + 1, (b,), generator=g)
    src[torch.arange(t)[None, :] >= lengths[:, None]] = 0  # padding
    specials = torch.rand(b, t, generator=g) < 0.05
    src[specials & src.ne(0)] = torch.randint(1, N_SPECIAL, (int((specials & src.ne(0)).sum()),), generator=g)
    return src


def draw(src, seed=0, epoch=0, key=0, word_start=None, **kwargs):
    g = torch.Generator().manual_seed(masking_seed(seed, epoch, key))
    return bert_mask(src, g, MASK, V, word_start=word_start, **kwargs)


def test_a_sixth_or_so_is_chosen_and_split_80_10_10():
    src = random_batch()
    inputs, targets = draw(src)
    eligible = src.ge(N_SPECIAL)
    chosen = targets.ne(IGNORE_INDEX)
    assert torch.equal(targets[chosen], src[chosen])  # the targets are the original pieces
    rate = chosen.sum().item() / eligible.sum().item()
    assert rate == pytest.approx(0.15, abs=0.005)
    n = chosen.sum().item()
    masked = (inputs.eq(MASK) & chosen).sum().item() / n
    kept = (inputs.eq(src) & chosen).sum().item() / n
    replaced = (inputs.ne(MASK) & inputs.ne(src) & chosen).sum().item() / n
    assert masked == pytest.approx(0.8, abs=0.01)
    # a random piece equals the original one time in V: "kept" gains about 0.1 / V
    assert replaced == pytest.approx(0.1, abs=0.01) and kept == pytest.approx(0.1, abs=0.01)
    assert torch.equal(inputs[~chosen], src[~chosen])  # nothing else changes
    assert inputs[chosen & inputs.ne(MASK)].ge(N_SPECIAL).all()  # a random piece is never a special token


def test_padding_and_special_tokens_are_never_chosen():
    src = random_batch(seed=1)
    for epoch in range(5):
        inputs, targets = draw(src, epoch=epoch, rate=0.9)
        assert targets[src.lt(N_SPECIAL)].eq(IGNORE_INDEX).all()
        assert torch.equal(inputs[src.lt(N_SPECIAL)], src[src.lt(N_SPECIAL)])
        _, targets = draw(src, epoch=epoch, rate=0.9, word_start=torch.rand(V) < 0.5)
        assert targets[src.lt(N_SPECIAL)].eq(IGNORE_INDEX).all()


def test_each_epoch_draws_anew_and_the_same_seed_epoch_and_batch_draw_the_same():
    src = random_batch(b=64)
    first = draw(src, seed=3, epoch=0, key=17)
    assert all(torch.equal(a, b) for a, b in zip(first, draw(src, seed=3, epoch=0, key=17)))
    for other in (dict(seed=3, epoch=1, key=17), dict(seed=4, epoch=0, key=17), dict(seed=3, epoch=0, key=18)):
        assert not torch.equal(first[1], draw(src, **other)[1]), other


def test_whole_word_masking_chooses_every_piece_of_a_word_or_none():
    word_start = torch.rand(V, generator=torch.Generator().manual_seed(5)) < 0.4  # ~2.5 pieces a word
    src = random_batch(seed=2)
    eligible = src.ge(N_SPECIAL)
    inputs, targets = draw(src, word_start=word_start)
    chosen = targets.ne(IGNORE_INDEX)
    words = word_ids_of(src, word_start)  # (B, T)
    split = 0
    for row in range(src.size(0)):
        for w in words[row][eligible[row]].unique().tolist():
            picks = chosen[row][(words[row] == w) & eligible[row]]
            split += int(picks.any() and not picks.all())
    assert split == 0
    assert chosen.sum().item() / eligible.sum().item() == pytest.approx(0.15, abs=0.01)
    n = chosen.sum().item()
    assert (inputs.eq(MASK) & chosen).sum().item() / n == pytest.approx(0.8, abs=0.015)
    # whole words: many more chosen pieces sit next to another chosen piece than single draws give
    single = draw(src)[1].ne(IGNORE_INDEX)
    pairs = lambda c: (c[:, 1:] & c[:, :-1]).sum().item() / c.sum().item()  # noqa: E731
    assert pairs(chosen) > 3 * pairs(single)


def test_words_are_the_tokenizers_words():
    tok = SubwordTokenizer.train(["the unbelievable movie was great ."] * 20, 300, prefix_space=True)
    ids = tok.encode("the unbelievably great movie .")
    starts = torch.tensor(tok.word_starts())
    words = word_ids_of(torch.tensor([ids]), starts)[0].tolist()
    pieces = [tok.id_to_token(i) for i in ids]
    assert words[-1] == 4 and len(set(words)) == 5  # five words, however many pieces
    assert all(p.startswith("\u0120") == (j == 0 or words[j] != words[j - 1]) for j, p in enumerate(pieces))


def test_the_collator_names_each_batch_by_its_smallest_row():
    batch = TextCollator(pad_id=0)([{"src": [7, 8, 9], "index": 40}, {"src": [5], "index": 12}])
    assert batch["key"] == 12 and batch["n_tokens"] == 4
    assert batch["src"].tolist() == [[7, 8, 9], [5, 0, 0]]


def toy_corpus(n: int = 200) -> list[str]:
    rng = random.Random(0)
    subjects, verbs, objects = ["the cat", "the dog", "a bird", "my friend"], ["sat on", "looked at"], ["the mat", "a tree"]
    return [f"{rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(objects)} ." for _ in range(n)]


def tiny_task(texts: list[str], **kwargs) -> MaskedLMTask:
    tok = SubwordTokenizer.train(texts, 300, prefix_space=True)
    return MaskedLMTask(model=dict(TINY_MLM), piece_vocab_size=tok.vocab_size, pad_id=tok.pad_id,
                        data={"name": "toy"}, tokenizer=tok.to_str(), **kwargs)


def test_a_tiny_model_learns_a_toy_corpus():
    torch.manual_seed(0)
    texts = toy_corpus()
    task = tiny_task(texts, mask_rate=0.3)
    ids = [task.tokenizer.encode(t) for t in texts]
    src = torch.nn.utils.rnn.pad_sequence([torch.tensor(x) for x in ids], batch_first=True)  # (200, T)
    optimizer = torch.optim.AdamW(task.parameters(), lr=3e-3)
    losses = []
    for step in range(150):
        rows = torch.randint(0, len(ids), (32,))
        loss, _ = task._step({"src": src[rows], "key": step}, epoch=0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    task.eval()
    with torch.no_grad():
        loss_sum, correct, n = task._step({"src": src, "key": 0}, epoch=-1)[1][:3].tolist()
    assert sum(losses[:10]) / 10 > 4.5  # about log(V) at the start
    assert loss_sum / n < 1.0 and correct / n > 0.7  # measured: 0.45 and 0.85
