"""Full-page screenshots of both kinds of report, for docs/img/ (`make screenshots`).

Builds the two reports from the example bundles (a one-run overview of thp-faults, and the
A/B report of kmem-compaction as kernel=a against memory-pressure and thp-faults as kernel=b),
opens each in Debian's headless chromium at a desktop width with a window taller than the
page, cuts the blank tail off and scales the picture down to a palette PNG of a few hundred KB.

    python tools/screenshots.py [--out docs/img] [--work out/screenshots]
"""
import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
WIDTH = 1300            # the report's body is 1250 px wide
TALL = 40000            # taller than any report: the tail is cut off afterwards
SHOT_WIDTH = 760        # the PNG in the docs
MAX_BYTES = 450_000


def run(*args):
    out = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"screenshots: error: {' '.join(map(str, args[:3]))} failed: {out.stderr.strip()[-400:]}")
    return out


def kmemscope(*args):
    return run(sys.executable, "-m", "kmemscope", *args)


def reports(work):
    """(name, html path) of the one-run overview and the A/B report."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    one, ab = work / "one", work / "ab"
    kmemscope("parse", "-q", EXAMPLES / "thp-faults", "-o", one)
    kmemscope("parse", "-q", EXAMPLES / "kmem-compaction", "-o", ab, "--label", "kernel=a")
    kmemscope("parse", "-q", EXAMPLES / "memory-pressure", EXAMPLES / "thp-faults", "-o", ab,
              "--label", "kernel=b")
    kmemscope("report", one, "-o", work / "overview.html")
    kmemscope("report", ab, "-o", work / "compare.html", "--compare", "kernel")
    return [("report-overview", work / "overview.html"), ("report-compare", work / "compare.html")]


def screenshot(browser, html, png):
    from PIL import Image, ImageChops

    raw = png.with_suffix(".raw.png")
    run(browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
        f"--window-size={WIDTH},{TALL}", f"--screenshot={raw}", html.resolve().as_uri())
    with Image.open(raw) as im:
        im = im.convert("RGB")
        box = ImageChops.difference(im, Image.new("RGB", im.size, "white")).getbbox()
        im = im.crop((0, 0, WIDTH, min(TALL, box[3] + 24)))
        width = SHOT_WIDTH
        while True:
            small = im.resize((width, round(im.height * width / WIDTH)), Image.LANCZOS)
            # 48 colours keep the sides' colours true; narrower before fewer colours
            small.quantize(colors=48, method=Image.Quantize.MEDIANCUT).save(png, optimize=True)
            if png.stat().st_size <= MAX_BYTES or width <= 520:
                break
            width -= 40
    raw.unlink()
    return png.stat().st_size, small.size


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "img"))
    ap.add_argument("--work", default=str(ROOT / "out" / "screenshots"))
    ap.add_argument("--reuse", action="store_true", help="take the reports already in --work")
    args = ap.parse_args(argv)
    browser = shutil.which("chromium")
    if not browser:
        sys.exit("screenshots: error: no chromium (apt-get install -y chromium)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work)
    made = ([("report-overview", work / "overview.html"), ("report-compare", work / "compare.html")]
            if args.reuse else reports(work))
    for name, html in made:
        size, (w, h) = screenshot(browser, html, out / f"{name}.png")
        print(f"{out / name}.png: {w}x{h} px, {size / 1000:.0f} kB")


if __name__ == "__main__":
    main()
