"""Train a cross-encoder (interaction-based matcher) on one task; threshold fitted on valid, applied to test.

    python tasks/train_cross_encoder.py --task LCQMC --head softmax --output runs/LCQMC_cross
"""

from zoo.training import cross_main

if __name__ == "__main__":
    cross_main()
