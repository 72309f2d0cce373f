"""Hand-written next-token tables for the autoregressive fake (keys = first source token).

Worked traces (beam_size K=2 unless noted; probabilities multiply along a path):

A (key 3), beam beats greedy.
    greedy: 3 (.6) -> 5 (.55) -> EOS (.9): [3, 5], p = .297
    beam:   step 1 candidates [4,6] .36, [3,5] .33, [3,EOS] .27 (rank 3, not kept), [4,EOS] .04;
            step 2 [4,6,EOS] .36 and [3,5,EOS] .297 both finish -> best [4, 6], logprob log .36, len 3.
B (key 4), length penalty decides.
    step 1: [3,EOS] .495 finishes (len 2); live [4,5] .4275, [3,5] .055
    step 2: live [4,5,6] .38475, [3,5,6] .055 ([4,5,EOS] .04275 ranks 3rd, dropped)
    step 3: [4,5,6,EOS] .3655125 and [3,5,6,EOS] .055 finish (len 4) -> 3 finished, done.
    lp=1: [4,5,6] -0.2516 > [3] -0.3516 > [3,5,6] -0.7251;  lp=0: [3] wins.
C (key 5), never EOS; next law depends on the last token only.
    cap 3, K=2: finalised [3,3,3] .216 and [4,3,3] .192 (no EOS, len 3); greedy [3,3,3].
D (key 6), stopping rule (K=1).
    step 0: EOS .55 finishes [] (len 1, score log .55 = -0.598); live [3] .45.
    early stopping ends here. Exhaustive: bound log(.45)/cap > -0.598, so go on;
    step 1: [3,EOS] .4455 finishes (len 2, score -0.404); live [3,4] .0045 cannot beat it.
"""

from __future__ import annotations

from decoding_fakes import EOS

A, B, C, D = 3, 4, 5, 6

TABLES: dict[int, dict[tuple[int, ...], dict[int, float]]] = {
    A: {
        (): {3: 0.6, 4: 0.4},
        (3,): {EOS: 0.45, 5: 0.55},
        (4,): {6: 0.9, EOS: 0.1},
        (3, 5): {EOS: 0.9, 5: 0.1},
        (4, 6): {EOS: 1.0},
        (3, 5, 5): {EOS: 1.0},
    },
    B: {
        (): {3: 0.55, 4: 0.45},
        (3,): {EOS: 0.9, 5: 0.1},
        (4,): {5: 0.95, EOS: 0.05},
        (3, 5): {6: 1.0},
        (3, 5, 6): {EOS: 1.0},
        (4, 5): {6: 0.9, EOS: 0.1},
        (4, 5, 6): {EOS: 0.95, 3: 0.05},
    },
    D: {
        (): {EOS: 0.55, 3: 0.45},
        (3,): {EOS: 0.99, 4: 0.01},
        (3, 4): {EOS: 1.0},
    },
}

AFTER_EOS = {3: 1.0}  # whatever a finished row is fed must not reach its output


def dist(key: int, prefix: tuple[int, ...]) -> dict[int, float]:
    """Next-token law of sentence ``key`` after ``prefix`` (the tokens generated so far)."""
    if EOS in prefix:
        return AFTER_EOS
    if key == C:
        return {3: 0.8, 4: 0.2} if prefix and prefix[-1] == 4 else {3: 0.6, 4: 0.4}
    return TABLES[key].get(prefix, {3: 1.0})
