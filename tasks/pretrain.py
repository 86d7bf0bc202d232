"""MLM / TaCL / TACO pretraining (continued from a checkpoint, or from scratch with --config L,H,A).

    python tasks/pretrain.py --objective tacl --wwm --from chinese_L-4_H-256_A-4 --steps 2000 --output runs/tacl
    python -c "import zoo; zoo.load_backbone('runs/tacl')"      # the run folder holds a zoo preset
"""

from zoo.pretraining import pretrain_main

if __name__ == "__main__":
    pretrain_main()
