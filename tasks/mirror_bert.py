"""Mirror-BERT (span-masked duplicate + dropout, InfoNCE tau 0.04) or SimCSE (--k 0): unsupervised sentence encoder.

    python tasks/mirror_bert.py --data-dir ../shared/data --output runs/mirror
"""

from zoo.pretraining import mirror_main

if __name__ == "__main__":
    mirror_main()
