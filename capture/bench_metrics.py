"""`record --metrics FILE`: the workload's own results, copied into the bundle.

The command writes its benchmark results (throughput, latency, run time) as
JSON to FILE, whose path it also finds in $KMEMSCOPE_METRICS_OUT. When the
recording ends, FILE is copied into the bundle as `metrics.json`, and parse
loads it into the run's `run_metrics` table. The shape, checked fully at
parse time (kmemscope.parsers.benchmark_results):

    {"metrics": [{"metric": "tps", "value": 1234.5, "unit": "tps", "better": "higher"}]}

Only light checks here (standard library, the host may be minimal): a
regular file, bounded, JSON, written during this recording -- a file left by
an earlier run is not taken for this one's results.
"""
import json
import os
import stat
import time

from kmemscope.common.errors import CaptureError
from kmemscope.common.outfile import write_file

MAX_BYTES = 16 << 20
ENV = "KMEMSCOPE_METRICS_OUT"
BUNDLE_NAME = "metrics.json"


class Expected:
    """A metrics file that the command is to write while it is recorded."""

    def __init__(self, path, command):
        if not command:
            raise CaptureError("--metrics needs a COMMAND that writes the file",
                               "kmemscope record --metrics FILE -o BUNDLE -- COMMAND")
        self.path = os.path.abspath(path)
        if os.path.isdir(self.path):
            raise CaptureError("--metrics %s is a directory" % path, "give a file name")
        self.since_ns = time.time_ns()
        os.environ[ENV] = self.path        # inherited by the command

    def copy_into(self, bundle, say):
        """Copy the file into `bundle` as metrics.json; CaptureError when it is missing or bad."""
        kept = "the bundle %s was written without it" % bundle
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            raise CaptureError("the command did not write --metrics %s; %s" % (self.path, kept),
                               "the command writes its results to $%s" % ENV) from None
        if not stat.S_ISREG(st.st_mode):
            raise CaptureError("--metrics %s is not a regular file; %s" % (self.path, kept))
        if st.st_mtime_ns < self.since_ns:
            raise CaptureError("--metrics %s was not written during this recording; %s"
                               % (self.path, kept), "the file is left from an earlier run")
        if st.st_size > MAX_BYTES:
            raise CaptureError("--metrics %s is %d bytes, more than %d; %s"
                               % (self.path, st.st_size, MAX_BYTES, kept))
        try:
            with open(self.path, "rb") as f:
                data = f.read(MAX_BYTES + 1)
            doc = json.loads(data.decode("utf-8"))
        except (OSError, ValueError, RecursionError) as exc:
            raise CaptureError("--metrics %s is not readable JSON (%s); %s"
                               % (self.path, exc, kept)) from None
        rows = doc.get("metrics") if isinstance(doc, dict) else doc
        if not isinstance(rows, list):
            raise CaptureError("--metrics %s holds no list of metrics; %s" % (self.path, kept),
                               'write {"metrics": [{"metric": ..., "value": ..., "unit": ..., '
                               '"better": "higher"}]}')
        dest = os.path.join(bundle, BUNDLE_NAME)
        write_file(dest, data, 0o600)
        say("added %s: %d metric%s from %s" % (BUNDLE_NAME, len(rows), "" if len(rows) == 1 else "s",
                                               self.path))
