"""Speech manifests: paths relative to the manifest, an optional header, and one error line
naming the manifest and the 1-based row for every bad row."""

from __future__ import annotations

import pytest
from speech_files import sine, write_wav

from transformer.data.core.readers import DataFormatError
from transformer.data.speech.manifest import SpeechRow, read_manifest, write_manifest


@pytest.fixture
def corpus(tmp_path):
    """``tmp/data/{a,b}.wav`` and ``tmp/elsewhere/c.wav``."""
    (tmp_path / "data").mkdir()
    (tmp_path / "elsewhere").mkdir()
    for rel in ("data/a.wav", "data/b.wav", "elsewhere/c.wav"):
        write_wav(tmp_path / rel, sine(200.0, 0.1, 8000), 8000)
    return tmp_path


def test_paths_are_relative_to_the_manifest(corpus, monkeypatch):
    (corpus / "lists").mkdir()
    manifest = corpus / "lists" / "train.tsv"
    manifest.write_text(f"../data/a.wav\tone two\n../data/b.wav\t7\n{corpus / 'elsewhere/c.wav'}\t  hello world \n")
    monkeypatch.chdir(corpus / "data")  # the working folder does not matter
    rows = read_manifest(manifest)
    assert [r.path for r in rows] == [corpus / "data/a.wav", corpus / "data/b.wav", corpus / "elsewhere/c.wav"]
    assert [r.text for r in rows] == ["one two", "7", "hello world"]
    assert rows[1].where == f"{manifest}:2"
    path, text, _, speaker = rows[0]
    assert isinstance(rows[0], SpeechRow) and text == "one two" and speaker == ""


@pytest.mark.parametrize("header", ["path\ttranscript", "audio\tlabel", "wav\ttext"])
def test_header_is_detected(corpus, header):
    manifest = corpus / "data" / "m.tsv"
    manifest.write_text(f"{header}\na.wav\tx\n")
    rows = read_manifest(manifest)
    assert len(rows) == 1 and rows[0].where.endswith("m.tsv:2")


def test_header_can_be_said_explicitly(corpus):
    manifest = corpus / "data" / "m.tsv"
    manifest.write_text("name\tsentence\na.wav\tx\n")
    assert len(read_manifest(manifest, header=True)) == 1
    with pytest.raises(DataFormatError, match=r"m.tsv:1: name: no such audio file"):
        read_manifest(manifest)


def test_crlf_and_trailing_blank_lines(corpus):
    manifest = corpus / "data" / "m.tsv"
    manifest.write_bytes(b"a.wav\tx\r\nb.wav\ty\r\n\r\n\n")
    assert [r.text for r in read_manifest(manifest)] == ["x", "y"]


@pytest.mark.parametrize("body, row, message", [
    ("a.wav\tx\nmissing.wav\ty\n", 2, "missing.wav: no such audio file"),
    ("a.wav\tx\n\nb.wav\ty\n", 2, "empty row"),
    ("a.wav\tx\tjo\tfourth\n", 1, "4 tab-separated columns, expected 2 or 3"),
    ("a.wav\tx\nb.wav\ty\tjo\n", 2, "3 tab-separated columns, expected 2 (audio path<TAB>transcript) as in the first row"),
    ("a.wav\tx\tjo\nb.wav\ty\n", 2, "2 tab-separated columns, expected 3 (audio path<TAB>transcript<TAB>speaker)"),
    ("a.wav\tx\tjo\nb.wav\ty\t \n", 2, "b.wav: empty speaker"),
    ("a.wav x\n", 1, "1 tab-separated columns, expected 2"),
    ("a.wav\tx\nb.wav\t  \n", 2, "b.wav: empty transcript"),
    ("a.wav\tx\n\tx\n", 2, "empty audio path"),
    ("", 0, "no utterances"),
])
def test_bad_rows_name_manifest_and_row(corpus, body, row, message):
    manifest = corpus / "data" / "m.tsv"
    manifest.write_text(body)
    with pytest.raises(DataFormatError) as e:
        read_manifest(manifest)
    assert str(e.value).startswith(f"{manifest}:{row}: ") and message in str(e.value)
    assert "\n" not in str(e.value) and e.value.line_no == row


def test_not_utf8_and_missing_manifest(corpus):
    manifest = corpus / "data" / "m.tsv"
    manifest.write_bytes(b"a.wav\tx\nb.wav\t\xff\xfe\n")
    with pytest.raises(DataFormatError, match=r"m.tsv:2: not UTF-8"):
        read_manifest(manifest)
    with pytest.raises(DataFormatError, match=r"nope.tsv:0: cannot read the manifest"):
        read_manifest(corpus / "nope.tsv")


def test_an_optional_speaker_column(corpus):
    """A third column names each row's speaker; without it the speaker is empty."""
    manifest = corpus / "data" / "m.tsv"
    manifest.write_text("path\ttext\tspeaker\na.wav\t4\tjo\nb.wav\t7\t al \n")
    assert [(r.text, r.speaker) for r in read_manifest(manifest)] == [("4", "jo"), ("7", "al")]
    manifest.write_text("a.wav\t4\n")
    assert read_manifest(manifest)[0].speaker == ""
    rows = [(corpus / "data/a.wav", "4", "jo"), (corpus / "elsewhere/c.wav", "zero", "al")]
    written = write_manifest(corpus / "data" / "out.tsv", rows)
    assert written.read_text().splitlines() == ["a.wav\t4\tjo", "../elsewhere/c.wav\tzero\tal"]
    assert [(r.path, r.text, r.speaker) for r in read_manifest(written)] == rows
    with pytest.raises(ValueError, match="with and without a speaker"):
        write_manifest(corpus / "bad.tsv", [rows[0], rows[1][:2]])


def test_write_then_read_round_trip(corpus):
    rows = [(corpus / "data/a.wav", "4 1 7 9"), (corpus / "elsewhere/c.wav", "zero")]
    manifest = write_manifest(corpus / "data" / "out.tsv", rows)
    assert manifest.read_text().splitlines() == ["a.wav\t4 1 7 9", "../elsewhere/c.wav\tzero"]
    assert [(r.path, r.text) for r in read_manifest(manifest)] == rows
    with pytest.raises(ValueError, match="tab or line break"):
        write_manifest(corpus / "bad.tsv", [(corpus / "data/a.wav", "a\tb")])
    assert not (corpus / "bad.tsv").exists()
