"""Type stub of the trace.dat decoder, a C extension (parsers/_tracedat.c): mypy cannot
read the built module, and its functions and classes are typed by their C code alone."""
from typing import Any

def __getattr__(name: str) -> Any: ...
