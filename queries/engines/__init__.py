"""Engines: where the analyses' SQL runs. One spec object says which.

    EngineSpec()                                   DuckDB in this process (the default)
    EngineSpec("spark")                            Spark, local[*]
    EngineSpec("spark", "spark://host:7077", (("spark.executor.memory", "8g"),))

The command line, the Python API and the report notebooks build an EngineSpec
once from what the user chose and pass it along unchanged; `engine_for(spec)`
gives the engine object (base.Engine): it runs a named analysis's plan
(`run_plan`) and opens backends for ad-hoc SQL (`open`). A Spark engine is one SparkSession,
made on first use and shared by every caller with an equal spec in this
process, until `shutdown()` (the command line calls it when a verb ends) or
`release(spec)`.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Union

from kmemscope.common.errors import QueryError

from .base import Backend, Engine, PlanRows, plan_of_runs  # noqa: F401 - the interface, named here for readers

ENGINES = ("duckdb", "spark")
DEFAULT_MASTER = "local[*]"

ConfArg = Union[Mapping[str, str], Iterable[str], Iterable[tuple], None]


@dataclass(frozen=True)
class EngineSpec:
    """Which engine runs the SQL: a value, hashable, safe to hand to a notebook."""

    name: str = "duckdb"
    master: Optional[str] = None                 # Spark only; None: local[*]
    conf: tuple = ()                             # Spark only; ((key, value), ...), sorted

    def __post_init__(self):
        if self.name not in ENGINES:
            raise QueryError(f"unknown engine {self.name!r}", f"engines: {', '.join(ENGINES)}")
        if self.name != "spark" and (self.master or self.conf):
            raise QueryError("a Spark master or Spark settings need the spark engine",
                             "add --engine spark (engine='spark' in Python)")
        object.__setattr__(self, "conf", tuple(sorted(_conf_pairs(self.conf))))

    @classmethod
    def of(cls, engine: "EngineSpec | str | None" = None, master: Optional[str] = None,
           conf: ConfArg = None) -> "EngineSpec":
        """A spec from what a user typed: a name (None: duckdb), a master URL and settings
        ({key: value} or ["key=value", ...]); an EngineSpec is returned as it is."""
        if isinstance(engine, EngineSpec):
            if master or conf:
                raise QueryError("give either an EngineSpec or a master and settings, not both")
            return engine
        return cls(engine or "duckdb", master or None, tuple(_conf_pairs(conf)))

    @property
    def is_spark(self) -> bool:
        return self.name == "spark"

    def params(self) -> dict:
        """The spec as notebook parameters (plain strings and lists)."""
        return {"engine": self.name, "spark_master": self.master or "",
                "spark_conf": [f"{k}={v}" for k, v in self.conf]}

    def __str__(self):
        if not self.is_spark:
            return self.name
        return f"spark ({self.master or DEFAULT_MASTER})"


def _conf_pairs(conf: ConfArg):
    if not conf:
        return []
    items = conf.items() if isinstance(conf, Mapping) else conf
    out = []
    for item in items:
        if isinstance(item, str):
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise QueryError(f"Spark setting {item!r} is not KEY=VALUE",
                                 "e.g. spark.executor.memory=8g")
            out.append((key.strip(), value))
        else:
            key, value = item
            out.append((str(key), str(value)))
    return out


_DUCKDB = None
_spark_engines: dict = {}
_lock = threading.Lock()


def engine_for(spec: "EngineSpec | str | None" = None) -> Engine:
    """The engine object for `spec` (shared per spec in this process)."""
    global _DUCKDB
    spec = EngineSpec.of(spec)
    with _lock:
        if not spec.is_spark:
            if _DUCKDB is None:
                from .duckdb_engine import DuckDBEngine
                _DUCKDB = DuckDBEngine()
            return _DUCKDB
        if spec not in _spark_engines:
            from .spark_engine import SparkEngine
            _spark_engines[spec] = SparkEngine(master=spec.master or DEFAULT_MASTER,
                                               conf=dict(spec.conf))
        return _spark_engines[spec]


def release(spec: "EngineSpec | str | None") -> None:
    """Stop the session of `spec`'s engine, if one was started."""
    spec = EngineSpec.of(spec)
    with _lock:
        engine = _spark_engines.pop(spec, None)
    if engine is not None:
        engine.close()


def shutdown() -> None:
    """Stop every engine session this process started."""
    with _lock:
        engines = list(_spark_engines.values())
        _spark_engines.clear()
    for engine in engines:
        engine.close()


def resolve(engine: "EngineSpec | Engine | str | None") -> Engine:
    """An engine object from a spec, a name, None (DuckDB) or an engine itself."""
    if engine is None or isinstance(engine, (str, EngineSpec)):
        return engine_for(engine)
    if isinstance(engine, Engine):
        return engine
    raise QueryError(f"not an engine: {engine!r}", f"engines: {', '.join(ENGINES)}")
