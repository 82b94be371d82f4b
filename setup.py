"""Build the native trace.dat decoder against the system's libtracecmd.

Everything declarative lives in setup.cfg; this file exists only because the
C extension's compile and link flags come from pkg-config at build time.
"""
import shlex
import subprocess
import sys

from setuptools import Extension, setup

NATIVE_LIBS = ["libtracecmd", "libtraceevent", "libzstd", "zlib"]


def pkg_config(*args):
    try:
        out = subprocess.run(["pkg-config", *args, *NATIVE_LIBS], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        sys.exit(f"kmemscope: error: pkg-config cannot find {' '.join(NATIVE_LIBS)} "
                 f"({exc}; run `make setup` to install libtracecmd-dev and libtraceevent-dev)")
    return shlex.split(out)


setup(
    ext_modules=[
        Extension(
            "kmemscope.parsers._tracedat",
            sources=["parsers/_tracedat.c", "parsers/native/arrow_c.c", "parsers/native/plan.c",
                     "parsers/native/decoder.c"],
            depends=["parsers/native/arrow_c.h", "parsers/native/gbuf.h", "parsers/native/plan.h",
                     "parsers/native/decoder.h"],
            include_dirs=["parsers/native"],
            extra_compile_args=pkg_config("--cflags") + ["-O2", "-std=gnu11", "-Wall", "-Wno-unused-function"],
            extra_link_args=pkg_config("--libs") + ["-lpthread"],
        )
    ],
)
