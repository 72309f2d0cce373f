"""Image classification end to end through the commands on a tiny folder of real digits: a user's
class folders train a tiny patch classifier (the encoder behind the patch front end, through the
classification task), the checkpoint evaluates (accuracy on the carved test split), classifies
image files, serves uploads and is inspected; bad images and folders end with one ``error:`` line
naming the file, nothing written (a bad training folder through a real process). Commands run in
this process where one start-up serves them all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("PIL")
pytest.importorskip("sklearn")


def run_cli(module: str, *args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", f"transformer.cli.{module}", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600, input=stdin)


def one_error(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and lines[-1].startswith("error: "), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    return lines[-1]


def digit_folder(root: Path, per_class: int = 10, digits=(0, 1, 2)) -> Path:
    """``root/<digit>/<n>.png``: the first ``per_class`` UCI digits of each class, 8x8 grey."""
    from PIL import Image
    from sklearn.datasets import load_digits

    data = load_digits()
    for d in digits:
        (root / str(d)).mkdir(parents=True)
        for n, i in enumerate(np.flatnonzero(data.target == d)[:per_class]):
            pixels = np.rint(data.images[i] * 255 / 16).astype(np.uint8)
            Image.fromarray(pixels, mode="L").save(root / str(d) / f"{n}.png")
    return root


TINY = ["data.height=8", "data.width=8", "data.channels=1", "model.frontend.patch_size=2", "model.max_len=17",
        "model.d_model=16", "model.n_heads=2", "model.n_layers=1", "model.d_ff=32", "data.max_tokens=8",
        "task.warmup_steps=2", "trainer.max_epochs=2", "callbacks.progress_bar=null", "logger.tensorboard=null"]


def train(root: Path, folder: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_cli("train", "experiment=image_classify", f"data.train={folder}", f"data.data_dir={root / 'cache'}",
                   f"hydra.run.dir={root / 'run'}", *TINY, *extra, cwd=root)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from hydra_helpers import compose_cfg

    from transformer.cli import train as train_cli

    root = tmp_path_factory.mktemp("images")
    folder = digit_folder(root / "digits")
    summary = train_cli.run(compose_cfg("train", [
        "experiment=image_classify", f"data.train={folder}", f"data.data_dir={root / 'cache'}",
        f"output_dir={root / 'run'}", "model.window=1", "test_checkpoint=last", *TINY]))
    return root, summary


def in_process(module, args: list[str], capsys, monkeypatch, stdin: str | None = None) -> tuple[int, str, str]:
    """``(exit status, stdout, stderr)`` of a command's ``main()`` run in this process."""
    import io

    monkeypatch.setattr(sys, "argv", [module.__name__, *args])
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode()), encoding="utf-8"))
    capsys.readouterr()
    try:
        module.main()
        code = 0
    except SystemExit as exc:
        code = 0 if exc.code is None else exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_an_image_classifier_trains_evaluates_and_classifies_image_files(trained, capsys, monkeypatch):
    from transformer.cli import classify, evaluate

    root, summary = trained
    ckpt = summary["last_checkpoint"]
    assert summary["global_step"] > 0 and 0 <= summary["test"]["test"]["acc"] <= 1
    code, _, err = in_process(evaluate, [f"ckpt_path={ckpt}", "split=test", f"output_dir={root / 'eval'}"],
                              capsys, monkeypatch)
    assert code == 0, err[-3000:]
    (written,) = (root / "eval").glob("*.test.metrics.json")
    metrics = json.loads(written.read_text())
    assert 0 <= metrics["acc"] <= 1 and metrics["n"] == 6  # 20 % of each class of 10
    # test_checkpoint=last: the run's own test scored the last checkpoint, as evaluate does
    assert summary["test"]["test"]["checkpoint"] == ckpt != summary["best_checkpoint"]
    assert summary["test"]["test"]["acc"] == metrics["acc"]
    paths = [str(root / "digits" / "1" / "0.png"), str(root / "digits" / "2" / "3.png")]
    code, out, err = in_process(classify, [f"ckpt_path={ckpt}", "top_k=3"], capsys, monkeypatch,
                                stdin="\n".join(paths) + "\n")
    assert code == 0, err[-3000:]
    lines = out.strip().splitlines()
    assert len(lines) == 2 and all({ln.split("\t")[0], ln.split("\t")[2], ln.split("\t")[4]} == {"0", "1", "2"}
                                   for ln in lines)


@pytest.mark.parametrize("damage", ["not_an_image", "other_size", "missing"])
def test_a_bad_image_to_classify_is_one_line_naming_it(trained, tmp_path, damage, capsys, monkeypatch):
    from PIL import Image

    from transformer.cli import classify

    _, summary = trained
    bad = tmp_path / "bad.png"
    if damage == "not_an_image":
        bad.write_text("this is not an image\n")
    elif damage == "other_size":
        Image.new("L", (9, 8)).save(bad)
    monkeypatch.chdir(tmp_path)
    code, _, err = in_process(classify, [f"ckpt_path={summary['last_checkpoint']}"], capsys, monkeypatch,
                              stdin=f"{bad}\n")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and lines[-1].startswith("error: ") and "Traceback" not in err, err[-2000:]
    assert "bad.png" in lines[-1] and ("8x9 image" in lines[-1] if damage == "other_size" else True)
    assert sorted(p.name for p in tmp_path.iterdir()) == (["bad.png"] if damage != "missing" else [])


def test_a_bad_training_folder_is_one_line_naming_the_file_and_nothing_is_written(tmp_path):
    # Every bad folder the reader refuses (tests/data/images/test_image_folder.py) ends the run so.
    folder = digit_folder(tmp_path / "digits", per_class=3)
    (bad := folder / "1" / "notes.png").write_text("not an image")
    proc = train(tmp_path, folder)
    line = one_error(proc)
    assert str(bad) in line and "not an image" in line
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()


def test_the_server_classifies_an_uploaded_image(trained):
    pytest.importorskip("fastapi")
    import base64

    from fastapi.testclient import TestClient

    from transformer.serve.app import create_app
    from transformer.serve.served import ImageClassificationModel
    from transformer.tasks.checkpoint import load_task

    root, summary = trained
    model = ImageClassificationModel("digits", load_task(summary["last_checkpoint"]), "last.ckpt", top_k=2)
    image = base64.b64encode((root / "digits" / "1" / "0.png").read_bytes()).decode()
    with TestClient(create_app([model])) as client:
        ok = client.post("/v1/classify", json={"model": "digits", "inputs": [image, image]})
        garbage = client.post("/v1/classify", json={"model": "digits", "inputs": ["not base64!"]})
        not_image = client.post("/v1/classify", json={"model": "digits",
                                                      "inputs": [base64.b64encode(b"hello there").decode()]})
    assert ok.status_code == 200, ok.text
    outputs = ok.json()["outputs"]
    assert len(outputs) == 2 and outputs[0]["label"] in ("0", "1", "2") and len(outputs[0]["top"]) == 2
    assert outputs[0] == outputs[1]
    assert garbage.status_code == 422 and "not an image file in base64" in garbage.text
    assert not_image.status_code == 422 and "input0: not an image file Pillow reads" in not_image.text


def test_inspect_draws_the_class_vector_s_attention_over_the_patches_on_the_image(trained, tmp_path):
    pytest.importorskip("matplotlib")
    from hydra_helpers import compose_cfg

    from transformer.cli import inspect
    from transformer.inspect.classification import class_vector_maps

    root, summary = trained
    image = root / "digits" / "2" / "0.png"
    cfg = compose_cfg("inspect", [f"ckpt_path={summary['last_checkpoint']}", f"text={image}",
                                  f"output_dir={tmp_path}"])
    written = {p.name for p in inspect.run(cfg)}
    assert {"class_attention.png", "encoder_layer0.png", "attention.npz", "index.html"} <= written
    arrays = dict(np.load(tmp_path / "sentence_0" / "attention.npz"))
    assert list(arrays["tokens"][:3]) == ["[CLS]", "r0c0", "r0c1"] and len(arrays["tokens"]) == 17
    assert arrays["image"].shape == (8, 8)
    maps = class_vector_maps(arrays, (4, 4))  # the class vector's row over the 16 patches
    assert maps.shape == (1, 4, 4)
    np.testing.assert_allclose(maps[0].reshape(-1), arrays["encoder.layer0"][:, 0, 1:].mean(0), rtol=1e-6)
    # windowed model (window=1): the class vector still sees every patch
    assert (arrays["encoder.layer0"][:, 0, 1:] > 0).all()


def test_with_callbacks_ema_the_average_of_the_weights_is_saved_and_tested(tmp_path):
    import torch
    from hydra_helpers import compose_cfg

    from transformer.cli import train as train_cli
    from transformer.tasks.checkpoint import load_task

    folder = digit_folder(tmp_path / "digits")
    ema = "callbacks.ema={_target_:lightning.pytorch.callbacks.EMAWeightAveraging,decay:0.5}"
    summary = train_cli.run(compose_cfg("train", [
        "experiment=image_classify", f"data.train={folder}", f"data.data_dir={tmp_path / 'cache'}",
        f"output_dir={tmp_path / 'run'}", *TINY, ema]))
    ckpt = torch.load(summary["best_checkpoint"], map_location="cpu", weights_only=False)
    averaged, trained = ckpt["state_dict"], ckpt["current_model_state"]  # the trained weights beside their average
    assert averaged.keys() == trained.keys()
    assert any(not torch.equal(averaged[k], trained[k]) for k in averaged if averaged[k].is_floating_point())
    # What is tested (and loaded by every command) is the average.
    task = load_task(summary["best_checkpoint"])
    assert all(torch.equal(v, averaged[k]) for k, v in task.state_dict().items())


def test_a_vit_student_learns_its_cnn_teachers_labels_on_an_image_folder(tmp_path):
    """``task.teacher`` on images: a ViT trained on a folder whose digits 0 and 1 swapped their
    class folders, learning only from a CNN teacher of the real folder (``distill_weight=1``),
    classifies its training images as the teacher does, by their real digit; so too when the
    teacher classifies each mixed training batch (``task.distill_online``)."""
    import shutil

    import torch
    from hydra_helpers import compose_cfg

    from transformer.cli import train as train_cli
    from transformer.tasks.checkpoint import load_task

    real = digit_folder(tmp_path / "digits")
    swapped = tmp_path / "swapped"
    shutil.copytree(real, swapped)
    (swapped / "0").rename(swapped / "x")
    (swapped / "1").rename(swapped / "0")
    (swapped / "x").rename(swapped / "1")
    # experiment=digits on a user's folder: its CNN (model=cnn) teaches its ViT, here a tiny one
    common = ["experiment=digits", "data.preset=null", f"data.data_dir={tmp_path / 'cache'}", "data.max_tokens=8",
              "trainer.max_steps=120", "task.lr=3e-3", "task.warmup_steps=2", "callbacks.ema=null",
              "callbacks.progress_bar=null", "logger.tensorboard=null"]
    teacher = train_cli.run(compose_cfg("train", [*common, "model=cnn", f"data.train={real}",
                                                  f"output_dir={tmp_path / 'teacher'}"]))
    student = train_cli.run(compose_cfg("train", [
        *common, f"data.train={swapped}", f"output_dir={tmp_path / 'student'}", "model.d_model=16", "model.n_heads=2",
        "model.n_layers=1", "model.d_ff=32", f"task.teacher={teacher['last_checkpoint']}", "task.distill_weight=1.0"]))
    cached = list((tmp_path / "cache" / "teachers").glob("*.pt"))
    assert len(cached) == 1 and torch.load(cached[0]).shape == (21, 3)  # the 21 training images, 3 classes
    paths = sorted(str(p) for p in swapped.glob("*/*.png"))
    real_digit = [{"0": "1", "1": "0"}.get(Path(p).parent.name, Path(p).parent.name) for p in paths]
    said = [top[0][0] for top in load_task(student["last_checkpoint"]).classifier().top_k(paths)]
    teacher_said = [top[0][0] for top in load_task(teacher["last_checkpoint"]).classifier().top_k(paths)]
    assert sum(t == d for t, d in zip(teacher_said, real_digit)) >= 27  # the teacher knows the digits
    assert sum(s == d for s, d in zip(said, real_digit)) >= 24  # learning the swapped folders gives under 10
    # distill_online: the teacher reads each mixed batch instead (nothing cached), to the same end
    online = train_cli.run(compose_cfg("train", [
        *common, f"data.train={swapped}", f"output_dir={tmp_path / 'online'}", "model.d_model=16", "model.n_heads=2",
        "model.n_layers=1", "model.d_ff=32", f"task.teacher={teacher['last_checkpoint']}", "task.distill_weight=1.0",
        "task.distill_online=true", "task.mixup=0.2", f"data.data_dir={tmp_path / 'cache2'}"]))
    assert not (tmp_path / "cache2" / "teachers").exists()
    said = [top[0][0] for top in load_task(online["last_checkpoint"]).classifier().top_k(paths)]
    assert sum(s == d for s, d in zip(said, real_digit)) >= 24
    ckpt = torch.load(online["last_checkpoint"], map_location="cpu", weights_only=True)
    assert not any(k.startswith("_teachers") or "teacher" in k for k in ckpt["state_dict"])


def test_the_checkpoint_a_run_tests_is_best_or_last(tmp_path):
    from hydra_helpers import compose_cfg

    from transformer.cli import train as train_cli

    cfg = compose_cfg("train", ["experiment=digits", f"output_dir={tmp_path / 'run'}", "test_checkpoint=worst"])
    with pytest.raises(ValueError, match=r"^test_checkpoint='worst': expected best or last$"):
        train_cli.preflight(cfg)
    assert not (tmp_path / "run").exists()
