"""The row reader every user file goes through: columns by index, header name or JSON key;
one error naming file and line for each kind of bad row."""

from __future__ import annotations

import gzip

import pytest

from transformer.data.readers import DataFormatError
from transformer.data.tables import infer_format, iter_rows


def _write(path, text: str | bytes):
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def test_tsv_columns_keep_every_line_and_ignore_extra_columns(tmp_path):
    p = _write(tmp_path / "cmn.txt", "Hi.\t嗨。\tCC-BY\n\t\t\nRun.\t跑。\tCC-BY\n")
    rows = list(iter_rows(p, [1, 0], fmt="tsv"))
    assert rows == [(1, ("嗨。", "Hi.")), (2, ("", "")), (3, ("跑。", "Run."))]


def test_csv_header_names_and_quoted_commas(tmp_path):
    p = _write(tmp_path / "d.csv", 'text,label\n"good, really",pos\n\nbad,neg\n')
    assert list(iter_rows(p, ["text", "label"], header=True)) == [(2, ("good, really", "pos")), (4, ("bad", "neg"))]


def test_jsonl_nested_keys_and_gzip(tmp_path):
    p = tmp_path / "d.jsonl.gz"
    p.write_bytes(gzip.compress(b'{"translation": {"en": "a", "zh": "\xe4\xbd\xa0"}}\n'))
    assert infer_format(p) == "jsonl"
    assert list(iter_rows(p, ["translation.en", "translation.zh"])) == [(1, ("a", "你"))]


@pytest.mark.parametrize(
    "name, content, fmt, columns, line, message",
    [
        ("a.tsv", "x\ty\nonly\n", "tsv", [0, 1], 2, "expected at least 2 columns, found 1"),
        ("a.txt", b"ok\n\xff\n", "text", [0], 2, "not valid UTF-8"),
        ("a.jsonl", '{"translation": {"en": "a"}}\n', "jsonl", ["translation.en", "translation.zh"], 1,
         "key 'translation.zh' missing"),
        ("b.jsonl", '{"en": "a"}\n{"en": \n', "jsonl", ["en"], 2, "not a JSON object"),
        ("a.csv", "text\nx\n", "csv", ["label"], 1, "no column 'label'"),
        ("e.tsv", "", "tsv", [0], 0, "empty file"),
    ],
)
def test_bad_rows_name_file_and_line(tmp_path, name, content, fmt, columns, line, message):
    p = _write(tmp_path / name, content)
    with pytest.raises(DataFormatError, match=message) as e:
        list(iter_rows(p, columns, fmt=fmt, header=(fmt == "csv")))
    assert (e.value.path, e.value.line_no) == (str(p), line)


@pytest.mark.parametrize("name, content, fmt", [("a.tsv", "x\ty\n\nz\tw\n\n", "tsv"),
                                                ("a.jsonl", '{"a": "x"}\n\n{"a": "z"}\n\n', "jsonl"),
                                                ("a.csv", "x,y\n\nz,w\n\n", "csv")])
def test_empty_lines_of_a_table_are_counted_in_a_warning(tmp_path, caplog, name, content, fmt):
    p = _write(tmp_path / name, content)
    rows = list(iter_rows(p, ["a"] if fmt == "jsonl" else [0], fmt=fmt))
    assert [line for line, _ in rows] == [1, 3]
    assert f"{p}: 2 empty line(s) skipped (line 2, 4)" in caplog.text
