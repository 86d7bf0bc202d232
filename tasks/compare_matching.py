"""Representation vs interaction (CoSENT 二): CoSENT, Sentence-BERT and a cross-encoder per task on one backbone;
thresholds fitted on valid; test accuracy with bootstrap 95% intervals, Spearman, and PNG plots.

    python tasks/compare_matching.py --tasks LCQMC,BQ,ATEC,PAWSX --data-dir ../shared/data --output runs/compare
PAWS-X has no train split here: its rows use the models trained on LCQMC (transfer).
"""

from zoo.reports import main

if __name__ == "__main__":
    main()
