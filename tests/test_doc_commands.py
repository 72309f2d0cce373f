"""Every command line README.md and BENCHMARKS.md show still composes: each key it sets exists
where the config has it, each group option it picks is there. Placeholders (``<best>``, ``$L/...``,
``D``, ``S``, ``[...]``) are left out: what they stand for is the user's."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
COMMAND = re.compile(r"transformer-(train|evaluate|decode|average|distill|tag|classify|fill|inspect|export|serve)"
                     r"((?:[^`|\n\\]|\\\n)*)")
# Values that stand for something of the user's, not a setting.
PLACEHOLDER = re.compile(r"<[^>]*>|\$[A-Za-z_]|\.\.\.|^[A-Z]$")


def quoted(value: str) -> str:
    """A value as the shell handed it to Hydra: quoted again where it holds spaces."""
    return repr(value) if " " in value else value


def documented_commands() -> list[tuple[str, str, tuple[str, ...]]]:
    found = []
    for doc in ("README.md", "BENCHMARKS.md"):
        text = re.sub(r"<[^>]*>", "<user>", (ROOT / doc).read_text(encoding="utf-8"))
        for match in COMMAND.finditer(text):
            args = match.group(2).replace("\\\n", " ")
            args = args.split(";")[0].split(" (")[0]  # the command, not the prose after it
            try:
                words = shlex.split(args)
            except ValueError:  # an unbalanced quote in a table cell: read it word by word
                words = args.split()
            settings = {}
            for word in words:
                key, _, value = word.rstrip(",").partition("=")
                if value and not key.startswith(("-", "hydra.")) and not PLACEHOLDER.search(value):
                    settings[key] = value  # the last value of a key, as Hydra would refuse two
            found.append((doc, match.group(1), tuple(f"{k}={quoted(v)}" for k, v in settings.items())))
    return sorted(set(found))


COMMANDS = documented_commands()
ENTRY = {"evaluate": "eval"}


def test_the_documents_show_commands():
    assert len(COMMANDS) > 40 and {c for _, c, _ in COMMANDS} >= {"train", "evaluate", "decode", "serve"}


@pytest.mark.parametrize("doc, command, overrides", COMMANDS, ids=lambda v: " ".join(v) if isinstance(v, tuple) else v)
def test_a_documented_command_line_composes(doc, command, overrides):
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            compose(config_name=ENTRY.get(command, command), overrides=list(overrides))
    finally:
        GlobalHydra.instance().clear()
