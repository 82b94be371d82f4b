"""Check or write the Spark translations of the analyses (queries/spark/*.sql).

The golden files are what Spark runs for each analysis section, kept in the
repository for review: a change to a .sql file shows its Spark form in the
same diff. tests/test_spark_translation.py fails when one is stale.

    .venv/bin/python tools/spark_golden.py                 # translations vs queries/spark/
    .venv/bin/python tools/spark_golden.py --write         # after editing a .sql file
    .venv/bin/python tools/spark_golden.py --show pfn_reuse.cross_cpu
"""
import argparse
import sys

from kmemscope.queries import catalog
from kmemscope.queries.engines.spark_sql import (GOLDEN_DIR, QUERY_DIR, TranslationError,
                                                 golden_files, golden_text)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="tools/spark_golden.py", description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true",
                    help=f"write {GOLDEN_DIR.relative_to(QUERY_DIR.parent)}/*.sql")
    ap.add_argument("--show", metavar="NAME.SECTION", help="print one section's Spark SQL")
    args = ap.parse_args(argv)
    try:
        if args.show:
            a, s = catalog.find_analysis(args.show)
            sys.stdout.write(golden_text(a, s))
            return 0
        files = golden_files()
    except (TranslationError, ValueError) as exc:
        print(f"spark_golden: error: {exc}", file=sys.stderr)
        return 1
    if args.write:
        GOLDEN_DIR.mkdir(exist_ok=True)
        for old in GOLDEN_DIR.glob("*.sql"):
            if old not in files:
                old.unlink()
        for path, text in files.items():
            path.write_text(text)
        print(f"wrote {len(files)} files to {GOLDEN_DIR}")
        return 0
    stale = [p.name for p, t in files.items() if not p.exists() or p.read_text() != t]
    print(f"{len(files)} translations; {len(stale)} differ from the golden files"
          + (": " + ", ".join(stale) if stale else ""))
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
