"""The main job: CoSENT bi-encoder on LCQMC (embedded data and default model unless flags say otherwise).

    python tasks/lcqmc_cosent.py                         # full LCQMC train, 1 epoch, embedded L4 preset
    python tasks/lcqmc_cosent.py --checkpoint chinese_L-12_H-768_A-12/ --epochs 5 --output runs/bert
Rerunning with the same --output resumes a killed run. See zoo.training for every flag.
"""

from zoo.training import main

if __name__ == "__main__":
    main(task="LCQMC", objective="cosent")
