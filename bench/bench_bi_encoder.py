"""Speed of zoo vs transformers (torch) on the same checkpoint, measured side by side in one run.

(a) encoding the 25,000 LCQMC test sentences ([CLS] pooling, batch 64): ``SentenceEncoder.encode`` (length-sorted
    batches, XLA) against transformers' BertModel both as a plain loop over the texts in input order (what a
    transformers user writes) and on zoo's own length-sorted batches (the engines alone);
(b) CoSENT training steps (32 pairs, Adam) on identical batches.
Prints sentences/s, steps/s and zoo/torch ratios (median of --repeats interleaved repeats) and writes
bench/results/bi_encoder.json.

    python bench/bench_bi_encoder.py --checkpoint ../shared/models/chinese_L-4_H-256_A-4
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

import zoo
from zoo.data.tasks import load_task
from zoo.tokenizer.wordpiece import batch_length
from zoo.paths import write_json_atomic
from zoo.train.results import versions

HERE = os.path.dirname(os.path.abspath(__file__))


def torch_reference(hf_dir, threads):
    import torch
    import transformers

    torch.set_num_threads(threads)
    model = transformers.BertModel.from_pretrained(hf_dir, add_pooling_layer=False).eval()
    return torch, model


def sorted_batches(tokenizer, texts, batch_size, maxlen, sort=True):
    pieces = tokenizer.piece_ids(texts)
    order = np.argsort([-len(p) for p in pieces], kind="stable") if sort else np.arange(len(texts))
    batches = []
    for start in range(0, len(texts), batch_size):
        rows = [tokenizer.assemble(pieces[i], None, maxlen) for i in order[start:start + batch_size]]
        batches.append(tokenizer.pad(rows, pad_to=batch_length(rows, maxlen) if sort else None))
    return batches


def time_torch_encode(torch, model, batches):
    t = time.perf_counter()
    with torch.inference_mode():
        for b in batches:
            out = model(input_ids=torch.from_numpy(b["token_ids"]).long(),
                        token_type_ids=torch.from_numpy(b["segment_ids"]).long(),
                        attention_mask=torch.from_numpy(b["padding_mask"]).long())
            out.last_hidden_state[:, 0].numpy()
    return time.perf_counter() - t


def torch_cosent_step(torch, model, optimizer):
    def step(batch, labels):
        out = model(input_ids=torch.from_numpy(batch["token_ids"]).long(),
                    token_type_ids=torch.from_numpy(batch["segment_ids"]).long(),
                    attention_mask=torch.from_numpy(batch["padding_mask"]).long())
        z = torch.nn.functional.normalize(out.last_hidden_state[:, 0], dim=-1)
        s = 20 * (z[0::2] * z[1::2]).sum(-1)
        y = torch.from_numpy(labels)
        diff = s[:, None] - s[None, :]
        diff = diff - (1 - (y[:, None] < y[None, :]).float()) * 1e12
        loss = torch.logsumexp(torch.cat([torch.zeros(1), diff.flatten()]), 0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    return step


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default=os.path.join(HERE, "..", "..", "shared", "models", "chinese_L-4_H-256_A-4"),
                   help="folder with google/ and hf/ subfolders")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--train-steps", type=int, default=30)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--limit", type=int, default=None, help="encode only this many sentences (quick runs)")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--out", default=os.path.join(HERE, "results", "bi_encoder.json"))
    args = p.parse_args()
    google, hf = os.path.join(args.checkpoint, "google"), os.path.join(args.checkpoint, "hf")

    test = load_task("LCQMC", "test")
    texts = (test.texts_a + test.texts_b)[: args.limit]
    encoder = zoo.SentenceEncoder.from_preset(google, pooling="cls", maxlen=64)
    torch, ref = torch_reference(hf, args.threads)
    batches = sorted_batches(encoder.tokenizer, texts, args.batch_size, 64)
    plain_batches = sorted_batches(encoder.tokenizer, texts, args.batch_size, 64, sort=False)

    # (a) encoding: warm up (XLA compiles one program per padded length), then interleaved repeats
    encoder.encode(texts[:2000], batch_size=args.batch_size, show_progress_bar=False)
    for b in batches:
        encoder._predict_batch(b)
    time_torch_encode(torch, ref, batches[:5])
    zoo_t, torch_t, plain_t = [], [], []
    for r in range(args.repeats):
        t = time.perf_counter()
        zoo_emb = encoder.encode(texts, batch_size=args.batch_size, show_progress_bar=False)
        zoo_t.append(time.perf_counter() - t)
        torch_t.append(time_torch_encode(torch, ref, batches))
        plain_t.append(time_torch_encode(torch, ref, plain_batches))
        print(f"encode repeat {r + 1}: zoo {len(texts) / zoo_t[-1]:.0f} sent/s, torch (zoo's sorted batches) "
              f"{len(texts) / torch_t[-1]:.0f}, torch (input order) {len(texts) / plain_t[-1]:.0f}", file=sys.stderr)
    with torch.inference_mode():
        b = encoder.tokenizer(texts[:64], maxlen=64)
        ref_cls = ref(input_ids=torch.from_numpy(b["token_ids"]).long(),
                      token_type_ids=torch.from_numpy(b["segment_ids"]).long(),
                      attention_mask=torch.from_numpy(b["padding_mask"]).long()).last_hidden_state[:, 0].numpy()
    ref_cls /= np.linalg.norm(ref_cls, axis=1, keepdims=True)
    parity = float(np.abs(zoo_emb[:64] - ref_cls).max())

    # (b) CoSENT training steps on identical batches
    train = load_task("LCQMC", "train").head(32 * args.train_steps)
    import keras

    from zoo.losses import objective_loss
    from zoo.models.bi_encoder import build_pair_trainer
    from zoo.train import PairBatches

    pairs = PairBatches(encoder.tokenizer, train, 32, 64)
    step_batches = [(x, y) for _, x, y in pairs.epoch(0, 0)]
    trainer = build_pair_trainer(encoder, "cosent")
    trainer.compile(optimizer=keras.optimizers.Adam(2e-5), loss=objective_loss("cosent"))
    ref.train()
    step = torch_cosent_step(torch, ref, torch.optim.Adam(ref.parameters(), lr=2e-5))
    for x, y in step_batches:  # warm-up: compile every padded length once
        trainer.train_on_batch(x, y)
    step(*step_batches[0])
    zoo_s, torch_s = [], []
    for r in range(args.repeats):
        t = time.perf_counter()
        for x, y in step_batches:
            trainer.train_on_batch(x, y)
        zoo_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        for x, y in step_batches:
            step(x, y)
        torch_s.append(time.perf_counter() - t)
        print(f"train repeat {r + 1}: zoo {len(step_batches) / zoo_s[-1]:.2f} steps/s, "
              f"torch {len(step_batches) / torch_s[-1]:.2f} steps/s", file=sys.stderr)

    enc_zoo, enc_torch = len(texts) / statistics.median(zoo_t), len(texts) / statistics.median(torch_t)
    enc_plain = len(texts) / statistics.median(plain_t)
    tr_zoo, tr_torch = len(step_batches) / statistics.median(zoo_s), len(step_batches) / statistics.median(torch_s)
    result = {
        "checkpoint": os.path.abspath(args.checkpoint), "sentences": len(texts), "batch_size": args.batch_size,
        "train_steps": len(step_batches), "pairs_per_step": 32, "repeats": args.repeats, "threads": args.threads,
        "encode_sentences_per_s": {"zoo": enc_zoo, "torch_sorted_batches": enc_torch, "ratio_sorted": enc_zoo / enc_torch,
                                   "torch_input_order": enc_plain, "ratio_input_order": enc_zoo / enc_plain},
        "train_steps_per_s": {"zoo": tr_zoo, "torch": tr_torch, "ratio": tr_zoo / tr_torch},
        "cls_embedding_max_abs_diff_vs_torch": parity, "raw_seconds": {"encode_zoo": zoo_t, "encode_torch": torch_t, "encode_torch_input_order": plain_t,
                                                                       "train_zoo": zoo_s, "train_torch": torch_s},
        "versions": versions(), "command": " ".join(sys.argv),
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    write_json_atomic(args.out, result)
    print("| measure | zoo | torch | zoo/torch |\n|---|---|---|---|")
    print(f"| encode vs a plain transformers loop (input order), sentences/s | {enc_zoo:.0f} | {enc_plain:.0f} | "
          f"{enc_zoo / enc_plain:.2f}x |")
    print(f"| encode, same length-sorted batches (engines alone), sentences/s | {enc_zoo:.0f} | {enc_torch:.0f} | "
          f"{enc_zoo / enc_torch:.2f}x |")
    print(f"| CoSENT train, steps/s (32 pairs) | {tr_zoo:.2f} | {tr_torch:.2f} | {tr_zoo / tr_torch:.2f}x |")
    print(f"\n[CLS] embedding parity vs torch: max |diff| {parity:.2e}; wrote {args.out}")


if __name__ == "__main__":
    main()
