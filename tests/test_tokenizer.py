"""zoo.Tokenizer: ids identical to transformers' BertTokenizer(do_lower_case=True), bert4keras truncation,
batching/padding, decode, simplified vocabularies, speed."""

from __future__ import annotations

import random
import json
import re
import string
import unicodedata

import numpy as np
import pytest

import zoo
from helpers import BERT_VOCAB, CJK_CHARS, read_pairs, require_shared
from zoo.tokenizer.wordpiece import read_vocab

DATASETS = ["LCQMC", "BQ", "STS-B"]


# ------------------------------------------------------------------------------------------------ fixtures
def reference_tokenizer(vocab_path):
    from transformers import BertTokenizer

    return BertTokenizer(str(vocab_path), do_lower_case=True)


@pytest.fixture(scope="module")
def bert_vocab():
    return require_shared(BERT_VOCAB)


@pytest.fixture(scope="module")
def bert_tok(bert_vocab):
    return zoo.Tokenizer(str(bert_vocab))


@pytest.fixture(scope="module")
def bert_ref(bert_vocab):
    return reference_tokenizer(bert_vocab)


@pytest.fixture(scope="module")
def tiny_tok(tiny_vocab):
    return zoo.Tokenizer(str(tiny_vocab[1]))


@pytest.fixture(scope="module")
def tiny_ref(tiny_vocab):
    return reference_tokenizer(tiny_vocab[1])


@pytest.fixture(params=["synthetic", "bert-base-chinese"])
def tok_and_ref(request):
    """(zoo tokenizer, reference tokenizer) on the synthetic vocab and on bert-base-chinese (needs shared)."""
    if request.param == "synthetic":
        return request.getfixturevalue("tiny_tok"), request.getfixturevalue("tiny_ref")
    return request.getfixturevalue("bert_tok"), request.getfixturevalue("bert_ref")


@pytest.fixture(scope="module")
def lcqmc_test():
    return read_pairs(require_shared("data/LCQMC/senteval_cn/LCQMC.test.data"))


def assert_all_equal(texts, got, want, what):
    assert len(got) == len(want) == len(texts)
    bad = [(t, g, w) for t, g, w in zip(texts, got, want) if list(g) != list(w)]
    assert not bad, (f"{what}: {len(bad)} of {len(texts)} differ from the reference; first ones: "
                     + "; ".join(f"{t[:60]!r}: zoo {list(g)[:20]} vs ref {list(w)[:20]}" for t, g, w in bad[:5]))


# ------------------------------------------------------------------------------------------------ edge cases
TRADITIONAL = "國語學習體驗們這裡臺灣與說話時間問題開關東車門愛麗絲處"
FULLWIDTH_PUNCT = "，。！？（）：；、“”‘’《》【】…—～·「」『』"
SPACES = [" ", "\t", "\n", "\r", "\u3000", "\u00a0", "\u2003", "\u2009", "\u202f", "\r\n"]
EMOJI = ["😀", "👍", "🏻", "❤", "\ufe0f", "🇨", "🇳", "🎉", "🤖", "👨\u200d👩\u200d👧", "©", "™"]
ACCENTED = list("éèêëáàâäåÅçñøöüßÉÖÑœæıİ") + ["e\u0301", "a\u0308", "\u0301"]
CONTROLS = ["\x00", "\x01", "\x07", "\x1b", "\x7f", "\x85", "\u200b", "\u200c", "\u200d", "\ufeff", "\u2028",
            "\u2029", "\ufffd", "\u00ad", "\x0b", "\x0c", "\x1f"]
SPECIALS = ["[MASK]", "[SEP]", "[CLS]", "[PAD]", "[UNK]", "[mask]", "[Mask]", "[unused1]", "[ MASK ]", "[MASK"]
OTHER_SCRIPTS = "ひらがなカタカナｶﾀｶﾅ한국어Ελληνικάрусскийעבריתالعربيةहिन्दीไทย"
RARE_CJK = "𠀀𠀁𪚥㐀㐁豈更々〇⺀⿰"
SYMBOLS = "ⅠⅡⅢ①②③½²³℃°±×÷→←•€¥£$%‰∞≈≠≤≥"


def _fullwidth_alnum(rng):
    return chr(rng.choice([rng.randint(0xFF21, 0xFF3A), rng.randint(0xFF41, 0xFF5A), rng.randint(0xFF10, 0xFF19)]))


def _word(rng, lo=1, hi=12):
    letters = string.ascii_letters if rng.random() < 0.3 else string.ascii_lowercase
    return "".join(rng.choice(letters) for _ in range(rng.randint(lo, hi)))


PIECES = {  # class -> random piece generator
    "cjk": lambda r: chr(r.randint(0x4E00, 0x9FFF)),
    "cjk_common": lambda r: r.choice(CJK_CHARS),
    "traditional": lambda r: r.choice(TRADITIONAL),
    "fullwidth_alnum": _fullwidth_alnum,
    "fullwidth_punct": lambda r: r.choice(FULLWIDTH_PUNCT),
    "ascii_alnum": lambda r: r.choice(string.ascii_letters + string.digits),
    "ascii_punct": lambda r: r.choice(string.punctuation),
    "digits": lambda r: "".join(r.choice(string.digits) for _ in range(r.randint(1, 8))),
    "space": lambda r: r.choice(SPACES),
    "emoji": lambda r: r.choice(EMOJI),
    "accented": lambda r: r.choice(ACCENTED),
    "control": lambda r: r.choice(CONTROLS),
    "special": lambda r: r.choice(SPECIALS),
    "word": _word,
    "long_word": lambda r: _word(r, 95, 130),
    "other_script": lambda r: r.choice(OTHER_SCRIPTS),
    "rare_cjk": lambda r: r.choice(RARE_CJK),
    "symbol": lambda r: r.choice(SYMBOLS),
}

FIXED_CASES = [
    "", " ", "   ", "\t", "\n", "\r\n", "\u3000", "\u00a0", " \u3000\t\n\u00a0 ", "\u2003\u2009", "\u3000你好\u3000",
    "😀", "😀😀 hello 😀", "👍🏻", "❤️", "🇨🇳", "我😀你", "👨‍👩‍👧一家",
    "ＡＢＣ１２３", "ａｂｃ", "Ｈｅｌｌｏ　Ｗｏｒｌｄ", "ＡＢＣ１２３你好",
    "，！？（）：", "你好，世界！", "真的吗？（是的）：好", "“引号”《书名》【括号】、。；", ",!?():", "，,！!？?（(）)：:",
    "國語學習", "這裡的體驗很好", "臺灣 香港 澳門",
    "abc123我们", "iPhone12手机多少钱", "BERT模型2019年发布", "3.14159", "1,000,000元", "COVID-19疫情",
    "e-mail地址是abc@def.com", "花呗还款10000元可以吗", "微信5.0版本怎么样",
    "café", "Ångström", "naïve résumé", "Crème Brûlée", "e\u0301", "ÀÉÎÕÜ", "ß", "ﬁ", "ÇA VA", "Ｃａｆé",
    "\x00", "a\x00b", "\x85", "a\x85b", "\u200b", "a\u200bb", "\ufeff开头", "行\u2028分隔", "\u2029", "\x7f",
    "\x01\x02\x03", "\ufffd", "\u200d", "\r", "你\x00好\x85吗\u200b？\ufeff",
    "[MASK]", "[SEP]", "[CLS]", "[PAD]", "[UNK]", "[mask]", "[Mask]", "你[MASK]好", "[MASK][MASK]", "[SEP]中[SEP]",
    "[unused1]", "[ MASK ]", "MASK", "a[MASK]b", "[MASK]。",
    "a" * 99, "a" * 100, "a" * 101, "x" * 150, "超" * 150, "ab" * 60, "hello" + "o" * 120 + " world",
    "ｶﾀｶﾅ", "ひらがなカタカナ", "한국어", "Ελληνικά", "русский", "עברית", "العربية", "हिन्दी", "ไทย",
    "𠀀𠀁𪚥", "㐀㐁", "豈更", "⺀", "々", "〇",
    "ⅠⅡⅢ", "①②③", "½", "²³", "™©®", "℃", "°C", "±×÷", "→←", "…", "——", "～", "·", "•",
    "Hello World", "HELLO", "MiXeD CaSe", "don't", "U.S.A.", "http://www.example.com/path?q=1&b=2",
    "#hashtag @user", "$100 €50 ¥30 £20", "\t\t你\t好\t", "  多个   空格  ", "\n\n换行\n\n",
]


def edge_cases(n_random=1100, seed=20240601):
    """>= 1,000 deterministic edge cases: the fixed list, single-class strings, random mixtures, and two
    10,000-character inputs."""
    rng = random.Random(seed)
    cases = list(FIXED_CASES)
    names = sorted(PIECES)
    for i in range(n_random):
        if i < 10 * len(names):  # ten strings of each single class
            cls = names[i % len(names)]
            parts = [PIECES[cls](rng) for _ in range(rng.randint(1, 8))]
        else:  # mixtures of classes
            parts = [PIECES[rng.choice(names)](rng) for _ in range(rng.randint(1, 25))]
        sep = rng.choice(["", "", " ", rng.choice(SPACES)])
        cases.append(sep.join(parts))
    long_mix = []
    while sum(map(len, long_mix)) < 10_000:
        long_mix.append(PIECES[rng.choice(names)](rng))
    cases.append("".join(long_mix)[:10_000])
    cases.append("".join(rng.choice(CJK_CHARS + "，。abc 123") for _ in range(10_000)))
    return cases


def test_edge_case_generator_is_deterministic_and_large():
    cases = edge_cases()
    assert cases == edge_cases()
    assert len(cases) >= 1000
    assert max(map(len, cases)) == 10_000
    print(f"{len(cases)} tokenizer edge cases")


def test_edge_cases_match_reference(tok_and_ref):
    tok, ref = tok_and_ref
    cases = edge_cases()
    want = ref(cases)["input_ids"]
    got = [tok.encode(t)[0] for t in cases]
    assert_all_equal(cases, got, want, f"{len(cases)} edge cases")
    # the batch path gives the same rows
    batch = tok(cases, maxlen=None)
    assert_all_equal(cases, [r[m == 1] for r, m in zip(batch["token_ids"], batch["padding_mask"])], want,
                     "edge cases, batched")
    # the word pieces are the reference's tokens
    for t in cases[:200]:
        assert tok.tokenize(t) == ref.tokenize(t), t


def test_cased_tokenizer_matches_reference(tiny_vocab):
    """do_lower_case=False: no lower-casing and no accent stripping, as BertTokenizer(do_lower_case=False)."""
    tokens, path = tiny_vocab
    tok = zoo.Tokenizer(tokens, do_lower_case=False)
    from transformers import BertTokenizer

    ref = BertTokenizer(str(path), do_lower_case=False)
    cases = edge_cases()[:400] + ["Hello", "hello", "café", "CAFE", "ＡＢＣ"]
    assert_all_equal(cases, [tok.encode(t)[0] for t in cases], ref(cases)["input_ids"], "cased edge cases")
    assert tok.tokenize("Hello") == ["[UNK]"] and tok.tokenize("hello") == ["hello"]


def test_edge_case_semantics(tiny_tok, tiny_vocab):
    """Properties the reference comparison could hide if both were wrong the same way."""
    tok = tiny_tok
    ids = tok.token_to_id_map
    cls, sep, unk, mask = ids["[CLS]"], ids["[SEP]"], ids["[UNK]"], ids["[MASK]"]
    for blank in ["", " ", "\u3000", "\t\n", "\u00a0", " \u3000\t\n\u00a0", "\u200b", "\x00", "\ufeff"]:
        assert tok.encode(blank)[0] == [cls, sep], repr(blank)
    for full, ascii_ in zip("，！？（）：", ",!?():"):
        got = tok.encode(full)[0]
        assert got == [cls, ids[full], sep] and ids[full] != ids[ascii_], full
    assert tok.encode("ＡＢＣ１２３")[0][1:-1] == [ids["ａ"], ids["##ｂ"], ids["##ｃ"], ids["##１"], ids["##２"], ids["##３"]]
    assert tok.tokenize("Café") == ["cafe"]
    assert tok.encode("[MASK]")[0] == [cls, mask, sep]
    assert mask not in tok.encode("[mask]")[0]
    assert tok.encode("a" * 101)[0] == [cls, unk, sep]
    assert unk not in tok.encode("a" * 100)[0]
    assert tok.encode("我😀你")[0] == [cls, ids["我"], unk, ids["你"], sep]
    assert tok.tokenize("中国") == ["中", "国"]  # CJK split per character even though "中国" is a token
    assert tok.tokenize("unbelievable") == ["un", "##believ", "##able"]
    long = edge_cases()[-1]
    assert len(long) == 10_000 and len(tok.encode(long)[0]) > 5_000
    with pytest.raises(TypeError, match="expected a str"):
        tok.encode(None)
    with pytest.raises(TypeError, match="item 1"):
        tok(["ok", 3])


# ------------------------------------------------------------------------------------------------ datasets
@pytest.mark.parametrize("dataset", DATASETS)
def test_dataset_sentences_match_reference(dataset, bert_tok, bert_ref):
    path = require_shared(f"data/{dataset}/senteval_cn/{dataset}.test.data")
    pairs = read_pairs(path)
    texts = [t for pair in pairs for t in pair]
    want = bert_ref(texts)["input_ids"]
    got = [bert_tok.encode(t)[0] for t in texts]
    assert_all_equal(texts, got, want, f"{dataset} test sentences")
    print(f"{dataset}: {len(texts)} sentences identical to transformers.BertTokenizer")


def test_pairs_match_reference(bert_tok, bert_ref, lcqmc_test, tiny_tok, tiny_ref):
    a, b = zip(*lcqmc_test[:3000])
    want = bert_ref(list(a), list(b))
    for i, (x, y) in enumerate(zip(a, b)):
        ids, segs = bert_tok.encode(x, y)
        assert ids == want["input_ids"][i], (x, y)
        assert segs == want["token_type_ids"][i], (x, y)
    batch = bert_tok(list(a), list(b), maxlen=None)
    for i in range(len(a)):
        m = batch["padding_mask"][i] == 1
        assert batch["token_ids"][i][m].tolist() == want["input_ids"][i]
        assert batch["segment_ids"][i][m].tolist() == want["token_type_ids"][i]
    # edge cases as pairs, on the synthetic vocabulary
    cases = edge_cases()[:600]
    firsts, seconds = cases[::2], cases[1::2]
    want = tiny_ref(firsts, seconds)
    for i, (x, y) in enumerate(zip(firsts, seconds)):
        assert tiny_tok.encode(x, y) == (want["input_ids"][i], want["token_type_ids"][i]), (x, y)


# ------------------------------------------------------------------------------------------------ truncation
def bert4keras_truncate_sequences(maxlen, indices, *sequences):
    """bert4keras.snippets.truncate_sequences, re-implemented: pop at ``indices`` from the longest sequence
    (the first of equals, np.argmax) until the total fits."""
    sequences = [s for s in sequences if s]
    if not isinstance(indices, (list, tuple)):
        indices = [indices] * len(sequences)
    while True:
        lengths = [len(s) for s in sequences]
        if sum(lengths) > maxlen:
            i = int(np.argmax(lengths))
            sequences[i].pop(indices[i])
        else:
            return sequences


def bert4keras_encode(first_ids, second_ids, maxlen):
    """bert4keras Tokenizer.encode on already-tokenized ids: first = [CLS] a [SEP], second = b [SEP]."""
    first, second = list(first_ids), (None if second_ids is None else list(second_ids))
    if maxlen is not None:
        bert4keras_truncate_sequences(maxlen, -2, first, second)
    if second is None:
        return first, [0] * len(first)
    return first + second, [0] * len(first) + [1] * len(second)


def test_pair_truncation_matches_bert4keras(tiny_tok):
    tok = tiny_tok
    cls, sep = tok.cls_id, tok.sep_id
    rng = random.Random(7)
    chars = "".join(dict.fromkeys(CJK_CHARS))
    firsts, seconds, compared, degenerate = [], [], 0, 0
    for _ in range(1500):
        a = "".join(rng.choice(chars) for _ in range(rng.randint(0, 30)))
        b = "".join(rng.choice(chars) for _ in range(rng.randint(0, 30)))
        maxlen = rng.randint(3, 70)
        full_a, full_b = tok.encode(a)[0], tok.encode(b)[0][1:]
        assert len(full_a) == len(a) + 2 and len(full_b) == len(b) + 1  # one piece per character
        want = bert4keras_encode(full_a, full_b, maxlen)
        got = tok.encode(a, b, maxlen=maxlen)
        if want[0][0] != cls:
            # bert4keras' one degenerate case (maxlen 3, [CLS][SEP] vs x[SEP]: it pops [CLS]); zoo keeps
            # [CLS] and removes x instead.
            assert maxlen == 3 and got == ([cls, sep, sep], [0, 0, 1]), (a, b, maxlen, got)
            degenerate += 1
        else:
            assert got == want, (a, b, maxlen)
            compared += 1
        assert len(got[0]) == min(maxlen, len(full_a) + len(full_b))
        firsts.append(a)
        seconds.append(b)
    assert compared > 1400
    # the batch path truncates the same way
    for maxlen in (3, 8, 20, 41):
        batch = tok(firsts[:200], seconds[:200], maxlen=maxlen)
        assert batch["token_ids"].shape[1] <= maxlen
        for i in range(200):
            m = batch["padding_mask"][i] == 1
            ids, segs = tok.encode(firsts[i], seconds[i], maxlen=maxlen)
            assert batch["token_ids"][i][m].tolist() == ids and batch["segment_ids"][i][m].tolist() == segs
    print(f"truncation: {compared} random cases identical to bert4keras, {degenerate} degenerate")


def test_truncation_pops_from_the_longer_part_before_sep(tiny_tok):
    tok = tiny_tok
    ids = tok.token_to_id_map
    c = lambda s: [ids[ch] for ch in s]  # noqa: E731
    cls, sep = tok.cls_id, tok.sep_id
    # [CLS]+a+[SEP] = 6 vs b+[SEP] = 4: pops from a's end (before [SEP]) until 5 vs 4 fits maxlen 9
    assert tok.encode("一二三四", "五我你", maxlen=9)[0] == [cls, *c("一二三"), sep, *c("五我你"), sep]
    # tie 5 vs 5 at maxlen 9: the first part loses
    assert tok.encode("一二三", "四五我你", maxlen=9)[0] == [cls, *c("一二"), sep, *c("四五我你"), sep]
    # second longer: it loses its last piece before [SEP]
    assert tok.encode("一", "二三四五我", maxlen=7)[0] == [cls, *c("一"), sep, *c("二三四"), sep]


def test_single_text_truncation_keeps_cls_and_sep(tiny_tok):
    tok = tiny_tok
    text = "我们在中国的一个大国"
    full = tok.encode(text)[0]
    for maxlen in range(2, len(full) + 3):
        ids, segs = tok.encode(text, maxlen=maxlen)
        want = full if maxlen >= len(full) else full[: maxlen - 1] + [tok.sep_id]
        assert ids == want and segs == [0] * len(want)
        assert ids[0] == tok.cls_id and ids[-1] == tok.sep_id
    with pytest.raises(ValueError, match="maxlen"):
        tok.encode(text, maxlen=1)
    with pytest.raises(ValueError, match="maxlen"):
        tok.encode(text, "你好", maxlen=2)


# ------------------------------------------------------------------------------------------------ batches
def test_call_returns_padded_int32_arrays(tiny_tok):
    tok = tiny_tok
    texts = ["我", "我在中国", "hello world！"]
    out = tok(texts)
    assert set(out) == {"token_ids", "segment_ids", "padding_mask"}
    lengths = [len(tok.encode(t)[0]) for t in texts]
    for k, v in out.items():
        assert isinstance(v, np.ndarray) and v.dtype == np.int32 and v.shape == (3, max(lengths)), k
    for i, t in enumerate(texts):
        n = lengths[i]
        np.testing.assert_array_equal(out["token_ids"][i, :n], tok.encode(t)[0])
        np.testing.assert_array_equal(out["token_ids"][i, n:], tok.pad_id)
        np.testing.assert_array_equal(out["padding_mask"][i], [1] * n + [0] * (max(lengths) - n))
        np.testing.assert_array_equal(out["segment_ids"][i], 0)
    pairs = tok(texts, ["你好", "是", "的"], pad_to=20)
    assert pairs["token_ids"].shape == (3, 20) and pairs["token_ids"].dtype == np.int32
    ids, segs = tok.encode("我在中国", "是")
    np.testing.assert_array_equal(pairs["segment_ids"][1], segs + [0] * (20 - len(segs)))
    np.testing.assert_array_equal(pairs["token_ids"][1], ids + [tok.pad_id] * (20 - len(ids)))
    single = tok("我在中国", maxlen=4)
    assert single["token_ids"].shape == (1, 4)
    np.testing.assert_array_equal(single["token_ids"][0], tok.encode("我在中国", maxlen=4)[0])
    with pytest.raises(ValueError, match="pad_to"):
        tok(texts, pad_to=2)
    with pytest.raises(ValueError, match="second texts"):
        tok(texts, ["a"])
    empty = tok([])
    assert empty["token_ids"].shape == (0, 0)


# ------------------------------------------------------------------------------------------------ decode
def test_decode(tiny_tok):
    tok = tiny_tok
    rt = lambda s: tok.decode(tok.encode(s)[0])  # noqa: E731
    assert rt("我在中国，你好！") == "我在中国，你好！"
    assert rt("hello world") == "hello world"
    assert rt("unbelievable") == "unbelievable"  # ## pieces glued
    assert rt("我的hello world") == "我的hello world"
    assert rt("3.14") == "3.14"
    assert rt("") == ""
    ids = tok.token_to_id_map
    specials = [ids[t] for t in ("[CLS]", "[MASK]", "[SEP]", "[PAD]", "[UNK]")]
    assert tok.decode(specials + [ids["你"], ids["好"], ids["[SEP]"], 0, 0]) == "你好"
    assert tok.decode(np.array([ids["bert"], ids["##s"], ids["我"]], dtype="int32")) == "berts我"


def test_decode_real_sentences(bert_tok, lcqmc_test):
    """CJK-only sentences survive encode -> decode unchanged."""
    n = 0
    for a, _ in lcqmc_test[:2000]:
        ids = bert_tok.encode(a)[0]
        if all(zoo.tokenizer.is_cjk(ch) for ch in a) and bert_tok.unk_id not in ids:
            assert bert_tok.decode(ids) == a
            n += 1
    assert n > 500


# ------------------------------------------------------------------------------------------------ simplify_vocab
def bert4keras_is_cjk(ch):
    code = ord(ch)
    return (0x4E00 <= code <= 0x9FFF or 0x3400 <= code <= 0x4DBF or 0x20000 <= code <= 0x2A6DF
            or 0x2A700 <= code <= 0x2B73F or 0x2B740 <= code <= 0x2B81F or 0x2B820 <= code <= 0x2CEAF
            or 0xF900 <= code <= 0xFAFF or 0x2F800 <= code <= 0x2FA1F)


def bert4keras_is_punctuation(ch):
    code = ord(ch)
    return (33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126
            or unicodedata.category(ch).startswith("P"))


def bert4keras_load_vocab_simplified(tokens, startswith):
    """bert4keras ``load_vocab(simplified=True, startswith=...)``: ``startswith`` first, then every other token
    in id order except those of length > 1 whose stem (``##`` stripped) has a CJK or punctuation char."""
    token_dict = {t: i for i, t in enumerate(tokens)}
    new, keep = {}, []
    for t in startswith:
        new[t] = len(new)
        keep.append(token_dict[t])
    for t, i in sorted(token_dict.items(), key=lambda s: s[1]):
        if t in new:
            continue
        stem = t[2:] if t[:2] == "##" else t
        if len(t) > 1 and any(bert4keras_is_cjk(c) or bert4keras_is_punctuation(c) for c in stem):
            continue
        new[t] = len(new)
        keep.append(i)
    return list(new), keep


STARTSWITH = [("[PAD]", "[UNK]", "[CLS]", "[SEP]"), ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"),
              ("[SEP]", "[PAD]", "[CLS]", "[UNK]")]


@pytest.mark.parametrize("startswith", STARTSWITH)
def test_simplify_vocab_matches_bert4keras_synthetic(tiny_vocab, startswith):
    tokens = tiny_vocab[0]
    new, keep = zoo.simplify_vocab(tokens, startswith=startswith)
    want_new, want_keep = bert4keras_load_vocab_simplified(tokens, startswith)
    assert new == want_new and keep == want_keep
    assert new[: len(startswith)] == list(startswith)
    assert [tokens[i] for i in keep] == new
    for dropped in ("##的", "中国", "##，", "[unused1]", "a.", "##!", "我们", "##。"):
        assert dropped not in new
    for kept in ("##s", "hello", "我", "，", "!", "##a", "ａ"):
        assert kept in new


@pytest.mark.parametrize("startswith", STARTSWITH[:2])
def test_simplify_vocab_matches_bert4keras_real(bert_vocab, startswith):
    tokens = read_vocab(bert_vocab)
    new, keep = zoo.simplify_vocab(tokens, startswith=startswith)
    want_new, want_keep = bert4keras_load_vocab_simplified(tokens, startswith)
    assert new == want_new and keep == want_keep
    assert 12_000 < len(new) < len(tokens)
    print(f"simplified bert-base-chinese vocab: {len(tokens)} -> {len(new)} tokens")


def test_simplified_tokenizer_gives_same_tokens(bert_vocab, bert_tok, lcqmc_test):
    simple = zoo.Tokenizer.from_preset(str(bert_vocab), simplified=True)
    assert simple.keep_tokens is not None and len(simple.vocab) == len(simple.keep_tokens) < len(bert_tok.vocab)
    texts = [t for pair in lcqmc_test for t in pair]
    keep = np.asarray(simple.keep_tokens)
    full_ids, simple_ids = bert_tok.piece_ids(texts), simple.piece_ids(texts)
    for t, f, s in zip(texts, full_ids, simple_ids):
        assert [simple.vocab[i] for i in s] == [bert_tok.vocab[i] for i in f], t
        assert keep[s].tolist() == f, t


def test_simplified_tokenizer_synthetic(tiny_vocab, tiny_tok):
    simple = zoo.Tokenizer.from_preset(str(tiny_vocab[1]), simplified=True)
    for t in edge_cases()[:300]:
        assert simple.tokenize(t) == tiny_tok.tokenize(t), t


# ------------------------------------------------------------------------------------------------ files
def test_load_tokenizer_from_folder_and_save(tmp_path, tiny_vocab, tiny_tok):
    tokens = tiny_vocab[0]
    tiny_tok.save_to_preset(tmp_path)
    assert read_vocab(tmp_path / "vocab.txt") == tokens
    again = zoo.Tokenizer.from_preset(str(tmp_path))
    assert again.vocab == tokens and again.do_lower_case
    cased = zoo.Tokenizer(tokens, do_lower_case=False)
    cased.save_to_preset(tmp_path / "cased")
    assert not zoo.Tokenizer.from_preset(str(tmp_path / "cased")).do_lower_case
    assert zoo.Tokenizer.from_preset(str(tmp_path / "cased")).tokenize("Hello") == ["[UNK]"]


def test_bad_vocab_names_the_line(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n你\n好\n你\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 7: token '你' repeats line 5"):
        zoo.Tokenizer.from_preset(str(path))
    with pytest.raises(ValueError, match=re.escape(str(path))):
        zoo.Tokenizer(str(path))
    path.write_text("[PAD]\n你\n", encoding="utf-8")
    with pytest.raises(ValueError, match="special tokens"):
        zoo.Tokenizer(str(path))
    with pytest.raises(FileNotFoundError, match="vocab"):
        zoo.Tokenizer(str(tmp_path / "nope.txt"))
    with pytest.raises(FileNotFoundError):
        zoo.Tokenizer.from_preset(str(tmp_path / "no_such_folder"))


# ------------------------------------------------------------------------------------------------ speed
def test_a_batch_of_25000_texts_matches_one_at_a_time(bert_tok, lcqmc_test):
    """The batched path (one Rust call for all texts, then assembly and padding) on every LCQMC test sentence gives
    the rows ``encode`` gives one text at a time (its speed is measured in bench/, not asserted here)."""
    texts = [t for pair in lcqmc_test for t in pair]
    assert len(texts) == 25_000
    out = bert_tok(texts, maxlen=64)
    assert out["token_ids"].shape[0] == 25_000
    for i in list(range(0, 25_000, 997)) + [24_999]:
        ids, segments = bert_tok.encode(texts[i], maxlen=64)
        n = int(out["padding_mask"][i].sum())
        assert out["token_ids"][i, :n].tolist() == ids and out["segment_ids"][i, :n].tolist() == segments, i
        assert not out["token_ids"][i, n:].any()


def test_a_preset_vocabulary_is_checked_against_its_manifest(tmp_path, tiny_tok):
    """Tokenizer.from_preset on a zoo preset checks vocab.txt's sha256 first: a changed character that stays valid
    UTF-8, an emptied or a missing file each raise CheckpointError naming vocab.txt (not a wrong vocabulary)."""
    import shutil

    from zoo.errors import CheckpointError

    backbone = zoo.BertBackbone(tiny_tok.vocab_size, 1, 2, 8, 16, max_sequence_length=16)
    backbone.save_to_preset(tmp_path / "intact", tokenizer=tiny_tok)
    assert zoo.Tokenizer.from_preset(tmp_path / "intact").vocab == tiny_tok.vocab
    for how in ("flip", "empty", "missing"):
        folder = tmp_path / how
        shutil.copytree(tmp_path / "intact", folder)
        vocab = folder / "vocab.txt"
        text = vocab.read_text(encoding="utf-8")
        if how == "flip":  # one token's last character changed into another valid character
            lines = text.split("\n")
            lines[-2] = lines[-2][:-1] + chr(ord(lines[-2][-1]) + 1)
            vocab.write_text("\n".join(lines), encoding="utf-8")
        elif how == "empty":
            vocab.write_text("", encoding="utf-8")
        else:
            vocab.unlink()
        with pytest.raises(CheckpointError, match=re.escape(str(vocab))):
            zoo.Tokenizer.from_preset(folder)


def test_a_tokenizer_saved_into_a_preset_joins_its_manifest(tmp_path, tiny_tok):
    """A backbone saved alone, then its tokenizer into the same folder: the vocabulary is still checked at load."""
    from zoo.errors import CheckpointError

    backbone = zoo.BertBackbone(tiny_tok.vocab_size, 1, 2, 8, 16, max_sequence_length=16)
    backbone.save_to_preset(tmp_path / "p")
    tiny_tok.save_to_preset(tmp_path / "p")
    files = json.loads((tmp_path / "p" / "zoo_config.json").read_text())["files"]
    assert {"vocab.txt", "tokenizer_config.json", "model.weights.h5"} <= set(files)
    assert zoo.Tokenizer.from_preset(tmp_path / "p").vocab == tiny_tok.vocab
    vocab = tmp_path / "p" / "vocab.txt"
    vocab.write_text(vocab.read_text(encoding="utf-8").replace("\n", "\n\n", 1), encoding="utf-8")
    with pytest.raises(CheckpointError, match="vocab.txt"):
        zoo.Tokenizer.from_preset(tmp_path / "p")


@pytest.mark.parametrize("lowercase", [True, False])
def test_a_folder_with_only_tokenizer_json_reads_its_wordpiece_vocabulary(tmp_path, tiny_vocab, lowercase):
    """transformers 5 saves a fast tokenizer (tokenizer.json) and no vocab.txt: its WordPiece vocabulary and its
    lowercase setting are read, giving the ids of the vocab.txt it came from; another model type is refused."""
    from tokenizers import BertWordPieceTokenizer

    tokens, vocab_path = tiny_vocab
    BertWordPieceTokenizer({t: i for i, t in enumerate(tokens)}, lowercase=lowercase).save(
        str(tmp_path / "tokenizer.json"))
    loaded = zoo.Tokenizer.from_preset(tmp_path)
    assert loaded.vocab == tokens and loaded.do_lower_case == lowercase
    texts = ["今天天气很好", "Hello World 中国人", "ＡＢＣ我们"]
    assert loaded(texts, maxlen=16)["token_ids"].tolist() == \
        zoo.Tokenizer(tokens, do_lower_case=lowercase)(texts, maxlen=16)["token_ids"].tolist()
    config = json.loads((tmp_path / "tokenizer.json").read_text(encoding="utf-8"))
    config["model"]["type"] = "BPE"
    (tmp_path / "tokenizer.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(zoo.CheckpointError, match="'BPE' tokenizer"):
        zoo.Tokenizer.from_preset(tmp_path)
