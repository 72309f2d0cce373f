"""Choosing a digits recipe without the test images: k-fold over the training and dev images.

The dev split of ``experiment=digits`` is 143 images, and a change moves it by a few; this pools
the 1,438 training and dev images of the same split (``data.split_seed=0``: the 359 test images
are never read), deals each class into ``--k`` folds (seeded, fixed), and for each fold named by
``--folds`` trains the recipe's model (``experiment=digits`` plus any ``key=value`` overrides of
the model) on the other folds in a plain loop: AdamW, warm-up then linear (or cosine) decay, label
smoothing, mixup or CutMix, an exponential average of the weights, as the recipe's task and
callbacks do. It scores the held-out fold with the final averaged weights (no checkpoint is
chosen), one thread. ``--teacher cnn`` first trains that model (``experiment=digits model=cnn``,
the same loop, no mixing) on the same folds, kept in ``--teacher-cache``, and the student learns
from it as ``task.teacher`` teaches (``--distill online``: ``task.distill_online``).

    python3 scripts/image_folds.py [--steps 3000] [--mixup 0.2] [--folds 0,1] [-- model.n_layers=4 ...]
    python3 scripts/image_folds.py --teacher cnn --distill online --mixup 0.8 --cutmix 1.0

Prints each fold's correct images and CPU seconds, then one JSON line: the settings and the
images right over the folds (``ema_correct``; ``raw_correct`` with the last weights).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from transformer.data.images.datamodule import label_order, split_rows
from transformer.data.images.digits import write_digits
from transformer.data.images.folder import load_image
from transformer.tasks.build import build_model
from transformer.tasks.classification import distillation_loss

CONF = Path(__file__).resolve().parents[1] / "conf"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=3000, help="updates a fold")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=100, help="warm-up updates")
    p.add_argument("--wd", type=float, default=0.01, help="AdamW weight decay")
    p.add_argument("--ls", type=float, default=0.1, help="label smoothing")
    p.add_argument("--bs", type=int, default=64, help="images a batch")
    p.add_argument("--ema", type=float, default=0.99, help="decay of the weights' average")
    p.add_argument("--mixup", type=float, default=0.0, help="mixup's Beta parameter; 0 = off")
    p.add_argument("--cutmix", type=float, default=0.0, help="CutMix's Beta parameter; 0 = off")
    p.add_argument("--schedule", choices=("linear", "cosine"), default="linear")
    p.add_argument("--teacher", default=None, help="distil from this model config (cnn) trained on the same folds")
    p.add_argument("--teacher-steps", type=int, default=3000, help="the teacher's updates")
    p.add_argument("--teacher-cache", default="teachers", help="folder keeping each fold's teacher")
    p.add_argument("--distill", choices=("rows", "online"), default="rows",
                   help="the teacher's probabilities of each training image, or of each (mixed) batch")
    p.add_argument("--distill-weight", type=float, default=0.5)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--hard", action="store_true", help="learn the teacher's top label (DeiT's hard distillation)")
    p.add_argument("--folds", default="0,1", help="the held-out folds to run, comma-separated")
    p.add_argument("--k", type=int, default=4, help="folds in all")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data-dir", default=os.path.join(os.environ.get("HOME", "."), ".cache", "transformer"))
    p.add_argument("overrides", nargs="*", help="key=value overrides of experiment=digits")
    return p.parse_args(argv)


def fold_of(labels: np.ndarray, k: int, seed: int = 12345) -> np.ndarray:
    """Each image's fold: every class dealt round the ``k`` folds in a seeded order."""
    rng = np.random.default_rng(seed)
    folds = np.zeros(len(labels), int)
    for c in np.unique(labels):
        idx = np.where(labels == c)[0]
        folds[idx[rng.permutation(len(idx))]] = np.arange(len(idx)) % k
    return folds


def fold_teacher(a: argparse.Namespace, f: int, X: torch.Tensor, Y: torch.Tensor, tr: np.ndarray,
                 n_classes: int) -> torch.nn.Module:
    """The teacher of fold ``f``: ``experiment=digits model=<a.teacher>`` trained by the same loop on
    the same training folds (no mixing), its averaged weights; kept in ``--teacher-cache`` so that
    students with other settings learn from the same teacher."""
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose("train", overrides=["experiment=digits", f"model={a.teacher}"])
    model = build_model(OmegaConf.to_container(cfg.model, resolve=True), vocab_size=1, pad_id=0, n_classes=n_classes)
    cached = Path(a.teacher_cache) / f"{a.teacher}_fold{f}of{a.k}_seed{a.seed}_steps{a.teacher_steps}.pt"
    if cached.is_file():
        model.load_state_dict(torch.load(cached, map_location="cpu", weights_only=True))
        return model
    torch.manual_seed(a.seed + 1000 * f + 500)
    g = np.random.default_rng(a.seed + f + 500)
    plain = argparse.Namespace(**{**vars(a), "steps": a.teacher_steps, "mixup": 0.0, "cutmix": 0.0,
                                  "schedule": "linear", "lr": 1e-3, "warmup": 100})
    t0 = time.process_time()
    ema, _ = train(model, X, Y, tr, plain, g, n_classes)
    print(f"fold {f}: teacher trained, cpu {time.process_time() - t0:.0f}s", flush=True)
    cached.parent.mkdir(parents=True, exist_ok=True)
    torch.save(ema.state_dict(), cached)
    return ema


def train(model: torch.nn.Module, X: torch.Tensor, Y: torch.Tensor, tr: np.ndarray, a: argparse.Namespace,
          g: np.random.Generator, n_classes: int, teacher: torch.nn.Module | None = None
          ) -> tuple[torch.nn.Module, float]:
    """Trains ``model`` on the images ``tr`` as the recipe's task and callbacks do; returns the
    exponential average of its weights and the last loss. ``teacher``: distillation, the loss
    ``(1 - w) x`` cross-entropy ``+ w x`` :func:`distillation_loss` with the teacher's probabilities
    of each training image (``--distill rows``, as ``task.teacher`` computes them once) or of each
    (mixed) batch (``--distill online``, as DeiT's teacher sees the augmented images)."""
    ema = copy.deepcopy(model)
    for q in ema.parameters():
        q.requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.98), eps=1e-8, weight_decay=a.wd)
    rows = None
    if teacher is not None and a.distill == "rows":
        with torch.no_grad():
            rows = torch.softmax(teacher(X), -1)  # (N, C)

    def lr_at(s: int) -> float:
        if s < a.warmup:
            return (s + 1) / a.warmup
        r = (s - a.warmup) / max(1, a.steps - a.warmup)
        return max(0.0, 1 - r) if a.schedule == "linear" else 0.5 * (1 + math.cos(math.pi * r))

    order: list[int] = []
    model.train()
    for s in range(a.steps):
        if len(order) < a.bs:
            order += g.permutation(tr).tolist()
        b, order = order[:a.bs], order[a.bs:]
        x, y = X[b], Y[b]
        for pg in opt.param_groups:
            pg["lr"] = a.lr * lr_at(s)
        yt = F.one_hot(y, n_classes).float() * (1 - a.ls) + a.ls / n_classes  # (B, C)
        pt = rows[b] if rows is not None else None  # (B, C)
        use_cut = a.cutmix > 0 and (a.mixup <= 0 or g.random() < 0.5)
        if use_cut or a.mixup > 0:
            perm = torch.from_numpy(g.permutation(len(b)))
            lam = float(g.beta(a.cutmix, a.cutmix) if use_cut else g.beta(a.mixup, a.mixup))
            if use_cut:
                h = int(round(8 * math.sqrt(1 - lam)))
                cy, cx = g.integers(0, 8, 2)
                y0, y1 = max(cy - h // 2, 0), min(cy - h // 2 + h, 8)
                x0, x1 = max(cx - h // 2, 0), min(cx - h // 2 + h, 8)
                x = x.clone()
                x[:, :, y0:y1, x0:x1] = x[perm][:, :, y0:y1, x0:x1]
                lam = 1 - (y1 - y0) * (x1 - x0) / 64
            else:
                x = lam * x + (1 - lam) * x[perm]
            yt = lam * yt + (1 - lam) * yt[perm]
            pt = None if pt is None else lam * pt + (1 - lam) * pt[perm]
        logits = model(x)  # (B, C)
        loss = torch.sum(-yt * F.log_softmax(logits, -1), -1).mean()
        if teacher is not None:
            if pt is None:
                with torch.no_grad():
                    pt = torch.softmax(teacher(x), -1)  # (B, C)
            if a.hard:
                pt = F.one_hot(pt.argmax(-1), n_classes).float()
            loss = (1 - a.distill_weight) * loss + a.distill_weight * distillation_loss(logits, pt, a.temperature)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            for pe, pm in zip(ema.parameters(), model.parameters()):
                pe.mul_(a.ema).add_(pm, alpha=1 - a.ema)
    return ema, loss.item()


def main(argv=None) -> dict:
    a = parse_args(argv)
    torch.set_num_threads(1)
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose("train", overrides=["experiment=digits", *a.overrides])
    mcfg = OmegaConf.to_container(cfg.model, resolve=True)
    root = write_digits(a.data_dir)
    rows = split_rows({"paths": {"train": str(root)}, "test_fraction": 0.2, "dev_fraction": 0.1, "split_seed": 0})
    pool = rows["train"] + rows["dev"]  # never rows["test"]
    labels = label_order(r.label for r in pool)
    X = torch.stack([load_image(r.path, 8, 8, 1) for r in pool])  # (N, 1, 8, 8)
    Y = torch.tensor([labels.index(r.label) for r in pool])  # (N,)
    folds = fold_of(Y.numpy(), a.k)
    res = []
    for f in map(int, a.folds.split(",")):
        tr, va = np.where(folds != f)[0], np.where(folds == f)[0]
        teacher = None
        if a.teacher:
            teacher = fold_teacher(a, f, X, Y, tr, len(labels))
            teacher.eval()
            with torch.no_grad():
                ok_t = int(teacher(X[va]).argmax(-1).eq(Y[va]).sum())
            print(f"fold {f}: teacher ({a.teacher}) {ok_t}/{len(va)}", flush=True)
        torch.manual_seed(a.seed + 1000 * f)
        g = np.random.default_rng(a.seed + f)
        model = build_model(copy.deepcopy(mcfg), vocab_size=1, pad_id=0, n_classes=len(labels))
        t0 = time.process_time()
        ema, loss = train(model, X, Y, tr, a, g, len(labels), teacher)
        ema.eval()
        model.eval()
        with torch.no_grad():
            ok = int(ema(X[va]).argmax(-1).eq(Y[va]).sum())
            ok_raw = int(model(X[va]).argmax(-1).eq(Y[va]).sum())
        res.append((ok, ok_raw, len(va)))
        print(f"fold {f}: ema {ok}/{len(va)} raw {ok_raw} cpu {time.process_time() - t0:.0f}s "
              f"last loss {loss:.3f}", flush=True)
    n = sum(r[2] for r in res)
    out = {"args": vars(a), "ema_correct": sum(r[0] for r in res), "raw_correct": sum(r[1] for r in res), "n": n,
           "acc": round(100 * sum(r[0] for r in res) / n, 2)}
    print(json.dumps(out), flush=True)
    return out


if __name__ == "__main__":
    main()
