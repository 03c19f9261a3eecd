"""Trajectories and their files: the data model (``trajectory.py``), bounded JSONL reading (``jsonl.py``), exports
to other trainers' formats (``export.py``) and printable text (``safe_text.py``)."""

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
]
