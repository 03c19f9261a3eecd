"""Trajectories and their files: the data model (``trajectory.py``), bounded JSONL reading (``jsonl.py``), exports
to other trainers' formats (``export.py``), printable text (``safe_text.py``) and whole-or-nothing file writes
(``atomic.py``)."""

from wrappers.data.atomic import write_atomically
from wrappers.data.trajectory import (
    FORMAT_VERSION,
    DataFormatError,
    Sample,
    TrainingSequence,
    Trajectory,
    TrajectoryGroup,
    Turn,
    load_jsonl,
    new_id,
    save_jsonl,
)

__all__ = [
    "FORMAT_VERSION",
    "DataFormatError",
    "Sample",
    "TrainingSequence",
    "Trajectory",
    "TrajectoryGroup",
    "Turn",
    "load_jsonl",
    "new_id",
    "save_jsonl",
    "write_atomically",
]
