"""The sweep's page, opened in a real headless Chromium (Debian's chromium and chromium-driver; ``make test``
installs them): its structure as the browser built it, not its HTML text, and not its pixels.

Held: the matrix has a row per configuration and a column per model and scenario, each cell's verdict and colour
are the result's, a red cell links to its finding (which names the flags it is red because of), and outside text
(a reason holding markup) is shown as text, never run. Without the browser this test skips, except under ``make
test`` (``KVDOCTOR_BROWSER=required``), where a missing browser is a failure.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from kvdoctor.sweep import page
from kvdoctor.sweep.cell import Verdict
from kvdoctor.sweep.report import Report
from kvdoctor.sweep.result import Refusal
from tests.sweep.runs import planted
from tests.sweep.test_sweeper import MEET, _sweep

HOSTILE = '<img id="pwned" src="x" onerror="document.title=\'pwned\'"> | `x`'


def _browser():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not (chromium and driver):
        why = "no chromium and chromedriver here (apt-get install chromium chromium-driver; make test does)"
        if os.environ.get("KVDOCTOR_BROWSER") == "required":
            pytest.fail(why)
        pytest.skip(why)
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver))


def _rgb(hex_colour: str) -> str:
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r}, {g}, {b}, 1)"  # as WebDriver reports a computed colour


def test_the_page_in_headless_chromium(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rule, _ = planted(*MEET)
    result = _sweep(tmp_path, monkeypatch, rule).run()
    result = replace(result, refused=(*result.refused, Refusal("--page-size 64", HOSTILE)))
    published = Report(result)
    target = tmp_path / "sweep.html"
    page.write(target, result, verdict=published.verdict.word)
    from selenium.webdriver.common.by import By

    browser = _browser()
    try:
        browser.get(target.as_uri())
        assert browser.title.startswith("kvdoctor sweep: lfm2-1.2b")
        assert browser.find_element(By.ID, "verdict").text == "FAILED"
        heads = browser.find_elements(By.CSS_SELECTOR, "#matrix thead th")
        assert [h.text for h in heads] == ["configuration", "lfm2-1.2b\npreempt"]
        rows = browser.find_elements(By.CSS_SELECTOR, "#matrix tbody tr")
        assert len(rows) == len(result.plan) == len(result.cells)
        for row, cell in zip(rows, result.cells, strict=True):
            assert row.find_element(By.CSS_SELECTOR, "th").text == cell.label
            td = row.find_element(By.CSS_SELECTOR, "td.cell")
            assert td.get_attribute("data-verdict") == cell.verdict.value == td.text
            assert td.value_of_css_property("background-color") == _rgb(page.COLOURS[cell.verdict])
        red = next(c for c in result.cells if c.verdict is Verdict.RED)
        link = browser.find_element(By.CSS_SELECTOR, 'td.cell[data-verdict="red"] a')
        link.click()
        assert browser.current_url.endswith(link.get_attribute("href").split("/")[-1])
        finding = browser.find_element(By.CSS_SELECTOR, "section.finding:target")
        assert finding.is_displayed() and red.label in finding.text
        assert "red because of --schedule-policy lpm --enable-mixed-chunk" in finding.text
        refused = browser.find_element(By.ID, "refused").text
        assert HOSTILE in refused and not browser.find_elements(By.ID, "pwned") and browser.title != "pwned"
    finally:
        browser.quit()
