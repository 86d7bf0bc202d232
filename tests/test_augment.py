"""Word-order rewrites (zoo.data.augment): concrete examples, properties (same characters, a different text,
deterministic), the word-order valid set, and the batch source that adds rewrites to training batches."""

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from zoo.data.augment import word_order_pairs, word_order_rewrite, word_order_rewrites
from zoo.data.pair_files import PairDataset


@pytest.mark.parametrize("text, expected", [
    ("我欠你钱", "你欠我钱"),  # a relation's two parties
    ("他给我发了一条短信", "我给他发了一条短信"),  # pronoun roles, where jieba cuts 给我发 as one word
    ("猫追老鼠", "老鼠追猫"),
    ("苹果比香蕉贵", "香蕉比苹果贵"),  # the two sides of a comparison
    ("为什么苹果手机比华为手机贵", "为什么华为手机比苹果手机贵"),  # whole noun phrases trade places
    ("从北京到上海怎么走", "从上海到北京怎么走"),  # a direction
    ("喜欢打篮球的男生喜欢什么样的女生", "喜欢打篮球的女生喜欢什么样的男生"),  # two nouns
    ("他是我的老师", "我是他的老师"),
])
def test_concrete_rewrites(text, expected):
    assert word_order_rewrite(text) == expected


def test_kinds_and_preference():
    """role rewrites come first; noun pairs joined only by a coordinator (their order rarely matters) are not
    swapped; a modifier moves between nouns; nothing to reorder gives None."""
    assert word_order_rewrites("我欠你钱")[0] == ("role", "你欠我钱")
    assert word_order_rewrite("苹果和香蕉哪个好吃") is None
    assert ("modifier", "五个苹果和三个梨") in word_order_rewrites("三个苹果和五个梨")
    assert "白色的车和红色的房子哪个好" in {r for _, r in word_order_rewrites("红色的车和白色的房子哪个好")}
    for text in ("", "   ", "你好", "怎么更改花呗手机号码", "hello world"):
        assert word_order_rewrite(text) is None, text


def test_named_entities_are_swapped_first():
    """Named entities (jieba's nr/ns/nt/nz) swap whole, with each other or with a common noun; two common nouns
    swap only where no entity is there to swap."""
    rewrites = [r for k, r in word_order_rewrites("库克池位于劳雷尔湖东南面和汤顿河西面") if k == "swap"]
    assert "劳雷尔湖位于库克池东南面和汤顿河西面" in rewrites  # 劳雷尔 + 湖: one noun phrase
    assert all("东南面" in r and "西面" in r for r in rewrites)  # directions (not nouns) stay in place
    rewrites = {r for _, r in word_order_rewrites("学生在北京买了手机")}
    assert rewrites == {"北京在学生买了手机", "学生在手机买了北京"}  # not 手机在北京买了学生
    assert word_order_rewrite("学生买了手机") == "手机买了学生"


def test_the_seed_picks_among_candidates():
    text = "库克池位于劳雷尔湖东南面和汤顿河西面"
    picks = {word_order_rewrite(text, seed) for seed in range(20)}
    assert len(picks) > 1 and picks <= {r for _, r in word_order_rewrites(text)}
    assert [word_order_rewrite(text, s) for s in range(20)] == [word_order_rewrite(text, s) for s in range(20)]


WORDS = ["我", "你", "他", "我们", "北京", "上海", "苹果", "香蕉", "手机", "老师", "学生", "红色", "的", "比", "从",
         "到", "给", "欠", "和", "追", "三个", "是", "贵", "怎么", "了", "吗", "，", "A", " ", "钱", "喜欢"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(WORDS), min_size=0, max_size=12), st.integers(0, 10**6))
def test_every_rewrite_keeps_the_characters_and_differs(words, seed):
    text = "".join(words)
    for _, rewritten in word_order_rewrites(text):
        assert Counter(rewritten) == Counter(text) and rewritten != text
    one = word_order_rewrite(text, seed)
    assert one == word_order_rewrite(text, seed)  # deterministic
    assert (one is None) == (not word_order_rewrites(text))
    if one is not None:
        assert Counter(one) == Counter(text) and one != text


@settings(max_examples=100, deadline=None)
@given(st.text(min_size=0, max_size=30))
def test_any_text_gives_a_permutation_or_none(text):
    one = word_order_rewrite(text)
    assert one is None or (Counter(one) == Counter(text) and one != text)


def test_word_order_pairs_keep_positives_and_add_rewrites():
    data = PairDataset(["我欠你钱", "苹果比香蕉贵", "你好", "猫追老鼠"], ["我欠了你的钱", "香蕉比苹果便宜", "您好", "狗追猫"],
                       np.array([1, 1, 1, 0], "float32"), path="LCQMC.valid.data")
    pairs = word_order_pairs(data)
    rows = list(zip(pairs.texts_a, pairs.texts_b, pairs.labels.tolist()))
    assert rows == [("我欠你钱", "我欠了你的钱", 1), ("苹果比香蕉贵", "香蕉比苹果便宜", 1), ("你好", "您好", 1),
                    ("我欠你钱", "你欠我钱", 0), ("苹果比香蕉贵", "香蕉比苹果贵", 0)]  # the negative pair is left out
    assert "LCQMC.valid.data" in pairs.path
