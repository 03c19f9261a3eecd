"""The benchmarks, each a module run from the repository root: ``python -m benchmarks.NAME`` (its ``--help`` lists
the options). Each writes its own section of ``benchmarks/RESULTS.md`` and a JSON file under ``benchmarks/results``.
"""
