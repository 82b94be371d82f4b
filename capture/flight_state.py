"""What the flight recorder's parts share: its options, and the one object's attributes
declared with their types.

FlightRecorder (flight.py) is one object made of parts, each in its own module:
InstanceKeeper, BufferSizer, TriggerHandler and BundleWriter. Each part reads what
another sets up (the options, the buffers' sizes, the triggers fired), so each derives
from FlightState, which declares those names for the type checker. FlightRecorder's
__init__ and run() give them their values. FlightState holds nothing at run time but
annotations (its method stubs exist only for the checker), so no part shadows a
Recorder method in the MRO.
"""
import collections
import queue
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from kmemscope.capture.recorder import Options

if TYPE_CHECKING:
    from kmemscope.capture.flight_disk import DiskBudget
    from kmemscope.capture.flight_heartbeat import Heartbeat
    from kmemscope.capture.sampler import RollingSampler
    from kmemscope.capture.triggers import PsiHistory


class FlightOptions(Options):
    """Options of a flight recorder (cli.py fills it; tests may too)."""

    def __init__(self, output, keep=30.0, after=5.0, trigger_specs=(), cooldown=60.0,
                 max_bundles=10, max_disk=None, max_per_hour=6, measure=3.0, max_buffer=None,
                 **kwargs):
        super().__init__(output, **kwargs)
        self.keep, self.after, self.triggers = keep, after, list(trigger_specs)
        self.cooldown, self.max_bundles, self.max_disk = cooldown, max_bundles, max_disk
        self.max_per_hour, self.measure = max_per_hour, measure
        self.max_buffer = max_buffer    # bytes for all ring buffers of all CPUs; None: default


class FlightState:
    # Recorder's (recorder.py)
    opt: FlightOptions
    say: Callable[[str], None]
    warnings: List[str]
    stop_reason: Optional[str]
    trace_cmd: Any
    # set by FlightRecorder.run() before the recording starts
    tracefs: Any
    specs: Any
    out: Any                       # the output directory (pathlib.Path)
    ncpu: int
    host_flags: Any
    stacktrace: Any
    bundle_room: int
    disk: "DiskBudget"
    head: Dict[str, Any]           # the manifest's fields every bundle shares
    state_file: Any
    saved: Dict[str, Any]          # what cleanup puts back if the recorder dies
    sampler: "RollingSampler"
    psi: "PsiHistory"
    psi_conditions: bool
    # FlightRecorder.__init__'s
    fired: "queue.Queue[Any]"
    bundles: List[Any]
    suppressed: "collections.Counter[str]"
    trigger_times: "collections.deque[int]"
    last_trigger_ns: Optional[int]
    pending: Any
    tracing_since: Any
    buffer_kb: Any
    after_kb: Any
    plan: Any
    rate: Any
    vmstat_rows: "collections.deque[Any]"
    psi_armed_ns: Optional[int]
    not_armed: int
    unconfirmed: int
    psi_woken: Dict[Any, int]
    last_rate_check: Any
    last_memory_note: Any
    last_coverage_warning: Any
    resizes: int
    growth_refused: int
    longest_resize_s: float
    want: Dict[str, Any]
    buffer_limit: str              # what holds the buffers' ceiling, for the warnings
    max_buffer_kb: int
    min_kb: int                    # the least KiB per CPU a buffer is sized to
    blind: "collections.deque[Any]"
    instance_restored: int
    after_filled: Dict[int, int]
    heart: "Heartbeat"
    beat_ok: Dict[str, int]
    beat_gap: Dict[str, Any]
    setup_changes: List[str]       # what differed at each failed try of the last setup
    last_events_check_ns: int
    last_check_ns: int
    growing: bool
    wake_fds: Any                  # the pipe a signal wakes the loop through
    old_wakeup_fd: Optional[int]

    if TYPE_CHECKING:      # the parts' methods another part calls (defined in their modules)
        def warn(self, text: str) -> None: ...
        def _before_dir(self) -> Any: ...
        def _after_dir(self) -> Any: ...
        def _start_tracing(self, kb: Any, after_kb: Any) -> Any: ...
        def _check_instances(self) -> Any: ...
        def _freeze(self) -> Any: ...
        def _watch_after(self, now: int) -> Any: ...
        def _heartbeat(self) -> Any: ...
        def _heartbeats_of(self, window_start: Any, frozen: Any, after_on: Any,
                           stop: Any) -> Any: ...
        def _update_rate(self) -> Any: ...
