"""Composing the project's Hydra configs in tests, the way the CLIs see them."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, open_dict

CONF = Path(__file__).resolve().parents[2] / "conf"


def compose_cfg(config_name: str, overrides: list[str], hydra_node: bool = False) -> DictConfig:
    """``conf/<config_name>.yaml`` with ``overrides``.

    With ``hydra_node=False`` (what an in-process ``run(cfg)`` needs) Hydra's own run-time
    node is dropped, so pass ``output_dir=`` explicitly; with True it is kept, as under
    ``@hydra.main``.
    """
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=hydra_node)
    if hydra_node:
        return cfg
    with open_dict(cfg):
        cfg.pop("hydra", None)
    return cfg


def main_status(module, args: list[str], capsys, monkeypatch, stdin: bytes | None = None) -> tuple[int, str]:
    """``(exit status, stderr)`` of a command's real ``main()`` (Hydra included), run
    in-process with ``args`` (and ``stdin``, if given, as standard input)."""
    code, _, err = main_output(module, args, capsys, monkeypatch, stdin)
    return code, err


def main_output(module, args: list[str], capsys, monkeypatch, stdin: bytes | str | None = None) -> tuple[int, str, str]:
    """``(exit status, stdout, stderr)`` of a command's real ``main()`` (Hydra included), run
    in-process with ``args`` (and ``stdin``, if given, as standard input): what the console
    script does, without a second interpreter's start-up. Every logger's handlers are put back
    afterwards: those added on the way (Hydra's job logging, Lightning's on its import) write to
    this test's captured stderr, which is closed once the test ends."""
    import io
    import logging
    import sys

    monkeypatch.setattr(sys, "argv", [module.__name__, *args])
    if stdin is not None:
        data = stdin.encode("utf-8") if isinstance(stdin, str) else stdin
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    loggers = [logging.getLogger(), *(lg for lg in logging.Logger.manager.loggerDict.values()
                                      if isinstance(lg, logging.Logger))]
    before = {lg: (lg.handlers[:], lg.level) for lg in loggers}
    capsys.readouterr()
    try:
        module.main()
        code = 0
    except SystemExit as exc:
        code = 0 if exc.code is None else exc.code
    finally:
        for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
            if isinstance(logger, logging.Logger):
                handlers, level = before.get(logger, ([], logger.level))
                logger.handlers[:] = handlers
                logger.setLevel(level)
    out, err = capsys.readouterr()
    return code, out, err


# An optional group of overrides in a documented command: " [key=value ...]", one level of [..] inside.
OPTIONAL = __import__("re").compile(r" \[\w[\w.]*=(?:[^\[\]]|\[[^\[\]]*\])*\]")


def documented_commands(folder: str = "experiment") -> list[tuple[str, list[str]]]:
    """The ``transformer-train`` commands the comments of ``conf/<folder>/*.yaml`` give, each as
    ``(file:line, overrides)``: continuation lines joined, shell quoting undone, optional
    ``[...]`` groups left out; a command with a ``<placeholder>`` is skipped."""
    import shlex

    found = []
    for path in sorted((CONF / folder).glob("*.yaml")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            text = line.lstrip("#").strip()
            if not text.startswith("transformer-train ") or not line.startswith("#"):
                continue
            while text.endswith("\\") and i + 1 < len(lines):
                i += 1
                text = text[:-1] + " " + lines[i].lstrip("#").strip()
            text = OPTIONAL.sub("", text)
            if "<" not in text and "..." not in text:
                found.append((f"{path.stem}:{lines.index(line) + 1}", shlex.split(text, comments=True)[1:]))
    return found
