"""Calibration of a multi-turn env configuration: is it a task where reflect-then-retry can matter?

For one configuration (env id and kwargs, constrained or free-text rollouts, turn budget, sampling temperature,
oracle guidance, model) it measures on the **test** split, whose tasks are disjoint by content from train
(:mod:`r3l_envs.splits`):

* ``base_success``: the model's success at the sampling temperature, one episode per test task;
* ``retry_success``: over the failed bases, the success of the oracle-guided retry from the pivot, with the
  library's own :class:`wrappers.ReflectRetry` and :class:`wrappers.retry.oracle.OracleReflector`;
* ``fixed_habit_success``: the best fixed action sequence (the train tasks' expert plans and the most common
  action sequences played), replayed on every test task;
* ``random_success``: a uniformly random admissible policy;
* ``distinct_test_tasks``: test tasks counted by content, not by id.

``python -m benchmarks.calibration run --help`` for the CLI; each configuration writes one JSON under
``benchmarks/results/calibration/``.
"""
