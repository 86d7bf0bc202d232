"""DvBERT: distil trained cross-encoders into a siamese bi-encoder with teacher annealing (soft -> gold targets).

    python tasks/train_cross_encoder.py --task LCQMC --output runs/LCQMC_cross        # the teacher
    python tasks/dvbert_distill.py --task LCQMC --teacher runs/LCQMC_cross/model --output runs/LCQMC_dvbert
"""

from zoo.training import dvbert_main

if __name__ == "__main__":
    dvbert_main()
