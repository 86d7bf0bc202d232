"""The web page of `zoo serve --ui`, driven in a real headless Chromium (Debian's chromium + chromium-driver, through
Selenium): it types two sentences and reads their cosine and same/different at the threshold recorded next to the
model, searches the loaded index, and asks a served SimBERT for paraphrases."""

import json

import keras
import pytest

import zoo
from helpers import chromium, require_module, tiny_sentence_encoder
from zoo.retrieval.base import SemanticIndex
from zoo.serving import ModelServer

require_module("selenium.webdriver", "pip install selenium")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

pytestmark = pytest.mark.slow
CORPUS = ["今天天气很好", "明天天气不好", "我们在中国", "他是谁", "你好世界", "天气预报说明天下雨"]
PAIRS = [("今天天气很好", "今天天气不错"), ("今天天气很好", "我们在中国")]


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with chromium(tmp_path_factory.mktemp("chromium")) as driver:
        yield driver


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """An encoder in a run folder whose results.json records a threshold between the two pairs' cosines, a SimBERT
    preset, and an index; served with --ui."""
    root = tmp_path_factory.mktemp("ui")
    encoder = tiny_sentence_encoder(seed=7)
    cosines = [float(encoder.encode(a) @ encoder.encode(b)) for a, b in PAIRS]
    assert cosines[0] != cosines[1]
    threshold = sum(cosines) / 2
    encoder.save_to_preset(root / "run" / "model")
    (root / "run" / "results.json").write_text(json.dumps({"config": {"task": "LCQMC"}, "threshold": threshold}))
    keras.utils.set_random_seed(8)
    tok = encoder.tokenizer
    zoo.SimBERT(zoo.BertBackbone(tok.vocab_size, 2, 2, 32, 64, max_sequence_length=64, dropout=0.0, with_mlm=True,
                                 pooler_activation="linear"), tok, maxlen=16).save_to_preset(root / "sim")
    index = SemanticIndex(encoder).add(CORPUS)
    index.save(root / "index")
    with ModelServer(models={"enc": root / "run" / "model", "sim": root / "sim"}, port=0, index=root / "index",
                     ui=True, poll_seconds=0) as server:
        yield server, cosines, threshold, index


def wait_for(browser, css, attribute=None, seconds=120):
    def ready(driver):
        found = driver.find_elements(By.CSS_SELECTOR, css)
        if not found:
            return False
        value = found[0].get_attribute(attribute) if attribute else found[0].text
        return value if value else False

    return WebDriverWait(browser, seconds).until(ready)


def test_page_compares_searches_and_paraphrases(browser, served):
    server, cosines, threshold, index = served
    browser.get(f"http://127.0.0.1:{server.rest_port}/")
    wait_for(browser, "#model option")
    assert Select(browser.find_element(By.ID, "model")).first_selected_option.text == "enc"
    assert f"{threshold:.4f} (LCQMC)" in browser.find_element(By.ID, "threshold").text
    for (a, b), cosine, decision in zip(PAIRS, cosines, ("same", "different")):
        for field, text in (("text-a", a), ("text-b", b)):
            browser.find_element(By.ID, field).clear()
            browser.find_element(By.ID, field).send_keys(text)
        browser.find_element(By.ID, "compare").click()
        shown = wait_for(browser, "#cosine")
        assert abs(float(shown.split()[-1]) - cosine) < 2e-4, (shown, cosine)
        assert browser.find_element(By.ID, "decision").text == decision
    assert browser.find_element(By.ID, "status").text == ""

    browser.find_element(By.ID, "query").send_keys("明天天气")
    Select(browser.find_element(By.ID, "mode")).select_by_visible_text("lexical")
    browser.find_element(By.ID, "search").click()
    count = int(wait_for(browser, "#hits", "data-count"))
    shown = [li.text.rsplit(" (", 1)[0] for li in browser.find_elements(By.CSS_SELECTOR, "#hits li")]
    assert shown == [t for t, _ in index.search("明天天气", topk=5, mode="lexical")[0]] and count == len(shown) > 0

    assert not browser.find_element(By.ID, "paraphrase-box").is_displayed()
    Select(browser.find_element(By.ID, "model")).select_by_visible_text("sim")
    assert browser.find_element(By.ID, "paraphrase-box").is_displayed()
    browser.find_element(By.ID, "para-text").send_keys("今天天气很好")
    browser.find_element(By.ID, "paraphrase").click()
    count = int(wait_for(browser, "#paraphrases", "data-count"))
    items = browser.find_elements(By.CSS_SELECTOR, "#paraphrases li")
    assert len(items) == count <= 5 and browser.find_element(By.ID, "status").text == ""
    scores = [float(li.text.rsplit("(", 1)[1].rstrip(")")) for li in items]
    assert scores == sorted(scores, reverse=True)
    assert "今天天气很好" not in [li.text.rsplit(" (", 1)[0] for li in items]


def test_page_shows_api_errors(browser, served):
    server, *_ = served
    browser.get(f"http://127.0.0.1:{server.rest_port}/")
    wait_for(browser, "#model option")
    browser.find_element(By.ID, "query").send_keys("x" * 5000)  # over the server's max_chars
    browser.find_element(By.ID, "search").click()
    assert "characters; the limit is" in wait_for(browser, "#status")
