"""Build the native trace.dat decoder against the system's libtracecmd.

Everything declarative lives in setup.cfg; this file exists only because the
C extension's compile and link flags come from pkg-config at build time.
"""
import shlex
import subprocess
import sys

from setuptools import Extension, setup

NATIVE_LIBS = ["libtracecmd", "libtraceevent", "libzstd", "zlib"]
NATIVE_SOURCES = ["parsers/_tracedat.c", "parsers/native/alloc.c", "parsers/native/arrow_c.c",
                  "parsers/native/plan.c", "parsers/native/decoder.c", "parsers/native/kallsyms.c",
                  "parsers/native/chunks.c"]
NATIVE_HEADERS = ["parsers/native/alloc.h", "parsers/native/arrow_c.h", "parsers/native/gbuf.h",
                  "parsers/native/plan.h", "parsers/native/decoder.h", "parsers/native/kallsyms.h",
                  "parsers/native/chunks.h", "parsers/native/fileio.h"]
# Hidden visibility: the module exports PyInit__tracedat (PyMODINIT_FUNC marks it
# visible) and tep_parse_kallsyms (native/kallsyms.h: libtracecmd's call to it must
# land in the module) and nothing else, so its helpers cannot clash with others'.
NATIVE_CFLAGS = ["-O2", "-std=gnu11", "-fvisibility=hidden", "-Wall", "-Wextra", "-Wshadow"]


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
            sources=NATIVE_SOURCES,
            depends=NATIVE_HEADERS,
            include_dirs=["parsers/native"],
            extra_compile_args=pkg_config("--cflags") + NATIVE_CFLAGS,
            extra_link_args=pkg_config("--libs") + ["-lpthread"],
        )
    ],
)
