import gzip

import numpy as np
import pytest

from helpers import require_shared
from zoo.errors import DataError
from zoo.data.tasks import load_task, task_file
from zoo.data.pair_files import read_pairs, unquote_csv_field


def write(path, text, gz=False):
    data = text.encode("utf-8") if isinstance(text, str) else text
    if gz:
        data = gzip.compress(data)
    path.write_bytes(data)
    return str(path)


def test_senteval_layout_plain_and_gz(tmp_path):
    text = "今天天气好\t今天天气不错\t1\n你是谁\t我在哪\t0\n"
    for gz in (False, True):
        d = read_pairs(write(tmp_path / ("a.data.gz" if gz else "a.data"), text, gz))
        assert d.texts_a == ["今天天气好", "你是谁"]
        assert d.texts_b == ["今天天气不错", "我在哪"]
        np.testing.assert_array_equal(d.labels, [1, 0])


def test_lcqmc_original_header_and_graded_labels(tmp_path):
    d = read_pairs(write(tmp_path / "lcqmc_dev.tsv", "text_a\ttext_b\tlabel\n甲\t乙\t1\n丙\t丁\t0\n"))
    assert len(d) == 2
    d = read_pairs(write(tmp_path / "sts.data", "一个男人\t一个人\t4\n猫\t狗\t0\n"))
    np.testing.assert_array_equal(d.labels, [4, 0])


def test_csv_quoting_is_undone():
    assert unquote_csv_field('"免费领取""饿了么""红包"') == '免费领取"饿了么"红包'
    assert unquote_csv_field('"just quoted"') == "just quoted"
    assert unquote_csv_field('他说"好"') == '他说"好"'  # not CSV-quoted: kept
    assert unquote_csv_field('"a"b"') == '"a"b"'  # an undoubled inner quote: not CSV quoting, kept


@pytest.mark.parametrize("line,problem", [
    ("只有两列\t1", "expected 3 TAB-separated fields, found 2"),
    ("a\tb\tc\td", "found 4"),
    ("a\tb\tyes", "label 'yes' is not a number"),
    ("a\tb\tnan", "not finite"),
])
def test_bad_lines_name_file_and_line(tmp_path, line, problem):
    path = write(tmp_path / "bad.data", f"好\t好的\t1\n{line}\n对\t不对\t0\n")
    with pytest.raises(DataError, match=r"bad\.data, line 2: .*" + problem.split("'")[0]):
        read_pairs(path)
    d = read_pairs(path, skip_bad_lines=True)
    assert (len(d), d.bad_lines, d.bad_line_numbers) == (2, 1, [2])


def test_invalid_utf8_names_line(tmp_path):
    path = write(tmp_path / "bin.data", "好\t好的\t1\n".encode() + b"\xff\xfe\tx\t0\n")
    with pytest.raises(DataError, match="bin.data, line 2: invalid UTF-8"):
        read_pairs(path)
    assert read_pairs(path, skip_bad_lines=True).bad_lines == 1


def test_duplicates_counted(tmp_path):
    d = read_pairs(write(tmp_path / "dup.data", "a\tb\t1\na\tb\t1\na\tb\t0\n"))
    assert (len(d), d.duplicates) == (3, 1)
    assert "1 duplicate rows" in d.summary()


def test_missing_file_and_task(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.data"):
        read_pairs(tmp_path / "nope.data")
    with pytest.raises(FileNotFoundError, match="no BQ train file"):
        task_file("BQ", "train", str(tmp_path))
    with pytest.raises(ValueError, match="unknown task"):
        task_file("QQP", "train", str(tmp_path))


def test_embedded_lcqmc():
    d = load_task("LCQMC", "valid")
    assert len(d) == 8802 and set(np.unique(d.labels)) == {0.0, 1.0}


def test_shared_files_read_with_counts():
    data = require_shared("data")
    counts = {("ATEC", "train"): 38467, ("BQ", "train"): 100000, ("BQ", "test"): 10000, ("PAWSX", "valid"): 2000,
              ("STS-B", "test"): 1361, ("LCQMC", "test"): 12500}
    for (task, split), n in counts.items():
        d = load_task(task, split, str(data))
        assert len(d) == n, (task, split)
    bq = load_task("BQ", "test", str(data))
    assert "免费领取\"饿了么\"红包" in bq.texts_a + bq.texts_b
