"""Data: the benchmarks' and your tasks (``tasks``: files, splits, synonym groups, text lines), pair files in every
format (``pair_files``), raw text corpora (``corpus``), masked-LM pretraining batches (``pretraining``) and text
augmentation (``augment``: word-order rewrites, Mirror-BERT's span mask). The names below are ``zoo.data``'s
public API."""

from ..errors import ConfigError, DataError, MissingFileError  # the errors its readers raise, as before the move
from ..paths import DATA_DIR
from .pair_files import FORMATS, PairDataset, iter_pairs, open_binary, read_pairs, unquote_csv_field
from .tasks import (
                    SENTENCE_SEPARATORS,
                    SPLIT_NAMES,
                    SPLITS,
                    TASKS,
                    available_tasks,
                    count_lines,
                    custom_task_file,
                    decode_line,
                    default_data_dir,
                    groups_from_positive_pairs,
                    is_synonym_file,
                    is_task,
                    iter_chunks,
                    iter_lines,
                    load_splits,
                    load_task,
                    positive_pair_groups,
                    read_lines,
                    read_synonym_groups,
                    resolve_data_dir,
                    sample_texts,
                    sample_train_texts,
                    task_file,
                    training_groups,
                    truncate_at_punctuation,
)

__all__ = ["ConfigError", "DATA_DIR", "DataError", "MissingFileError", "FORMATS", "SENTENCE_SEPARATORS", "SPLITS", "SPLIT_NAMES", "TASKS", "PairDataset", "available_tasks",
           "count_lines", "custom_task_file", "decode_line", "default_data_dir", "groups_from_positive_pairs",
           "is_synonym_file", "is_task", "iter_chunks", "iter_lines", "iter_pairs", "load_splits", "load_task",
           "open_binary", "positive_pair_groups", "read_lines", "read_pairs", "read_synonym_groups",
           "resolve_data_dir", "sample_texts", "sample_train_texts", "task_file", "training_groups",
           "truncate_at_punctuation", "unquote_csv_field"]
