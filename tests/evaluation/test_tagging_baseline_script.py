"""``scripts/tagging_baseline.py`` on a user's own files: the most-frequent-tag baseline scored
on each file asked for, and one ``error:`` line (exit 2) for what it cannot read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.script_module import load_script


def load():
    return load_script("tagging_baseline")


def conllu(path: Path, sentences: list[list[tuple[str, str]]]) -> str:
    blocks = ["".join(f"{i}\t{w}\t{w}\t{t}\t_\t_\t0\tdep\t_\t_\n" for i, (w, t) in enumerate(s, 1)) for s in sentences]
    path.write_text("\n".join(blocks) + "\n", encoding="utf-8")
    return str(path)


def test_the_baseline_learns_from_a_training_file_and_scores_each_file(tmp_path, capsys):
    # "saw" is a VERB twice and a NOUN once: the baseline says VERB; "axe" was never seen.
    train = conllu(tmp_path / "my-train.conllu", [[("I", "PRON"), ("saw", "VERB")], [("I", "PRON"), ("saw", "VERB")],
                                                  [("a", "DET"), ("saw", "NOUN")]])
    test = conllu(tmp_path / "my-test.conllu", [[("a", "DET"), ("saw", "NOUN")], [("I", "PRON"), ("axe", "NOUN")]])
    assert load().main(["--train", train, "--eval", test, "--json", "--output-dir", str(tmp_path / "out")]) == 0
    [m] = json.loads(capsys.readouterr().out)
    # a/DET right, saw->VERB wrong, I/PRON right, axe -> the most frequent tag (PRON, VERB tie: 2 each) wrong
    assert m["tokens"] == 4 and m["correct"] == 2 and m["unseen_tokens"] == 1 and m["train_sentences"] == 3
    assert len(list((tmp_path / "out").glob("*.baseline.json"))) == 1


@pytest.mark.parametrize("args, message", [
    (["--task", "my_treebank:upos"], "for your own treebank give --train FILE --eval FILE"),
    (["--train", "/no/such.conllu", "--eval", "/no/such.conllu"], "not found"),
    (["--train", "{train}"], "--train needs at least one --eval"),
    (["--train", "{train}", "--eval", "{train}", "--tagset", "feats"], "tagset 'feats' not available"),
])
def test_bad_input_is_one_error_line(args, message, tmp_path, capsys):
    train = conllu(tmp_path / "t.conllu", [[("I", "PRON")]])
    assert load().main([a.format(train=train) for a in args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]
