"""Text augmentations (no heavy imports; jieba is imported on first use).

Word-order rewrites in the spirit of PAWS: the same words in another order, so that who does what to whom (or
which thing has which property) changes. Every rewrite permutes jieba words of the input, so it keeps the input's
multiset of characters, and differs from it. Three kinds, tried in this order of preference:

* ``role``: the two sides of a comparison or a direction, or of a verb relating two parties, trade places
  (苹果比香蕉贵 -> 香蕉比苹果贵, 从北京到上海 -> 从上海到北京, 我欠你钱 -> 你欠我钱, 猫追老鼠 -> 老鼠追猫);
* ``swap``: two nouns (named entities first) trade places (喜欢打篮球的男生喜欢什么样的女生 -> ... 女生 ... 男生);
  nouns joined only by a coordinator (苹果和香蕉) are left alone, as their order rarely matters;
* ``modifier``: the modifiers of two nouns trade places, or a noun's modifier moves to a bare noun
  (红色的车和白色的房子 -> 白色的车和红色的房子).

``word_order_rewrite(text, seed)`` returns one of them (fixed by the seed) or None.

Mirror-BERT's input augmentation, ``span_mask``, lives here too.
"""

from __future__ import annotations

import functools
import random
import re

import numpy as np

from .pair_files import PairDataset

KINDS = ("role", "swap", "modifier")
PRONOUNS = frozenset("我 你 他 她 它 您 我们 你们 他们 她们 它们 咱们 俺 大家 别人".split())
ENTITY_FLAGS = ("nr", "ns", "nt", "nz")  # person, place, organisation, other proper noun (and nrt, nrfg, ...)
COORDINATORS = frozenset("和 与 及 以及 跟 同 或 或者 还是 、 , ， 并且 而且 又 还有".split())
# verbs and prepositions whose left and right nouns play different roles (A 欠 B ≠ B 欠 A)
RELATIONS = frozenset(
    "比 欠 给 借 借给 送 送给 打 骂 爱 恨 喜欢 讨厌 追 娶 嫁 嫁给 告诉 教 帮 帮助 找 问 叫 请 打败 战胜 输给 赢 "
    "认识 关注 欺负 属于 转给 转账给 还给 发给 卖给 租给 对 向 被 把 领先 大于 小于 多于 少于 高于 低于 等于 像".split())
_PRONOUN_RE = "|".join(sorted(PRONOUNS, key=len, reverse=True))
# pronoun-relation-pronoun at the character level (jieba cuts 他给我发 as one word)
PRONOUN_ROLES = re.compile(f"(?=({_PRONOUN_RE})({'|'.join(sorted(RELATIONS, key=len, reverse=True))})({_PRONOUN_RE}))")
DIRECTION_FROM = frozenset("从 由 自".split())
DIRECTION_TO = frozenset("到 去 至 往 飞 回".split())


def _tokens(text):
    """jieba words of ``text`` with their part-of-speech flags."""
    import jieba
    import jieba.posseg

    jieba.setLogLevel(60)
    return [(w.word, w.flag) for w in jieba.posseg.lcut(text)]


def _nominal(word, flag):
    return flag.startswith("n") and flag != "nx" or word in PRONOUNS


def _entity(flag):
    return flag.startswith(ENTITY_FLAGS)


def _modifier(word, flag):
    """An adjective, distinguishing word or numeral+measure word (红色 is flagged n: 'X 的' is handled apart)."""
    return flag in ("a", "b", "m", "mq") and any("\u4e00" <= c <= "\u9fff" for c in word)


def _runs(tokens):
    """Noun phrases as token spans (lo, hi): maximal runs of nominal words; a pronoun is a run on its own."""
    runs, i = [], 0
    while i < len(tokens):
        if tokens[i][0] in PRONOUNS:
            runs.append((i, i + 1))
        elif _nominal(*tokens[i]):
            j = i + 1
            while j < len(tokens) and _nominal(*tokens[j]) and tokens[j][0] not in PRONOUNS:
                j += 1
            runs.append((i, j))
            i = j
            continue
        i += 1
    return runs


def _swap_spans(tokens, a, b):
    """The text with token spans a=(lo, hi) and b (a before b, disjoint) exchanged."""
    (a0, a1), (b0, b1) = a, b
    words = [w for w, _ in tokens]
    return "".join(words[:a0] + words[b0:b1] + words[a1:b0] + words[a0:a1] + words[b1:])


def _role_rewrites(tokens, runs):
    text = "".join(w for w, _ in tokens)
    out = [text[:m.start()] + m[3] + m[2] + m[1] + text[m.start() + len(m[1] + m[2] + m[3]):]
           for m in PRONOUN_ROLES.finditer(text)]
    ending = {hi: (lo, hi) for lo, hi in runs}
    starting = {lo: (lo, hi) for lo, hi in runs}
    for i, (word, _) in enumerate(tokens):
        if word in RELATIONS and i in ending and i + 1 in starting:
            out.append(_swap_spans(tokens, ending[i], starting[i + 1]))
        elif word in DIRECTION_FROM and i + 1 in starting:
            source = starting[i + 1]
            if source[1] < len(tokens) and tokens[source[1]][0] in DIRECTION_TO and source[1] + 1 in starting:
                out.append(_swap_spans(tokens, source, starting[source[1] + 1]))
    return out


def _swap_rewrites(tokens, runs):
    def text(span):
        return "".join(w for w, _ in tokens[span[0]:span[1]])

    def pronoun(span):
        return tokens[span[0]][0] in PRONOUNS

    pairs = [(a, b) for k, a in enumerate(runs) for b in runs[k + 1:]
             if pronoun(a) == pronoun(b) and text(a) != text(b)
             and not all(w in COORDINATORS for w, _ in tokens[a[1]:b[0]])]
    entities = [(a, b) for a, b in pairs if any(_entity(f) for _, f in tokens[a[0]:a[1]] + tokens[b[0]:b[1]])]
    return [_swap_spans(tokens, a, b) for a, b in entities or pairs]


def _modifier_rewrites(tokens, runs):
    """Modifiers right before a noun phrase: a modifier word, or 'X 的'. Two phrases' modifiers swap; one moves to
    a bare noun phrase (one not right after a modifier or 的)."""
    spans = {}  # noun phrase start -> its modifier span
    starts = {lo for lo, _ in runs if tokens[lo][0] not in PRONOUNS}
    for i, (word, flag) in enumerate(tokens):
        if i + 1 in starts and _modifier(word, flag):
            spans[i + 1] = (i, i + 1)
        elif i + 2 in starts and tokens[i + 1][0] == "的" and (flag in ("a", "b") or flag.startswith("n")):
            spans[i + 2] = (i, i + 2)
    words = [w for w, _ in tokens]
    inside = {j for lo, hi in spans.values() for j in range(lo, hi)}
    out = []
    nouns = sorted(spans)
    for k, n1 in enumerate(nouns):
        for n2 in nouns[k + 1:]:
            if spans[n1][1] <= spans[n2][0]:
                out.append(_swap_spans(tokens, spans[n1], spans[n2]))
    for n1, (lo, hi) in spans.items():
        for n2 in sorted(starts - set(spans) - inside):
            if n2 > 0 and tokens[n2 - 1][0] == "的":
                continue
            rest = words[:lo] + words[hi:]  # move span lo:hi before the phrase at n2
            at = n2 if n2 < lo else n2 - (hi - lo)
            out.append("".join(rest[:at] + words[lo:hi] + rest[at:]))
    return out


RULES = {"role": _role_rewrites, "swap": _swap_rewrites, "modifier": _modifier_rewrites}


@functools.lru_cache(maxsize=65536)
def word_order_rewrites(text, kinds=KINDS):
    """Every distinct word-order rewrite of ``text`` as (kind, rewritten text), ``kinds`` in order; each keeps the
    multiset of characters of ``text`` and differs from it."""
    if not text or not text.strip():
        return ()
    tokens = _tokens(text)
    runs = _runs(tokens)
    seen, out = {text}, []
    for kind in kinds:
        for rewritten in RULES[kind](tokens, runs):
            if rewritten not in seen:
                seen.add(rewritten)
                out.append((kind, rewritten))
    return tuple(out)


def word_order_rewrite(text, seed=0, kinds=KINDS):
    """One word-order rewrite of ``text``, or None when no rule applies: a random one (fixed by ``seed``) of the
    most preferred kind that applies (``kinds`` in order of preference)."""
    candidates = word_order_rewrites(text, tuple(kinds))
    if not candidates:
        return None
    best = [r for k, r in candidates if k == candidates[0][0]]
    return random.Random(f"{seed}\x00{text}").choice(best)


def span_mask(text, k=5, min_chars=30, rng=None):
    """Mirror-BERT input augmentation: replace a random span of ``k`` characters by one ``[MASK]``.

    The original leaves strings shorter than ``min_chars`` = 30 characters intact, which for Chinese means
    almost every LCQMC/BQ sentence; zoo makes the guard a parameter (its Mirror-BERT job uses ``min_chars=k+1``).
    The span is cut by position (the original cut at the first occurrence of the substring, a quirk)."""
    if k <= 0 or len(text) <= k or len(text) < min_chars:
        return text
    rng = rng or np.random.default_rng()
    i = int(rng.integers(0, len(text) - k))
    return text[:i] + "[MASK]" + text[i + k:]


WORD_ORDER = "WORDORDER"  # the name of the word-order valid set (``word_order_pairs`` of LCQMC valid)


def word_order_pairs(dataset, seed=0):
    """A word-order test set from a 0/1 pair set (a ``zoo.data.PairDataset``): its paraphrase pairs (a, b, 1), and
    (a, word_order_rewrite(a, seed), 0) for each of their a's that has a rewrite."""
    positives = [(a, b) for a, b, y in zip(dataset.texts_a, dataset.texts_b, dataset.labels) if y == 1]
    negatives = [(a, r) for a, _ in positives if (r := word_order_rewrite(a, seed)) is not None]
    rows = positives + negatives
    return PairDataset([a for a, _ in rows], [b for _, b in rows],
                       np.array([1] * len(positives) + [0] * len(negatives), "float32"),
                       path=f"{dataset.path} (word-order rewrites)")
