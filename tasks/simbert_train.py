"""Train SimBERT: UniLM seq2seq generation + in-batch retrieval on groups of similar sentences.

    python tasks/simbert_train.py --data-dir ../shared/data --epochs 1 --output runs/simbert
    python tasks/simbert_train.py --groups my_groups.jsonl   # {"text": ..., "synonyms": [...]} per line
Rerunning with the same --output resumes a killed run.
"""

from zoo.training import simbert_main

if __name__ == "__main__":
    simbert_main()
