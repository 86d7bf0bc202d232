"""Train a bi-encoder on one task: --task LCQMC|ATEC|BQ|PAWSX|STS-B --loss cosent|sbert|cosine_mse.

    python tasks/train_bi_encoder.py --task STS-B --loss sbert --data-dir ../shared/data
"""

from zoo.training import main

if __name__ == "__main__":
    main()
