"""Build the native trace.dat decoder against the system's libtraceevent, and find the packages.

Everything declarative lives in setup.cfg; this file exists because the C extension's
compile and link flags come from pkg-config at build time, and because the packages are
found under each folder that setup.cfg's package_dir maps (setup.cfg cannot find them
under several roots), so a new sub-package is never left out of the wheel.
"""
import configparser
import shlex
import subprocess
import sys

from setuptools import Extension, find_packages, setup

# libtracecmd is not used: parsers/layout.py reads the file format, and the decoder hands
# the metadata to libtraceevent's public parsers (tep_parse_event, tep_parse_header_page,
# tep_parse_printk_formats, tep_parse_saved_cmdlines, tep_parse_kallsyms), all in
# libtraceevent since 1.2.
NATIVE_LIBS = ["libtraceevent", "libzstd", "zlib"]
LIBTRACEEVENT_SUPPORTED = "1.2"       # and later (tested with 1.7.1)
NATIVE_SOURCES = ["parsers/_tracedat.c", "parsers/native/alloc.c", "parsers/native/arrow_c.c",
                  "parsers/native/plan.c", "parsers/native/decoder.c", "parsers/native/kallsyms.c",
                  "parsers/native/chunks.c"]
NATIVE_HEADERS = ["parsers/native/alloc.h", "parsers/native/arrow_c.h", "parsers/native/gbuf.h",
                  "parsers/native/plan.h", "parsers/native/decoder.h", "parsers/native/kallsyms.h",
                  "parsers/native/chunks.h", "parsers/native/fileio.h"]
# The decoder uses only CPython's limited API of 3.10 (the stable ABI), so one build loads
# in every CPython from 3.10 on; setup.cfg's [bdist_wheel] py_limited_api tags the wheel
# cp310-abi3 to match.
LIMITED_API = ("Py_LIMITED_API", "0x030A0000")
# Hidden visibility: the module exports PyInit__tracedat (PyMODINIT_FUNC marks it
# visible) and nothing else, so its helpers cannot clash with others' and it overrides
# no library's function.
NATIVE_CFLAGS = ["-O2", "-std=gnu11", "-fvisibility=hidden", "-Wall", "-Wextra", "-Wshadow"]


def pkg_config(*args):
    try:
        out = subprocess.run(["pkg-config", *args, *NATIVE_LIBS], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        sys.exit(f"kmemscope: error: pkg-config cannot find {' '.join(NATIVE_LIBS)} "
                 f"({exc}; run `make setup` to install libtraceevent-dev, libzstd-dev and zlib1g-dev)")
    return shlex.split(out)


def check_libtraceevent():
    """One line and no build when libtraceevent is older than the decoder's public API."""
    try:
        found = subprocess.run(["pkg-config", "--modversion", "libtraceevent"],
                               capture_output=True, text=True).stdout.strip()
        ok = subprocess.run(["pkg-config", "--atleast-version", LIBTRACEEVENT_SUPPORTED,
                             "libtraceevent"]).returncode == 0
    except OSError:
        return          # no pkg-config: pkg_config() below says so
    if not ok:
        sys.exit(f"kmemscope: error: libtraceevent {found or '(not found)'}: the decoder supports "
                 f"libtraceevent {LIBTRACEEVENT_SUPPORTED} and later (run `make setup`)")


def mapped_packages(cfg="setup.cfg"):
    """Every package (folder with __init__.py) under each root of setup.cfg's package_dir."""
    parser = configparser.ConfigParser()
    parser.read(cfg)
    mapping = dict(line.split("=", 1) for line in parser["options"]["package_dir"].splitlines()
                   if line.strip() and not line.lstrip().startswith("#"))
    packages = []
    for name, folder in ((n.strip(), f.strip()) for n, f in mapping.items()):
        packages.append(name)
        packages += [f"{name}.{sub}" for sub in find_packages(folder)]
    return sorted(packages)


check_libtraceevent()
setup(
    packages=mapped_packages(),
    ext_modules=[
        Extension(
            "kmemscope.parsers._tracedat",
            sources=NATIVE_SOURCES,
            depends=NATIVE_HEADERS,
            include_dirs=["parsers/native"],
            define_macros=[LIMITED_API],
            py_limited_api=True,
            extra_compile_args=pkg_config("--cflags") + NATIVE_CFLAGS,
            extra_link_args=pkg_config("--libs") + ["-lpthread"],
        )
    ],
)
