"""The one file writer: whole files or none, a full disk as one error naming the folder, and
names from checkpoints confined to one path component."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import torch

from transformer import files
from transformer.files import DiskFullError, atomic_open, inside, safe_name, save_torch, write_text

HOSTILE = ["/etc/passwd", "../../escape", "a/../../b", "..", ".", "", "x\x00y", "/", "~root/x", "a\\..\\b",
           "\n\r\t", "con:", "..." + "z" * 400, "ok-name_1.2"]


@pytest.mark.parametrize("name", HOSTILE)
def test_a_safe_name_is_one_component_inside_the_folder(name, tmp_path):
    safe = safe_name(name)
    assert safe and "/" not in safe and "\\" not in safe and "\x00" not in safe
    assert not safe.startswith(".") and len(safe.encode()) <= files.NAME_LIMIT
    path = inside(tmp_path, name)
    assert path.parent == tmp_path
    write_text(path, "x")
    assert [p.name for p in tmp_path.iterdir()] == [safe]


def test_ordinary_names_are_kept():
    for name in ("test_2016_flickr.beam.hyp.en", "sst2.test.predictions.tsv", "zh-en-bpe8000-src-ab12.json"):
        assert safe_name(name) == name


def test_a_write_replaces_the_file_whole(tmp_path):
    path = tmp_path / "out.txt"
    write_text(path, "old\n")
    write_text(path, "new\n")
    assert path.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_a_planted_symlink_is_replaced_not_written_through(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("keep\n")
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "metrics.json").symlink_to(outside)
    write_text(folder / "metrics.json", "{}\n")
    assert outside.read_text() == "keep\n"
    assert not (folder / "metrics.json").is_symlink() and (folder / "metrics.json").read_text() == "{}\n"


def test_an_error_while_writing_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "summary.json"
    write_text(path, "old\n")
    with pytest.raises(RuntimeError):
        with atomic_open(path) as f:
            f.write("half")
            raise RuntimeError("killed")
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_a_full_disk_is_one_error_naming_the_folder_and_leaves_nothing(tmp_path, monkeypatch):
    def full(obj, f, *args, **kwargs):
        f.write(b"\x80" * 1000)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(DiskFullError) as info:
        save_torch({"w": torch.zeros(3)}, tmp_path / "last.ckpt")
    assert str(tmp_path) in str(info.value) and "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_a_full_tmpfs_leaves_no_partial_file(tmp_path):
    """The same on a real file system of 64 KiB, where this machine lets the test mount one."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or os.system(f"mount -t tmpfs -o size=64k tmpfs {mount} 2>/dev/null") != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root); the ENOSPC writer test covers it")
    try:
        write_text(mount / "small.txt", "ok\n")
        with pytest.raises(DiskFullError, match="no space left"):
            write_text(mount / "big.txt", "x" * (1 << 20))
        assert sorted(p.name for p in mount.iterdir()) == ["small.txt"]
        assert (mount / "small.txt").read_text() == "ok\n"
    finally:
        os.system(f"umount {mount}")


def test_a_special_file_is_written_through(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        write_text(fifo, "through\n")
        assert os.read(reader, 100) == b"through\n"
    finally:
        os.close(reader)
    assert Path("/dev/null").exists() and write_text("/dev/null", "x") == Path("/dev/null")


def test_no_data_file_is_tracked_in_git():
    """Data comes from the mirror or a download into an ignored cache, never from the repository."""
    import shutil
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    if shutil.which("git") is None or not (repo / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "ls-files"], cwd=repo, capture_output=True, text=True, check=True).stdout.split()
    data = [p for p in tracked if p.endswith((".gz", ".wav", ".tsv", ".conllu", ".pkl")) or "/cache/" in p
            or p.split("/")[-2:-1] == ["recordings"]]
    assert data == []
