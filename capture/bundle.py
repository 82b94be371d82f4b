"""The bundle directory: create it owner-only, refuse to clobber, write manifest.json."""
import json
import os
import shutil
import tempfile
import time

from kmemscope.common.errors import CaptureError
from kmemscope.common.outfile import write_file


def is_bundle(path):
    """A directory that record wrote (or an empty one): safe to replace with --force."""
    names = set(os.listdir(path))
    return not names or bool(names & {"manifest.json", "trace.dat"})


def check_output(path, force):
    """Refuse an output that exists (unless force and a bundle) or cannot be written."""
    path = os.path.abspath(path)
    parent = os.path.dirname(path)
    if os.path.lexists(path):
        if not force:
            raise CaptureError("output %s already exists" % path,
                               "choose another -o, or pass --force to replace it")
        if not os.path.isdir(path) or os.path.islink(path):
            raise CaptureError("output %s exists and is not a directory" % path,
                               "choose another -o")
        if not is_bundle(path):
            raise CaptureError("output %s is a directory that is not a kmemscope bundle" % path,
                               "choose another -o; --force replaces only bundles")
    if not os.path.isdir(parent):
        raise CaptureError("%s %s" % (parent, "is not a directory" if os.path.exists(parent)
                                      else "does not exist"),
                           "create it first or choose another -o")
    try:  # root passes access(2) on read-only or pseudo filesystems: really try
        os.rmdir(tempfile.mkdtemp(prefix=".kmemscope-probe-", dir=parent))
    except OSError as exc:
        raise CaptureError("cannot write the output in %s: %s" % (parent, exc.strerror),
                           "choose a writable -o")
    return path


def create(path, force):
    """Make the bundle directory (0700), replacing an old bundle when force."""
    path = check_output(path, force)
    if os.path.lexists(path):
        shutil.rmtree(path)
    try:
        os.mkdir(path, 0o700)
        os.chmod(path, 0o700)  # mkdir's mode is filtered by the umask of the caller
    except OSError as exc:
        raise CaptureError("cannot create output %s: %s" % (path, exc.strerror),
                           "choose a writable -o")
    return path


def free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def write_json(path, data, durable=False):
    """Write JSON atomically (owner-only), so a reader never sees half of it."""
    # synced either way: NewFile syncs before its rename (durable kept for callers)
    write_file(path, json.dumps(data, indent=2, sort_keys=True) + "\n", 0o600)


def write_manifest(bundle, manifest):
    write_json(os.path.join(bundle, "manifest.json"), manifest)


def read_manifest(bundle):
    with open(os.path.join(bundle, "manifest.json")) as f:
        return json.load(f)


def restrict_permissions(bundle):
    """0600 files, 0700 directories: trace.dat carries the kernel's symbol addresses."""
    for root, dirs, files in os.walk(bundle):
        os.chmod(root, 0o700)
        for name in files:
            os.chmod(os.path.join(root, name), 0o600)


def timestamp():
    """Now on both clocks: CLOCK_MONOTONIC (the trace's) and wall time."""
    mono = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    real = time.time_ns()
    wall = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(real // 10**9)) + ".%06dZ" % (real % 10**9 // 1000)
    return {"mono_ns": mono, "realtime_ns": real, "wall": wall}
