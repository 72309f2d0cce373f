"""The BLEU accumulator: statistics summed over batches score like the whole corpus at once."""

from sacrebleu.metrics import BLEU

from transformer.evaluation import CorpusBLEU

HYPS = ["a man rides a bike .", "two dogs play in the snow", "a woman is singing", "kids run", ""]
REFS = ["a man is riding a bike .", "two dogs are playing in snow .", "a woman sings on stage", "children run", "nothing"]


def test_batches_sum_to_the_corpus_score():
    acc = CorpusBLEU()
    for lo, hi in [(0, 2), (2, 3), (3, 5)]:
        acc.update(HYPS[lo:hi], REFS[lo:hi])
    whole = BLEU().corpus_score(HYPS, [REFS]).score
    assert whole > 0
    assert abs(CorpusBLEU.score(acc.stats) - whole) < 1e-9


def test_two_ranks_summed_equal_one():
    a, b, both = CorpusBLEU(), CorpusBLEU(), CorpusBLEU()
    a.update(HYPS[:3], REFS[:3])
    b.update(HYPS[3:], REFS[3:])
    both.update(HYPS, REFS)
    summed = [x + y for x, y in zip(a.stats, b.stats)]
    assert summed == both.stats


def test_empty_scores_zero_and_reset_clears():
    acc = CorpusBLEU()
    assert CorpusBLEU.score(acc.stats) == 0.0
    acc.update(HYPS, REFS)
    assert any(acc.stats)
    acc.reset()
    assert acc.stats == [0] * CorpusBLEU.N_STATS
