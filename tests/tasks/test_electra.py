"""ELECTRA's replaced-token detection: the generator is a fraction of the discriminator's heads,
the discriminator's encoder has the masked LM's names (fine-tuning takes it the same way), the
corrupted text differs from the original only where pieces were chosen and never holds a
special token, the same (seed, epoch, batch) gives the same loss, and a tiny pair trained on a
toy corpus learns to tell the generator's replacements from the original pieces."""

from __future__ import annotations

import random

import pytest
import torch

from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.models.mlm import ElectraConfig, ElectraModel, MaskedLanguageModel, MLMConfig
from transformer.tasks.mlm import N_SPECIAL, MaskedLMTask, electra_corrupt

TINY = {"d_model": 32, "n_heads": 4, "n_layers": 2, "d_ff": 64, "dropout": 0.0, "max_len": 64}
ELECTRA = {"_target_": "transformer.models.mlm.ElectraModel", **TINY, "generator_fraction": 0.5}


def test_the_generator_is_a_share_of_the_heads_and_the_encoder_is_named_as_the_masked_lms():
    model = ElectraModel(ElectraConfig(vocab_size=300, pad_id=0, **TINY, generator_fraction=0.5))
    gen = model.generator
    assert isinstance(gen, MaskedLanguageModel)
    assert gen.encoder.embedding.embedding_dim == 16 and len(gen.encoder.layers) == 2  # 2 of 4 heads, 8 wide each
    tenth = ElectraModel(ElectraConfig(vocab_size=300, pad_id=0, **TINY, generator_fraction=0.1))
    assert tenth.generator.encoder.embedding.embedding_dim == 8
    mlm = MaskedLanguageModel(MLMConfig(vocab_size=300, pad_id=0, **TINY))
    ours = {k: v.shape for k, v in model.encoder.state_dict().items()}
    assert ours == {k: v.shape for k, v in mlm.encoder.state_dict().items()}
    assert model.discriminate(torch.randint(N_SPECIAL, 300, (3, 7))).shape == (3, 7)
    with pytest.raises(ValueError, match="generator_fraction=0"):
        ElectraModel(ElectraConfig(vocab_size=300, pad_id=0, **TINY, generator_fraction=0))


def test_corruption_replaces_only_the_chosen_pieces_and_never_with_a_special_token():
    g = torch.Generator().manual_seed(0)
    src = torch.randint(N_SPECIAL, 50, (64, 20), generator=g)
    chosen = torch.rand(64, 20, generator=g) < 0.3
    n = int(chosen.sum())
    logits = torch.zeros(n, 50)
    logits[:, :N_SPECIAL] = 10.0  # the generator prefers special tokens: they are still never drawn
    corrupted = electra_corrupt(src, chosen, logits, torch.Generator().manual_seed(1))
    assert torch.equal(corrupted[~chosen], src[~chosen])
    assert corrupted[chosen].ge(N_SPECIAL).all()
    # a confident generator's choice lands at its own position (row order, as the targets)
    sure = torch.full((n, 50), -30.0)
    sure[torch.arange(n), torch.arange(n) % (50 - N_SPECIAL) + N_SPECIAL] = 30.0
    placed = electra_corrupt(src, chosen, sure, torch.Generator().manual_seed(2))[chosen]
    assert torch.equal(placed, torch.arange(n) % (50 - N_SPECIAL) + N_SPECIAL)


def toy_corpus(n: int = 300) -> list[str]:
    rng = random.Random(0)
    verbs = {"sat on": "the mat", "climbed": "a tree", "drank": "the milk", "read": "a book"}
    subjects = ["the cat", "the dog", "my friend", "a child"]
    return [f"{rng.choice(subjects)} {v} {verbs[v]} ." for v in (rng.choice(list(verbs)) for _ in range(n))]


def tiny_electra(texts: list[str]) -> MaskedLMTask:
    tok = SubwordTokenizer.train(texts, 300, prefix_space=True)
    return MaskedLMTask(model=dict(ELECTRA), piece_vocab_size=tok.vocab_size, pad_id=tok.pad_id, data={"name": "toy"},
                        tokenizer=tok.to_str(), mask_rate=0.3)


def test_the_same_batch_key_gives_the_same_loss_and_the_sums_add_up():
    torch.manual_seed(0)
    texts = toy_corpus(40)
    task = tiny_electra(texts).eval()
    src = torch.nn.utils.rnn.pad_sequence([torch.tensor(task.tokenizer.encode(t)) for t in texts], batch_first=True)
    with torch.no_grad():
        (a, sums), (b, again), (_, other) = (task._step({"src": src, "key": k}, epoch=0) for k in (3, 3, 4))
    assert torch.equal(a, b) and torch.equal(sums, again) and not torch.equal(sums, other)
    lm_sum, correct, n, rtd_sum, rtd_correct, scored = sums.tolist()
    assert scored == int(src.ne(task.tokenizer.pad_id).sum()) and 0 < n < scored and rtd_correct <= scored
    metrics = task._metrics(sums.tolist())
    assert metrics["loss"] == pytest.approx(lm_sum / n + 50.0 * rtd_sum / scored)
    assert a.item() == pytest.approx(metrics["loss"], rel=1e-5)
    assert task.filler().model is task.model.generator  # fill-mask asks the generator


@pytest.mark.slow
def test_a_tiny_pair_learns_to_spot_the_replacements():
    torch.manual_seed(0)
    texts = toy_corpus()
    task = tiny_electra(texts)
    src = torch.nn.utils.rnn.pad_sequence([torch.tensor(task.tokenizer.encode(t)) for t in texts], batch_first=True)
    optimizer = torch.optim.AdamW(task.parameters(), lr=3e-3)
    for step in range(150):
        loss, _ = task._step({"src": src[torch.randint(0, len(texts), (32,))], "key": step}, epoch=0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    task.eval()
    # Score originals and replacements apart, on a fresh corruption: a uniform generator's
    # samples are almost always wrong, so the labels are known from the positions alone.
    g = torch.Generator().manual_seed(7)
    chosen = (torch.rand(src.shape, generator=g) < 0.15) & src.ge(N_SPECIAL)
    uniform = torch.zeros(int(chosen.sum()), task.hparams.piece_vocab_size)
    corrupted = electra_corrupt(src, chosen, uniform, g)
    replaced = corrupted.ne(src)
    with torch.no_grad():
        p = task.model.discriminate(corrupted).sigmoid()
    real = src.ne(task.tokenizer.pad_id)
    # measured: 0.99 on the replacements, 0.04 on the originals
    assert p[replaced].mean() > 0.7 and p[real & ~replaced].mean() < 0.15
    _, sums = task._step({"src": src, "key": 0}, epoch=-1)
    assert task._metrics(sums.tolist())["acc"] > 0.4  # the generator learned to fill masks too (measured 0.60)
