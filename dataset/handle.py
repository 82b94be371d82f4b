"""One dataset as a command sees it: where it lives, local or s3, and one listing of it.

    ref = DatasetRef.of("ds")             # or "s3://bucket/prefix/ds"; nothing read yet
    ref.listing                           # {table: {run_id: [files]}}, listed on first use
    ref.listing                           # the same snapshot: never listed twice
    reader.connect(ref)                   # readers and the derived cache take the handle

A command (`kmemscope query`, `sql`, `compare`, `info`) makes one handle and
hands it down, so every layer under it asks the handle instead of the file
system or the object store: the dataset is listed once per command, and every
analysis of a comparison reads the same snapshot of its runs. Making a handle
reads nothing; whether the dataset is local or in an object store is decided
here, once, by storage.is_url, and nowhere else: the readers (reader.py) and the
derived cache (derived.py) take the handle and ask it. A plain path or URL given
to a public function of the API becomes a handle there (`DatasetRef.of`), and a
handle given where a handle is taken is passed on as it is. A handle is not a
path (it has no __fspath__): code that wants the local folder says ref.location.

The listing of a local dataset is taken with no commit half done and its files held
open (dataset/snapshot.py): a parse that commits one of its runs again meanwhile
changes nothing the command reads. The snapshot is what readers may trust about the layout: the committed runs'
files (reader.table_runs), what their runs' own records state about those
files' footers (reader.recorded_footers: schema and rows, each checked against
the file's size), and the notes about what readers leave out. The part files'
contents are not in it: their footers are checked where a query opens them
(reader.unfit_runs), as before.
"""
from pathlib import Path

from . import storage

LOCAL = "local"
S3 = "s3"


class DatasetRef:
    """A dataset's location, its storage (LOCAL or S3) and a listing taken once, on first use."""

    def __init__(self, where):
        text = str(where)
        if storage.is_url(text):           # the one place that asks: local or s3
            # a URL stays text: Path() would fold its double slash
            self.__init_state(S3, text)
        else:
            self.__init_state(LOCAL, where if isinstance(where, Path) else Path(where))

    @classmethod
    def of(cls, dataset):
        """`dataset` as a handle: a handle unchanged, a path or URL as a new one (nothing read)."""
        return dataset if isinstance(dataset, cls) else cls(dataset)

    def renewed(self):
        """A handle of the same dataset with no listing yet, for after a write (a parse's new
        run): where it lives and local or s3 stay as decided."""
        new = object.__new__(DatasetRef)
        new.__init_state(self.storage, self.location)
        return new

    def again(self):
        """The handle of an open Dataset's next call: one that reads this handle's snapshot
        while the dataset's folders are as this handle listed them (a stat per folder: no
        listing, no file opened again), else a renewed one, which lists again."""
        snap = self._snapshot
        if self._listing is not None and snap is not None and snap.open:
            from .reader import unchanged_since

            if unchanged_since(snap.stamp):
                new = self.renewed()
                # the same snapshot: its listing, footers and records (what a command's
                # layers work out over it, memo(), starts afresh)
                new._listing, new._snapshot = self._listing, snap
                new._footers, new._docs, new._notes = self._footers, self._docs, self._notes
                return new
        return self.renewed()

    def __init_state(self, kind, location):
        self.storage, self.location = kind, location
        self._listing = None
        self._snapshot = None
        self._footers = None
        self._notes = None
        self._docs = {}
        self._memos = {}

    @property
    def is_s3(self):
        return self.storage == S3

    @property
    def snapshot(self):
        """The files of a local dataset's listing held open (dataset/snapshot.py), so that
        the command reads the state it listed whatever a parse commits meanwhile; None for
        an s3 dataset (objects cannot be held open; dataset/s3_commit.py adds runs whole)."""
        if self._snapshot is None and not self.is_s3:
            from .snapshot import Snapshot, adopted

            # a notebook of `kmemscope report`: the report's snapshot, adopted once per process
            shared = adopted(self.location)
            self._snapshot = shared[0] if shared is not None else Snapshot(self.location)
        return self._snapshot

    @property
    def listing(self):
        """{table: {run_id: [parquet files]}} of the committed runs (reader.table_runs),
        listed on first use and then kept: one snapshot for everything the command does.
        A local dataset's files are pinned (snapshot.PinnedFile): str() names them,
        os.fspath() opens them as they were listed."""
        if self._listing is None:
            from .reader import table_runs

            self._listing = table_runs(self)
        return self._listing

    def outdated(self):
        """True when the listing taken names a file the dataset no longer has: a parse
        committed one of its runs again (the old files move away) or removed it since.
        Lists the dataset again: for after a read failed, not before every read."""
        if self._listing is None:
            return False
        again = self.renewed()
        now = again.listing
        try:
            return any(not set(map(str, files)) <= set(map(str, now.get(table, {}).get(run, ())))
                       for table, runs in self._listing.items() for run, files in runs.items())
        finally:
            if again.snapshot is not None:
                again.snapshot.close()

    def footers(self):
        """{file: (Arrow schema, rows)} the runs' own records state (reader.recorded_footers),
        read once for the whole listing."""
        if self._footers is None:
            from .reader import recorded_footers

            # the records are the runs' digests, which the result cache reads too: once
            docs = None if self.is_s3 else self.run_docs(list(self.listing.get("runs", {})))
            self._footers = recorded_footers(self.listing, docs=docs)
        return self._footers

    def run_docs(self, runs):
        """{run: its recorded digests (runs/run_id=<id>/_files.json), or None}, each read once."""
        todo = [r for r in runs if r not in self._docs]
        if todo:
            from .derived import _run_docs

            self._docs.update(_run_docs(self, todo))
        return {r: self._docs[r] for r in runs}

    def memo(self, name):
        """A dict for what a layer above works out once per command over this snapshot."""
        return self._memos.setdefault(name, {})

    def reader_notes(self):
        """What readers leave out and say so (reader.reader_notes), taken once."""
        if self._notes is None:
            from .reader import reader_notes

            self.listing              # the listing first: it is what names odd folders
            self._notes = reader_notes(self)
        return list(self._notes)

    def __str__(self):
        return str(self.location)

    def __repr__(self):
        return f"DatasetRef({str(self.location)!r}, {self.storage})"

    def __eq__(self, other):
        if isinstance(other, DatasetRef):
            return (self.storage, str(self.location)) == (other.storage, str(other.location))
        return NotImplemented

    def __hash__(self):
        return hash((self.storage, str(self.location)))
