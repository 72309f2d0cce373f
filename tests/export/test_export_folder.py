"""Where an export goes: ``write_export_dir`` builds it beside ``output_dir`` and moves it into
place whole. The current folder or one that holds it (``.``, ``..``, the root) is refused in one
line rather than replaced; a symbolic link at ``output_dir`` is replaced by the export (the link
goes, what it points to stays) and nothing is left beside it; a failed export leaves the place
as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from transformer.export.folder import write_export_dir


def model_files(folder: Path) -> None:
    (folder / "config.json").write_text("{}")
    (folder / "model.bin").write_bytes(b"\0" * 16)


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    """The working folder ``tmp_path/a/b``, holding one file of the user's."""
    cwd = tmp_path / "a" / "b"
    cwd.mkdir(parents=True)
    (cwd / "mine.txt").write_text("keep")
    monkeypatch.chdir(cwd)
    return cwd


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("output_dir, named", [(".", "the current folder"), ("..", "holds the current folder"),
                                               ("../..", "holds the current folder"), ("/", "the root folder"),
                                               ("../b", "the current folder")])
def test_the_current_folder_or_one_above_it_is_refused_even_with_force(here, tmp_path, output_dir, named):
    before = tree(tmp_path)
    with pytest.raises(ValueError) as err:
        write_export_dir(output_dir, model_files, force=True)
    message = str(err.value)
    assert message.startswith(f"output_dir={output_dir}: ") and named in message and "\n" not in message
    assert "PosixPath" not in message
    assert tree(tmp_path) == before


@pytest.mark.parametrize("force", [True, False])
def test_a_link_at_output_dir_is_replaced_and_nothing_is_left_beside_it(here, tmp_path, force):
    target = tmp_path / "elsewhere"
    target.mkdir()
    if force:
        (target / "old.txt").write_text("theirs")
    (here / "out").symlink_to(target)
    assert write_export_dir("out", model_files, force=force) == Path("out")
    assert not (here / "out").is_symlink() and sorted(p.name for p in (here / "out").iterdir()) == \
        ["config.json", "model.bin"]
    assert sorted(p.name for p in here.iterdir()) == ["mine.txt", "out"]  # no .out.*.tmp.old
    assert sorted(p.name for p in target.iterdir()) == (["old.txt"] if force else [])


def test_a_link_to_nothing_is_replaced(here):
    (here / "out").symlink_to(here / "nowhere")
    write_export_dir("out", model_files)
    assert (here / "out").is_dir() and not (here / "out").is_symlink()
    assert sorted(p.name for p in here.iterdir()) == ["mine.txt", "out"]


def test_a_link_to_a_folder_with_files_needs_force(here, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "old.txt").write_text("theirs")
    (here / "out").symlink_to(target)
    with pytest.raises(ValueError, match="not empty; pass force=true"):
        write_export_dir("out", model_files)
    assert (here / "out").is_symlink() and [p.name for p in target.iterdir()] == ["old.txt"]


def test_a_failed_export_over_a_link_leaves_the_link(here, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "old.txt").write_text("theirs")
    (here / "out").symlink_to(target)

    def fail(folder: Path) -> None:
        model_files(folder)
        raise RuntimeError("refused")

    with pytest.raises(RuntimeError):
        write_export_dir("out", fail, force=True)
    assert (here / "out").is_symlink() and sorted(p.name for p in here.iterdir()) == ["mine.txt", "out"]
    assert [p.name for p in target.iterdir()] == ["old.txt"]
