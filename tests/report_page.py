"""The study report's page as headless Chromium draws it: every plot loaded, on screen and
inked (a screenshot, not only the DOM), and nothing fetched but the page and its data: URIs.

Used by tests/integration/test_report.py and by scripts/check_report.py on a real study.
"""

from __future__ import annotations

import io
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
PLOTS = 4


def ink(png: bytes) -> tuple[float, int]:
    """(share of pixels that are not near-white, distinct colours) of a screenshot."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    total = image.width * image.height
    counted = image.getcolors(maxcolors=total) or []  # (pixels, colour) for each colour
    inked = sum(n for n, colour in counted
                if isinstance(colour, tuple) and min(colour[:3]) < 230)
    return inked / total, len(counted)


def page_problems(page_path: Path, screenshot: Path | None = None) -> list[str]:
    """What is wrong with the page as drawn (empty when every plot is visible); the whole page's
    screenshot goes to ``screenshot`` when given."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).is_file():
        return [f"{CHROMIUM} is missing (scripts/setup.sh installs Debian's chromium)"]
    problems: list[str] = []
    requests: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            page.on("request", lambda r: requests.append(r.url))
            page.goto(page_path.resolve().as_uri())
            figures = page.locator("figure.plot")
            if figures.count() != PLOTS:
                problems.append(f"{figures.count()} plots, expected {PLOTS}")
            for i in range(figures.count()):
                figure = figures.nth(i)
                name = figure.get_attribute("id") or str(i)
                image = figure.locator("img")
                loaded, width, height = image.evaluate(
                    "img => [img.complete, img.naturalWidth, img.naturalHeight]")
                if not (loaded and width > 100 and height > 100):
                    problems.append(f"plot {name}: not loaded ({loaded}, {width}x{height})")
                    continue
                box = image.bounding_box()
                if box is None or box["width"] <= 200 or box["height"] <= 100:
                    problems.append(f"plot {name}: drawn at {box}")
                    continue
                share, colours = ink(image.screenshot())  # what the screen shows, drawn
                if not (share > 0.02 and colours > 8):
                    problems.append(f"plot {name}: blank on screen ({share:.3f} inked, "
                                    f"{colours} colours)")
            if screenshot is not None:
                screenshot.write_bytes(page.screenshot(full_page=True))
        finally:
            browser.close()
    fetched = [url for url in requests if not url.startswith(("file://", "data:"))]
    if fetched:
        problems.append(f"fetched from elsewhere: {fetched[:3]}")
    return problems
