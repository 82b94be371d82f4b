"""Pack a finished bundle into one file to copy off a host: BUNDLE.tar.gz or BUNDLE.tar.zst.

gzip comes from the standard library; zstd needs the `zstd` tool (GNU tar
calls it), which hosts with trace-cmd's v7 files usually have. The archive is
owner-only like the bundle (trace.dat carries kallsyms), is written under a
temporary name and renamed when complete, and `kmemscope parse` reads it as is.
"""
import os
import shutil
import subprocess
import tarfile

from kmemscope.common.errors import CaptureError
from kmemscope.common.outfile import NewFile

FORMATS = ("gz", "zst")


def pack(bundle, fmt):
    """Write the archive beside `bundle`; returns its path. The bundle stays."""
    bundle = os.path.abspath(bundle.rstrip("/"))
    parent, name = os.path.split(bundle)
    target = os.path.join(parent, "%s.tar.%s" % (name, fmt))
    try:
        # a new file of an unpredictable name beside the bundle, renamed into place: a link
        # planted at a guessable name is never written through; nothing is left on failure
        with NewFile(target, 0o600) as out:
            if fmt == "gz":
                with tarfile.open(fileobj=out, mode="w:gz", compresslevel=6) as tar:
                    tar.add(bundle, arcname=name)
            elif fmt == "zst":
                if shutil.which("zstd") is None:
                    raise CaptureError("packing .tar.zst needs the zstd tool",
                                       "install zstd, or use --pack gz")
                done = subprocess.run(["tar", "--zstd", "-cf", "-", "-C", parent, name],
                                      stdout=out, stderr=subprocess.PIPE,
                                      universal_newlines=True)
                if done.returncode:
                    raise CaptureError("tar failed: %s" % done.stderr.strip().splitlines()[-1:])
            else:
                raise CaptureError("unknown pack format %r" % fmt, "use --pack gz or --pack zst")
    except OSError as exc:
        raise CaptureError("cannot pack %s: %s" % (bundle, exc.strerror or exc)) from None
    return target
