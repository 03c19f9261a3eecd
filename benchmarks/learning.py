"""Learning at an equal sampling budget: R³L vs GRPO, RAFT and OPMD, R³L's ablations, self vs oracle reflection.

The command line of the package ``benchmarks/learning_study`` (one module per job: grid, scheduler, statistics,
report; see its ``__init__``). ``python -m benchmarks.learning --help`` lists the options; ``make bench-learning``
runs ``--mode quick --jobs 2``.
"""

import sys

from benchmarks.learning_study.cli import main

if __name__ == "__main__":
    sys.exit(main())
