"""A translation model served with ``decode.compile=true`` compiles at start-up."""

from __future__ import annotations

import pytest
import torch

from serve_models import SENTENCES

from transformer.serve.served import TranslationModel
from transformer.tasks.checkpoint import load_task


@pytest.mark.slow  # compiling on a CPU: about a minute
def test_a_compiled_model_compiles_at_start_up_and_answers_as_eager(checkpoints):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    task = load_task(checkpoints["translation"])
    before = counters["stats"]["unique_graphs"]
    served = TranslationModel("at", task, checkpoints["translation"], {"strategy": "greedy", "compile": True})
    assert counters["stats"]["unique_graphs"] > before  # compiled before any request
    eager = task.translator({"strategy": "greedy"}).translate(SENTENCES)
    answers = served.predict(SENTENCES, served._settings({}))
    assert [a["hypotheses"][0]["text"] for a in answers] == [n[0][0] for n in eager]
