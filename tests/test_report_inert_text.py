"""Text from traces and manifests is inert in the report (issue 39, item 3).

Two example bundles are copied and their manifests given hostile text in every field the
report shows: label keys and values (the compared label's values are the sides), the host,
the kernel release, and an imported benchmark metric's name. Each holds a Markdown link to
javascript:, a Markdown image from another host, a raw URL, and HTML tags. The report must
hold none of them as a link or an image: every href is an anchor of the page itself, every
image an inline data: URI, and the hostile text is there as text. The oracle is Python's own
HTML parser over the page.
"""
import json
import shutil
import subprocess
import sys
from html.parser import HTMLParser

import pytest

import requirements
from conftest import EXAMPLES
from kmrun import rows_of

MARK = "attacker.example"
PAYLOAD = ("[click](javascript:alert(1)) ![x](http://attacker.example/i.png) "
           "http://attacker.example/raw <a href=\"javascript:alert(2)\">y</a> "
           "<img src=http://attacker.example/j.png> *em* _u_")


def hostile(tag):
    return f"{tag} {PAYLOAD}"


class Tags(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.attrs, self.text = [], []

    def handle_starttag(self, tag, attrs):
        self.attrs += [(tag, k, v or "") for k, v in attrs]

    def handle_data(self, data):
        self.text.append(data)


def kmemscope(*args):
    return subprocess.run([sys.executable, "-m", "kmemscope", *map(str, args)],
                          capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def hostile_dataset(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    ds = tmp / "ds"
    for i, name in enumerate(("kmem-compaction", "thp-faults")):
        if not (EXAMPLES / name).is_dir():
            requirements.skip("setup", f"the committed example {EXAMPLES / name} is missing")
        bundle = tmp / name
        shutil.copytree(EXAMPLES / name, bundle)
        manifest = json.loads((bundle / "manifest.json").read_text())
        manifest["labels"] = {"kernel": hostile(f"side{i}"), "note": hostile("value"),
                              "k[x](javascript:k)": "v"}
        manifest["host"] = hostile("host")
        manifest.setdefault("uname", {})["release"] = hostile("release")
        (bundle / "manifest.json").write_text(json.dumps(manifest))
        (bundle / "metrics.json").write_text(json.dumps({"metrics": [
            {"metric": "m_" + hostile("metric").replace(" ", "_")[:120], "value": 10.0 + i,
             "unit": "%", "better": "higher"}]}))
        out = kmemscope("parse", "-q", bundle, "-o", ds)
        assert out.returncode == 0, out.stderr
    return ds


@pytest.mark.slow   # a comparison report is a notebook run (~25 s of CPU)
def test_report_renders_trace_and_manifest_text_inert(hostile_dataset, tmp_path):
    ds = hostile_dataset
    runs = kmemscope("sql", ds, "SELECT host, labels, kernel_release FROM runs", "--format", "json")
    assert runs.returncode == 0, runs.stderr
    shown = rows_of(runs)
    assert all(MARK in r["host"] for r in shown), "the hostile host did not reach the dataset"
    out = tmp_path / "report.html"
    proc = kmemscope("report", ds, "-o", out, "--compare", "kernel")
    assert proc.returncode == 0, proc.stderr
    page = Tags()
    page.feed(out.read_text())
    for tag, attr, value in page.attrs:
        if attr in ("href", "src", "action", "formaction", "srcset", "poster", "background"):
            assert value.startswith(("#", "data:")), (tag, attr, value[:120])
        assert not (attr.startswith("on") and MARK in value), (tag, attr)
    names = {tag for tag, _, _ in page.attrs}
    assert "iframe" not in names and "object" not in names
    text = "".join(page.text)
    # the hostile text is on the page, as text: in the runs table, the sides and the metric
    assert text.count("javascript:alert(1)") >= 3 and "http://attacker.example/raw" in text
    assert "side0 [click]" in text and "host [click]" in text
