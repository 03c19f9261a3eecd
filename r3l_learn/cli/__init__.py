"""The ``r3l`` command line: ``main.py`` (the entry point, :func:`r3l_learn.cli.main.main`), shared argument types
(``args.py``), the ``train`` flags built from :class:`r3l_learn.TrainConfig` (``train_args.py``) and the
model-free tour (``demo.py``)."""
