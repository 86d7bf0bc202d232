"""Your own data (zoo.data.pair_files, zoo.data, DataOptions): every format and column naming reads through one reader;
bad rows are named by file, line and column or skipped and counted; your task folders and --train/--valid/--test
files train, evaluate and compare from the command line, and the results name the data set and its files."""

from __future__ import annotations

import csv
import gzip
import json

import numpy as np
import pytest

import zoo

from zoo.config import data_set_name
from zoo.data.pair_files import PairDataset, read_pairs
from zoo.data.tasks import task_file, training_groups
from zoo.errors import ConfigError, DataError

ROWS = [("花呗怎么开通", "如何开通花呗", 1), ("借呗额度, 怎么提高?", '他说"提额"要多久', 0), ("第一行\n第二行", "两行", 0)]


def write_csv(path, header, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([header, *rows])
    return str(path)


def write_jsonl(path, records, gz=False):
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    with (gzip.open(path, "wt", encoding="utf-8") if gz else open(path, "w", encoding="utf-8")) as f:
        f.write(text)
    return str(path)


# ------------------------------------------------------------------------------ formats and columns
def test_csv_with_quotes_commas_and_line_breaks_and_named_columns(tmp_path):
    path = write_csv(tmp_path / "mine.csv", ["question", "candidate", "is_same"], ROWS)
    d = read_pairs(path, columns={"text_a": "question", "text_b": "candidate", "label": "is_same"})
    assert (d.texts_a, d.texts_b, d.labels.tolist()) == ([r[0] for r in ROWS], [r[1] for r in ROWS], [1, 0, 0])
    assert (d.format, d.label_kind) == ("csv", "binary")
    same = read_pairs(path, columns=("text_a=question,text_b=candidate", "label=is_same"))  # the --columns form
    assert same.texts_b == d.texts_b
    labelled = write_csv(tmp_path / "l.csv", ["question", "candidate", "label"], ROWS)  # label recognised
    assert read_pairs(labelled, columns="text_a=question,text_b=candidate").labels.tolist() == [1, 0, 0]


@pytest.mark.parametrize("header", [("sentence1", "sentence2", "label"), ("text_a", "text_b", "label"),
                                    ("q1", "q2", "score"), ("Sentence1", "Sentence2", "Label")])
def test_common_column_names_are_recognised(tmp_path, header):
    d = read_pairs(write_csv(tmp_path / "p.csv", header, ROWS))
    assert d.texts_a[1] == ROWS[1][0] and d.labels.tolist() == [1, 0, 0]


def test_jsonl_parquet_tsv_and_gzip_read_alike(tmp_path):
    records = [{"text_a": a, "text_b": b, "label": y} for a, b, y in ROWS]
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pyarrow.Table.from_pylist(records), tmp_path / "p.parquet")
    tsv = "text_a\ttext_b\tlabel\n" + "".join(f"{a}\t{b}\t{y}\n" for a, b, y in ROWS if "\n" not in a)
    (tmp_path / "p.tsv").write_text(tsv, encoding="utf-8")
    with gzip.open(tmp_path / "p.csv.gz", "wt", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([("text_a", "text_b", "label"), *ROWS])
    read = {name: read_pairs(tmp_path / name) for name in ("p.parquet", "p.tsv", "p.csv.gz")}
    read["p.jsonl.gz"] = read_pairs(write_jsonl(tmp_path / "p.jsonl.gz", records, gz=True))
    for name, d in read.items():
        n = 2 if name == "p.tsv" else 3
        assert d.texts_a == [r[0] for r in ROWS][:n] and d.labels.tolist() == [1, 0, 0][:n], name
    assert {n: d.format for n, d in read.items()} == {"p.parquet": "parquet", "p.tsv": "tsv", "p.csv.gz": "csv",
                                                      "p.jsonl.gz": "jsonl"}


def test_headerless_tab_files_keep_their_layout_and_columns_name_positions(tmp_path):
    (tmp_path / "a.data").write_text("今天天气好\t今天天气不错\t1\n你是谁\t我在哪\t0\n", encoding="utf-8")
    assert read_pairs(tmp_path / "a.data").texts_b == ["今天天气不错", "我在哪"]
    (tmp_path / "b.tsv").write_text("1\t今天天气好\t今天天气不错\n0\t你是谁\t我在哪\n", encoding="utf-8")
    d = read_pairs(tmp_path / "b.tsv", columns="label=1,text_a=2,text_b=3")
    assert (d.texts_a, d.labels.tolist()) == (["今天天气好", "你是谁"], [1, 0])


def test_a_folder_reads_its_shards_in_name_order(tmp_path):
    (tmp_path / "shards").mkdir()
    write_csv(tmp_path / "shards" / "part-1.csv", ["sentence1", "sentence2", "label"], ROWS[1:])
    write_jsonl(tmp_path / "shards" / "part-0.jsonl", [{"sentence1": "甲", "sentence2": "乙", "label": 1}])
    d = read_pairs(tmp_path / "shards")
    assert d.texts_a == ["甲", ROWS[1][0], ROWS[2][0]]


def test_label_kinds_are_detected_or_declared(tmp_path):
    path = write_csv(tmp_path / "g.csv", ["sentence1", "sentence2", "score"], [("一个男人", "一个人", 4.2), ("猫", "狗", 0)])
    d = read_pairs(path)
    assert d.label_kind == "graded" and d.graded and "graded labels 0-4.2" in d.summary()
    with pytest.raises(DataError, match=r"g\.csv, line 2: column 'score' \(label\): 4\.2 is not 0 or 1"):
        read_pairs(path, labels="binary")
    binary = write_csv(tmp_path / "b.csv", ["sentence1", "sentence2", "score"], [("a", "b", 1), ("c", "d", 0)])
    assert read_pairs(binary).label_kind == "binary" and read_pairs(binary, labels="graded").label_kind == "graded"


def test_triplets_read_as_two_pairs_each(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{"query": "花呗怎么开通", "positive": "如何开通花呗", "negative": "花呗怎么关闭"},
                                              {"query": "借呗", "positive": "借呗额度", "negative": "信用卡"}])
    d = read_pairs(path)
    assert d.triplets == 2 and len(d) == 4
    assert list(zip(d.texts_a, d.texts_b, d.labels.tolist())) == [
        ("花呗怎么开通", "如何开通花呗", 1), ("花呗怎么开通", "花呗怎么关闭", 0), ("借呗", "借呗额度", 1), ("借呗", "信用卡", 0)]
    named = write_csv(tmp_path / "t.csv", ["a", "p", "n"], [("甲", "乙", "丙")])
    assert read_pairs(named, columns="anchor=a,positive=p,negative=n").texts_b == ["乙", "丙"]


def test_synonym_groups_or_pairs_make_simbert_groups(tmp_path):
    groups = write_jsonl(tmp_path / "g.jsonl", [{"text": "花呗怎么开通", "synonyms": ["如何开通花呗", "怎样开通花呗"]}])
    assert training_groups(groups) == [["花呗怎么开通", "如何开通花呗", "怎样开通花呗"]]
    pairs = write_csv(tmp_path / "p.csv", ["q1", "q2", "label"], [("甲", "乙", 1), ("乙", "丙", 1), ("丁", "戊", 0)])
    assert sorted(map(sorted, training_groups(pairs))) == [["丙", "乙", "甲"]]
    graded = write_csv(tmp_path / "s.csv", ["q1", "q2", "label"], [("甲", "乙", 4.5)])
    with pytest.raises(DataError, match="graded labels"):
        training_groups(graded)


# ------------------------------------------------------------------------------ bad data
@pytest.mark.parametrize("rows,where", [
    ([("甲", "", 1)], r"line 3: column 'sentence2' \(text_b\): empty text"),
    ([("甲", "乙", "maybe")], r"line 3: column 'label' \(label\): label 'maybe' is not a number"),
    ([("甲", "乙")], r"line 3: column 'label' \(label\): no value"),
])
def test_a_bad_row_is_named_by_file_line_and_column_or_skipped(tmp_path, rows, where):
    path = write_csv(tmp_path / "bad.csv", ["sentence1", "sentence2", "label"], [("好", "好的", 1), *rows, ("对", "错", 0)])
    with pytest.raises(DataError, match=r"bad\.csv, " + where):
        read_pairs(path)
    d = read_pairs(path, skip_bad_lines=True)
    assert (len(d), d.bad_lines, d.bad_line_numbers) == (2, 1, [3])


def test_bad_json_a_missing_column_and_an_empty_file(tmp_path):
    (tmp_path / "x.jsonl").write_text('{"text_a": "a", "text_b": "b", "label": 1}\nnot json\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"x\.jsonl, line 2: not JSON"):
        read_pairs(tmp_path / "x.jsonl")
    cols = write_csv(tmp_path / "c.csv", ["question", "answer", "label"], ROWS)
    with pytest.raises(DataError, match=r"c\.csv: no column for text_a, text_b .*in columns text_a=COLUMN") as e:
        read_pairs(cols)
    assert "--" not in str(e.value)  # the library names its parameter; the command line, its flag:
    from zoo.config import command_line_error
    from zoo.jobs.bi_encoder import BiEncoderConfig

    assert "header has question, answer, label); name them in --columns text_a=COLUMN" in str(
        command_line_error(e.value, BiEncoderConfig))
    with pytest.raises(DataError, match=r"no column 'nope' \(for text_b\); the columns are question, answer, label"):
        read_pairs(cols, columns="text_a=question,text_b=nope")
    (tmp_path / "e.csv").write_text("", encoding="utf-8")
    with pytest.raises(DataError, match=r"e\.csv: no sentence pairs in the file \(an empty file"):
        read_pairs(tmp_path / "e.csv", skip_bad_lines=True)
    (tmp_path / "x.xlsx").write_bytes(b"PK")
    with pytest.raises(DataError, match="unknown pair-file format '.xlsx'"):
        read_pairs(tmp_path / "x.xlsx")
    with pytest.raises(DataError, match="unknown role 'txt'"):
        read_pairs(cols, columns="txt=question")


# ------------------------------------------------------------------------------ task folders and flags
def test_a_task_folder_of_yours_is_a_task(tmp_path):
    folder = tmp_path / "data" / "support"
    folder.mkdir(parents=True)
    for name in ("support.train.csv", "dev.jsonl", "support.test.parquet.bak", "test.tsv.gz"):
        (folder / name).write_text("", encoding="utf-8")
    data = str(tmp_path / "data")
    assert task_file("support", "train", data).endswith("support.train.csv")
    assert task_file("support", "valid", data).endswith("dev.jsonl")
    assert task_file("support", "test", data).endswith("test.tsv.gz")
    with pytest.raises(ConfigError, match="unknown task 'QQP': no folder"):
        task_file("QQP", "train", data)


def test_flags_name_the_data_set_and_refuse_what_does_not_go_together(tmp_path):
    from zoo.jobs.bi_encoder import BiEncoderConfig
    from zoo.jobs.evaluate import EvaluateConfig

    for path, name in [("mydata.valid.csv", "mydata"), ("x/mydata_train.jsonl.gz", "mydata"),
                       ("support/train.csv", "support"), ("shards/", "shards"), ("LCQMC.dev.tsv", "LCQMC")]:
        assert data_set_name(path) == name, path
    c = BiEncoderConfig(train="a/mine.train.csv", valid="a/mine.valid.csv", test="a/mine.test.csv")
    assert c.tasks == ("mine",) and c.reading("mine")["files"] == {"train": "a/mine.train.csv",
                                                                    "valid": "a/mine.valid.csv",
                                                                    "test": "a/mine.test.csv"}
    assert c.reading("PAWSX")["files"] == {}  # --eval-tasks read their own files
    only_train = BiEncoderConfig(train="mine.csv")
    assert only_train.tasks == ("LCQMC",) and only_train.reading("LCQMC")["files"] == {"train": "mine.csv"}
    for kwargs, message in [({"valid": "v.csv"}, "give its --train too"),
                            ({"test": "t.csv", "train": "a.csv"}, "--test without --valid"),
                            ({"valid": "v.csv", "test": "t.csv"}, "give its --train too"),
                            ({"train": "t.csv", "tasks": ("LCQMC", "BQ")}, "one task"),
                            ({"train": "a.csv", "valid": "v.csv", "test": "t.csv", "tasks": ("BQ",)}, "one or the other"),
                            ({"columns": ("text_a",)}, "not ROLE=COLUMN"),
                            ({"tasks": ("MYTASK",)}, "unknown task.*MYTASK.*a folder of yours")]:
        with pytest.raises(ConfigError, match=message):
            BiEncoderConfig(**kwargs)
    from zoo.jobs.simbert import SimBERTConfig

    with pytest.raises(ConfigError, match="--valid and --test go together in this job"):
        SimBERTConfig(train="a/mine.train.csv", valid="a/mine.valid.csv")  # its report needs test
    assert EvaluateConfig(model=zoo.DEFAULT_PRESET, valid="v.csv", test="t.csv").tasks == ("v",)
    with pytest.raises(ConfigError, match="trains nothing"):
        EvaluateConfig(model=zoo.DEFAULT_PRESET, train="x.csv")


# ------------------------------------------------------------------------------ the jobs, end to end
def own_files(tiny_setup, folder, names=("question", "candidate", "same")):  # noqa: F811
    """The synthetic task's splits as CSV files with other column names under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split in ("train", "valid", "test"):
        d = zoo.data.load_task("LCQMC", split, str(tiny_setup / "data"))
        paths[split] = write_csv(folder / f"{folder.name}.{split}.csv", list(names),
                                 list(zip(d.texts_a, d.texts_b, d.labels.astype(int))))
    return paths


COLUMNS = "text_a=question,text_b=candidate,label=same"


@pytest.mark.slow
def test_cli_trains_evaluates_and_compares_on_csv_files_of_yours(tiny_setup, tmp_path, capsys):  # noqa: F811
    from zoo.cli import main

    files = own_files(tiny_setup, tmp_path / "mine")
    common = ["--checkpoint", str(tiny_setup / "preset"), "--maxlen", "16", "--batch-size", "16", "--no-progress",
              "--columns", COLUMNS]
    own = ["--train", files["train"], "--valid", files["valid"], "--test", files["test"]]
    assert main(["train", "bi-encoder", *own, *common, "--lr", "2e-3", "--epochs", "2", "--no-jit-compile",
                 "--output", str(tmp_path / "bi")]) == 0
    results = json.loads((tmp_path / "bi" / "results.json").read_text())
    assert results["config"]["tasks"] == ["mine"] and results["test_spearman"] > 20
    for split, path in files.items():
        record = results["data_files"][split]
        assert record["path"] == path and record["format"] == "csv" and record["labels"] == "binary"
        assert record["pairs"] == len(read_pairs(path, columns=COLUMNS)) and len(record["sha256"]) == 64
    assert "| mine |" in (tmp_path / "bi" / "results.md").read_text()

    assert main(["evaluate", "--model", str(tmp_path / "bi"), "--valid", files["valid"], "--test", files["test"],
                 "--columns", COLUMNS, "--output", str(tmp_path / "eval")]) == 0
    evaluated = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert evaluated["tasks"]["mine"]["test_spearman"] == pytest.approx(results["test_spearman"], abs=1e-4)
    assert "| mine |" in capsys.readouterr().out

    # the same files as a task folder: --tasks NAME --data-dir, as a benchmark
    assert main(["train", "cross-encoder", "--tasks", "mine", "--data-dir", str(tmp_path), *common,
                 "--lr", "1e-3", "--no-jit-compile", "--output", str(tmp_path / "ce")]) == 0
    cross = json.loads((tmp_path / "ce" / "results.json").read_text())
    assert cross["data_files"]["test"]["path"] == files["test"] and cross["config"]["tasks"] == ["mine"]
    assert main(["compare", "--tasks", "mine", "--data-dir", str(tmp_path), "--checkpoint", str(tiny_setup / "preset"),
                 "--columns", COLUMNS, "--limit-train", "96", "--no-progress", "--no-jit-compile",
                 "--output", str(tmp_path / "compare")]) == 0
    compared = json.loads((tmp_path / "compare" / "results.json").read_text())
    assert {r["model"] for r in compared["rows"] if r["task"] == "mine"} == {"cosent", "sbert", "interact"}
    assert compared["data_files"]["mine"]["valid"]["path"] == files["valid"]


@pytest.mark.slow
def test_bad_data_stops_the_job_before_training_and_keeps_the_run_folder(tiny_setup, tmp_path, capsys):  # noqa: F811
    from zoo.cli import main

    files = own_files(tiny_setup, tmp_path / "mine")
    lines = open(files["train"], encoding="utf-8").read().splitlines()
    lines[5] = lines[5].rsplit(",", 1)[0] + ",yes"
    (tmp_path / "bad.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("kept", encoding="utf-8")
    argv = ["train", "bi-encoder", "--train", str(tmp_path / "bad.csv"), "--valid", files["valid"], "--test",
            files["test"], "--columns", COLUMNS, "--checkpoint", str(tiny_setup / "preset"), "--maxlen", "16",
            "--no-progress", "--output", str(run)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "bad.csv, line 6: column 'same' (label): label 'yes' is not a number" in err and "Traceback" not in err
    assert sorted(p.name for p in run.iterdir()) == ["notes.txt"]
    assert main([*argv, "--skip-bad-lines", "--epochs", "1", "--no-jit-compile"]) == 0
    assert json.loads((run / "results.json").read_text())["data_files"]["train"]["bad_lines"] == 1


@pytest.mark.slow
def test_triplets_train_the_in_batch_ranking_loss(tiny_setup, tmp_path):  # noqa: F811
    from zoo.jobs.bi_encoder import BiEncoderConfig, run

    d = zoo.data.load_task("LCQMC", "train", str(tiny_setup / "data"))
    positives = [(a, b) for a, b, y in zip(d.texts_a, d.texts_b, d.labels) if y == 1]
    negatives = [b for b, y in zip(d.texts_b, d.labels) if y == 0]
    path = write_jsonl(tmp_path / "t.train.jsonl", [{"anchor": a, "positive": p, "negative": n}
                                                    for (a, p), n in zip(positives, negatives)])
    valid = str(tiny_setup / "data" / "LCQMC.valid.data")
    config = BiEncoderConfig(train=path, valid=valid, test=valid, checkpoint=str(tiny_setup / "preset"),
                             maxlen=16, batch_size=16, lr=2e-3, epochs=1, progress=False, jit_compile=False,
                             output=str(tmp_path / "run"))
    results = run(config)
    assert results["data_files"]["train"]["triplets"] == min(len(positives), len(negatives))
    assert results["config"]["in_batch_weight"] == 1.0 and list(results["config"]["tasks"]) == ["t"]


def test_pair_dataset_head_keeps_what_reading_found():
    d = PairDataset(["a", "b"], ["c", "d"], np.array([1, 0], "float32"), "x.csv", bad_lines=3, format="csv",
                    label_kind="binary")
    head = d.head(1)
    assert (len(head), head.bad_lines, head.format, head.label_kind, head.total) == (1, 3, "csv", "binary", 2)


# ------------------------------------------------------------------------------ CLUE's AFQMC files, as a newcomer has them
AFQMC = [{"sentence1": "花呗怎么开通", "sentence2": "如何开通花呗", "label": "1"},
         {"sentence1": "借呗怎么还款", "sentence2": "信用卡逾期了怎么办", "label": "0"},
         {"sentence1": "花呗可以分期吗", "sentence2": "花呗能分期付款吗", "label": "1"}]


def test_clue_json_files_read_as_json_lines_or_one_array(tmp_path):
    """CLUE's train.json / dev.json (JSON lines, labels as the strings "0"/"1") read as pairs; a .json file holding
    one JSON array reads alike; a bad line or item is named."""
    lines = write_jsonl(tmp_path / "train.json", [{"id": i, **r} for i, r in enumerate(AFQMC)])
    (tmp_path / "dev.json").write_text("\ufeff\n " + json.dumps(AFQMC, ensure_ascii=False, indent=1),
                                       encoding="utf-8")
    for path in (lines, tmp_path / "dev.json"):
        d = read_pairs(path, labels="binary")
        assert (d.texts_a, d.labels.tolist(), d.format) == ([r["sentence1"] for r in AFQMC], [1, 0, 1], "json"), path
    (tmp_path / "bad.json").write_text(json.dumps([AFQMC[0], ["not", "an", "object"]]), encoding="utf-8")
    with pytest.raises(DataError, match=r"bad\.json, item 2: a JSON list, not an object"):
        read_pairs(tmp_path / "bad.json")
    (tmp_path / "broken.json").write_text('[{"sentence1": "a",\n "sentence2": }]', encoding="utf-8")
    with pytest.raises(DataError, match=r"broken\.json, line 2: not JSON"):
        read_pairs(tmp_path / "broken.json")
    (tmp_path / "afq.test.json").write_text(json.dumps(AFQMC[0]) + "\nnot json\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"afq\.test\.json, line 2: not JSON"):
        read_pairs(tmp_path / "afq.test.json")


def test_a_data_set_is_named_after_its_folder_or_by_tasks(tmp_path, monkeypatch):
    """train.json inside afq/ names the data set "afq", also when given from inside the folder; ``--tasks NAME``
    names it (a name that is no task); a benchmark's name with your files is still refused."""
    from zoo.jobs.bi_encoder import BiEncoderConfig

    folder = tmp_path / "afq"
    folder.mkdir()
    assert data_set_name(folder / "train.json") == "afq" and data_set_name(folder / "afq_dev.json.gz") == "afq"
    monkeypatch.chdir(folder)
    assert data_set_name("train.jsonl") == "afq"
    own = {"train": "train.json", "valid": "dev.json", "test": "test.json"}
    assert BiEncoderConfig(**own).tasks == ("afq",)
    assert BiEncoderConfig(**own, tasks=("afqmc",)).tasks == ("afqmc",)
    with pytest.raises(ConfigError, match="one or the other"):
        BiEncoderConfig(**own, tasks=("BQ",))


def test_results_name_the_command_as_the_user_types_it_again():
    import os

    from zoo.logs import rerun_command

    main = os.path.join(os.path.dirname(zoo.__file__), "__main__.py")  # python -m zoo
    assert rerun_command([main, "train", "bi-encoder", "--train", "my pairs.json"]) == \
        "zoo train bi-encoder --train 'my pairs.json'"
    assert rerun_command(["/venv/bin/zoo", "evaluate"]) == "zoo evaluate"
    assert rerun_command(["tasks/lcqmc_cosent.py", "--seed", "42"]) == "python tasks/lcqmc_cosent.py --seed 42"


def test_continuing_a_trained_encoder_keeps_its_pooling_unless_told(tiny_setup, tmp_path):  # noqa: F811
    """``zoo train bi-encoder --checkpoint zoo-embed-zh-L4`` without --pooling continues with the pooling the
    encoder was trained with (the log says so); a new encoder on a backbone gets cls; an explicit other pooling is
    still refused."""
    from zoo.jobs import bi_encoder, dvbert
    from zoo.jobs.bi_encoder import BiEncoderConfig

    saved = tmp_path / "encoder"
    zoo.SentenceEncoder.from_preset(tiny_setup / "preset", pooling="mean", maxlen=16).save_to_preset(saved)
    flags = {"data_dir": str(tiny_setup / "data"), "maxlen": 16}
    config = BiEncoderConfig(checkpoint=str(saved), output=str(tmp_path / "run"), **flags)
    checkpoint, _ = bi_encoder.start(config)
    assert config.pooling == "mean" and bi_encoder.model(config, checkpoint).pooling == "mean"
    fresh = BiEncoderConfig(checkpoint=str(tiny_setup / "preset"), output=str(tmp_path / "run2"), **flags)
    assert bi_encoder.model(fresh, bi_encoder.start(fresh)[0]).pooling == "cls"
    student = dvbert.DvBERTConfig(checkpoint=str(tiny_setup / "preset"), teachers=(str(saved),),
                                  output=str(tmp_path / "run3"), **flags)
    dvbert.start(student)
    assert student.pooling == "mean"  # the student's own default on a backbone
    told = BiEncoderConfig(checkpoint=str(saved), pooling="cls", output=str(tmp_path / "run4"), **flags)
    with pytest.raises(ConfigError, match="saved with pooling='mean'; it cannot be loaded with pooling='cls'"):
        bi_encoder.model(told, bi_encoder.start(told)[0])


def test_train_with_valid_alone_and_evaluate_a_test_file_alone(tiny_setup, tmp_path, capsys):  # noqa: F811
    """A data set of yours without a test split trains (bi-encoder, cross-encoder: valid chooses, the test columns
    stay empty); ``zoo evaluate`` scores a test file alone (Spearman, Pearson: the threshold-free figures) or a valid
    file alone (Spearman, threshold, valid accuracy)."""
    from zoo.cli import main
    from zoo.jobs.cross_encoder import CrossEncoderConfig
    from zoo.jobs.evaluate import EvaluateConfig

    files = own_files(tiny_setup, tmp_path / "mine")
    config = CrossEncoderConfig(train=files["train"], valid=files["valid"])
    assert config.tasks == ("mine",) and config.kept_splits == ("train", "valid")
    assert EvaluateConfig(model=zoo.DEFAULT_PRESET, test=files["test"]).present(("valid", "test")) == ("test",)
    common = ["--checkpoint", str(tiny_setup / "preset"), "--maxlen", "16", "--batch-size", "16", "--no-progress",
              "--columns", COLUMNS, "--no-jit-compile"]
    assert main(["train", "bi-encoder", "--train", files["train"], "--valid", files["valid"], *common, "--lr", "2e-3",
                 "--output", str(tmp_path / "bi")]) == 0
    results = json.loads((tmp_path / "bi" / "results.json").read_text())
    assert results["config"]["tasks"] == ["mine"] and "test" not in results["data_files"]
    assert results["valid_spearman"] > 0 and "threshold" in results and "test_spearman" not in results
    assert results["command"].startswith("zoo train bi-encoder --train ")
    scored = {}
    for split in ("test", "valid"):
        assert main(["evaluate", "--model", str(tmp_path / "bi"), f"--{split}", files[split], "--columns", COLUMNS,
                     "--output", str(tmp_path / f"eval_{split}")]) == 0
        scored[split] = json.loads((tmp_path / f"eval_{split}" / "results.json").read_text())["tasks"]["mine"]
    assert set(scored["test"]) == {"test_spearman", "test_pearson"}
    assert set(scored["valid"]) == {"valid_spearman", "threshold", "valid_accuracy"}
    assert scored["valid"]["valid_spearman"] == pytest.approx(results["valid_spearman"], abs=1e-4)
