"""Nothing a checkpoint says can make a command write outside the folders the user chose.

Real tiny checkpoints of each kind (translation, CTC, tagging, classification) are trained,
then every string field of their ``hyper_parameters`` (the data config's names, languages,
tag sets, labels, tokenizers, model and decoding settings, at any depth) is replaced by a
hostile name: an absolute path, a ``..`` climb, a path through a symbolic link planted in the
output folder, a NUL byte. Every command is run on each crafted checkpoint: it either works or
ends with one ``error:`` line and exit 2, and no file appears, changes or vanishes anywhere but
in the output folder and the data cache it was given.

The default test takes a deterministic sample (each field meets one hostile name and one
command); the ``slow`` one runs the whole table.
"""

from __future__ import annotations

import copy
import traceback
from pathlib import Path

import pytest
import torch
from hydra_helpers import compose_cfg, main_status

from transformer.cli import average, classify, decode, distill, evaluate, export, inspect, tag, train
from transformer.tasks.checkpoint import read_checkpoint

# test_conllu_treebank and test_classify_cli make the toy data; reuse their generators.
from test_classify_cli import toy_rows, write_split  # noqa: E402
from test_conllu_treebank import write_treebank  # noqa: E402
from model_configs import TINY

KINDS = ("translation", "ctc", "tagging", "classification")
HOSTILE = ("absolute", "climb", "symlink", "nul")
QUIET = ["trainer.accelerator=cpu", "trainer.precision=32-true", "debug=fast", "logger.tensorboard=null", "callbacks.progress_bar=null", "test_splits=[]",
         "++trainer.enable_model_summary=false"]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, mirror_root) -> dict[str, Path]:
    """One trained checkpoint of each kind (3 updates each)."""
    root = tmp_path_factory.mktemp("confined")
    cache = f"data.data_dir={root / 'cache'}"
    treebank = write_treebank(root, n_train=40)
    write_split(root / "train.tsv", toy_rows(60, 0))
    write_split(root / "dev.tsv", toy_rows(20, 1))
    runs = {
        "translation": ["model=tiny", f"data.mirror_root={mirror_root}", "data.vocab_size=300",
                        "trainer.limit_val_batches=1"],
        "ctc": [*TINY["nat_ctc_tiny"], "task=nat_ctc", "task.val_decode.strategy=ctc_one_pass", "data.src_lang=de",
                "data.tgt_lang=en", "data.vocab_size=300", f"data.mirror_root={mirror_root}",
                "trainer.limit_val_batches=1"],
        "tagging": ["experiment=ud_upos", *TINY["tagger_tiny"], f"data.train={treebank['train']}",
                    f"data.dev={treebank['dev']}", f"data.test={treebank['test']}", "data.dataset=toy"],
        "classification": ["experiment=classify", *TINY["classifier_tiny"], f"data.train={root / 'train.tsv'}",
                           f"data.dev={root / 'dev.tsv'}", "data.tokenizer_model=word", "data.vocab_size=100"],
    }
    out = {}
    for kind, overrides in runs.items():
        torch.manual_seed(0)
        summary = train.run(compose_cfg("train", [*overrides, *QUIET, cache, f"output_dir={root / kind}"]))
        out[kind] = Path(summary["last_checkpoint"])
    out["root"] = root
    return out


def string_fields(node, prefix: str = "") -> list[str]:
    """Dotted paths (``[i]`` for list items) of every string leaf of ``node``."""
    found = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, value in items:
        path = f"{prefix}[{key}]" if isinstance(node, list) else f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, str):
            found.append(path)
        else:
            found += string_fields(value, path)
    return found


def set_field(node, path: str, value: str) -> None:
    parts = path.replace("]", "").replace("[", ".").split(".")
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    last = parts[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def hostile_name(kind: str, evil: Path) -> str:
    return {"absolute": str(evil / "abs"), "climb": "../../evil/climb", "symlink": "link/through",
            "nul": "nul\x00byte"}[kind]


def commands(kind: str, ckpt: Path, work: Path) -> dict[str, tuple[object, list[str]]]:
    """Every command that takes a checkpoint, pointed at ``ckpt`` and writing under ``work/out``."""
    out, src = work / "out", work / "input.txt"
    common = [f"ckpt_path={ckpt}", "device=cpu"]
    table = {
        "evaluate": (evaluate, [*common, f"output_dir={out}", "split=" + ("dev" if kind in ("tagging", "classification")
                                                                        else "val")]),
        "inspect": (inspect, [*common, "text=ein hund", f"output_dir={out}"]),
        "average": (average, [f"inputs=[{ckpt},{ckpt}]", f"output={out / 'avg.ckpt'}"]),
    }
    if kind in ("translation", "ctc"):
        table["decode"] = (decode, [*common, f"input={src}", f"output={out / 'hyp.txt'}"])
        table["distill"] = (distill, [*common, "split=val", "limit=4", f"output_dir={out}"])
    if kind == "translation":
        table["export"] = (export, [*common, f"output_dir={out / 'ct2'}"])
    if kind == "tagging":
        table["tag"] = (tag, [*common, f"input={src}", f"output={out / 'tags.txt'}"])
    if kind == "classification":
        table["classify"] = (classify, [*common, f"input={src}", f"output={out / 'labels.txt'}"])
    return table


def snapshot(root: Path, allowed: list[Path]) -> dict[str, bytes | str]:
    """Every file and link under ``root`` outside ``allowed``, with its content."""
    seen = {}
    for path in root.rglob("*"):
        if any(path == a or a in path.parents for a in allowed):
            continue
        if path.is_symlink():
            seen[str(path)] = f"link -> {path.readlink()}"
        elif path.is_file():
            seen[str(path)] = path.read_bytes()
    return seen


def run_command(module, args: list[str], capsys, monkeypatch) -> tuple[int, str]:
    """``main_status``, with an escaped error shown as the traceback the command line would print."""
    try:
        return main_status(module, args, capsys, monkeypatch, stdin=b"ein hund .\n")
    except Exception:
        traceback.print_exc()
        return 1, capsys.readouterr().err


def table(checkpoints: dict, sample: bool) -> list[tuple[str, str, str, str]]:
    """``(checkpoint kind, field, hostile kind, command)`` cases."""
    rows = []
    for kind in KINDS:
        hp = read_checkpoint(checkpoints[kind])["hyper_parameters"]
        names = list(commands(kind, checkpoints[kind], Path("/w")))
        for i, field in enumerate(string_fields(hp)):
            for j, hostile in enumerate(HOSTILE):
                for k, command in enumerate(names):
                    if not sample or (j == i % len(HOSTILE) and k == (i + len(field)) % len(names)):
                        rows.append((kind, field, hostile, command))
    return rows


def check(checkpoints: dict, tmp_path: Path, capsys, monkeypatch, sample: bool) -> None:
    problems = []
    cases = table(checkpoints, sample)
    if sample:
        cases = cases[::24]  # a sample; the targeted rows below always run, the slow test has all
    # the fields the project turns into file names, met by the command that writes them, always
    cases += [(kind, field, hostile, command) for kind, field, command in (
        ("classification", "data.name", "evaluate"), ("tagging", "data.name", "evaluate"),
        ("tagging", "data.tagset", "evaluate"), ("translation", "tgt_lang", "evaluate"),
        ("translation", "src_lang", "distill"), ("translation", "tgt_lang", "distill"),
        ("ctc", "tgt_lang", "evaluate")) for hostile in HOSTILE[:3]]
    for n, (kind, field, hostile, command) in enumerate(cases):
        case = tmp_path / f"c{n}"
        work, evil = case / "work", case / "evil"
        (work / "out").mkdir(parents=True)
        evil.mkdir()
        (work / "out" / "link").symlink_to(evil, target_is_directory=True)
        (work / "input.txt").write_text("ein hund .\n", encoding="utf-8")
        ckpt = read_checkpoint(checkpoints[kind])
        ckpt = {**ckpt, "hyper_parameters": copy.deepcopy(ckpt["hyper_parameters"])}
        set_field(ckpt["hyper_parameters"], field, hostile_name(hostile, evil))
        crafted = case / "crafted.ckpt"
        torch.save(ckpt, crafted)
        monkeypatch.chdir(work)
        allowed = [work / "out", work / "data"]  # the output folder and the default data cache
        before = snapshot(case, allowed)
        module, args = commands(kind, crafted, work)[command]
        code, err = run_command(module, args, capsys, monkeypatch)
        after = snapshot(case, allowed)
        label = f"{kind} {field}={hostile} {command}"
        if after != before:
            problems.append(f"{label}: wrote outside the output folder: {sorted(set(after) ^ set(before))[:5]} "
                            f"or changed {[p for p in before if before[p] != after.get(p)][:5]}")
        lines = err.strip().splitlines()
        if code not in (0, 2) or "Traceback" in err or (code == 2 and not (lines and lines[-1].startswith("error: "))):
            problems.append(f"{label}: exit {code}: {err.strip()[-400:]}")
    assert problems == [], "\n".join(problems[:20])


def test_hostile_names_in_a_checkpoint_write_nothing_outside(checkpoints, tmp_path, capsys, monkeypatch):
    check(checkpoints, tmp_path, capsys, monkeypatch, sample=True)


@pytest.mark.slow
def test_every_hostile_name_in_every_field_writes_nothing_outside(checkpoints, tmp_path, capsys, monkeypatch):
    check(checkpoints, tmp_path, capsys, monkeypatch, sample=False)


def test_a_classifier_named_by_an_absolute_path_evaluates_into_its_output_folder(checkpoints, tmp_path,
                                                                                   capsys, monkeypatch):
    """The original probe: ``data.name`` an absolute path used to put the predictions there."""
    ckpt = read_checkpoint(checkpoints["classification"])
    ckpt["hyper_parameters"] = copy.deepcopy(ckpt["hyper_parameters"])
    target = tmp_path / "elsewhere" / "stolen"
    ckpt["hyper_parameters"]["data"]["name"] = str(target)
    torch.save(ckpt, tmp_path / "c.ckpt")
    monkeypatch.chdir(tmp_path)
    code, err = run_command(evaluate, [f"ckpt_path={tmp_path / 'c.ckpt'}", "device=cpu", "split=dev",
                                       f"output_dir={tmp_path / 'out'}"], capsys, monkeypatch)
    assert code == 0, err
    assert not (tmp_path / "elsewhere").exists()
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert any(n.endswith(".dev.predictions.tsv") for n in written) and any(n.endswith(".metrics.json") for n in written)
