"""Parse and print the durations and sizes that the command line takes."""
import re

from kmemscope.common.errors import CaptureError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_DURATION_SCALE = {"ms": 0.001, "s": 1.0, None: 1.0, "m": 60.0, "h": 3600.0}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(i?[bB])?\s*$")
_SIZE_SCALE = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_duration(text):
    """'30s', '2m', '500ms', '1.5' (seconds) -> seconds as float."""
    if text.strip().startswith("-") and _DURATION.match(text.strip()[1:]):
        raise CaptureError("a duration cannot be negative: %r" % text, "write it like 30s or 0")
    m = _DURATION.match(text)
    if not m:
        raise CaptureError("bad duration %r" % text, "write it like 30s, 2m, 500ms or 1h")
    return float(m.group(1)) * _DURATION_SCALE[m.group(2)]


def parse_size(text):
    """'2G', '512M', '64k', '1000' (bytes); binary multiples -> bytes as int."""
    if text.strip().startswith("-") and _SIZE.match(text.strip()[1:]):
        raise CaptureError("a size cannot be negative: %r" % text, "write it like 2G or 512M")
    m = _SIZE.match(text)
    if not m:
        raise CaptureError("bad size %r" % text, "write it like 2G, 512M or 64K")
    return int(float(m.group(1)) * _SIZE_SCALE[m.group(2).lower()])


def format_size(n):
    """Bytes -> a short human string with a binary unit."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return ("%d %s" % (value, unit)) if unit == "B" else ("%.1f %s" % (value, unit))
        value /= 1024
    return "%.1f GiB" % value
