"""The planner: search layouts (strategy x micro-batch x recompute, and the model-parallel axes as
the step model gains them) over GPU counts, time them on the fast path, rank what fits.

- :mod:`simcore.planner.space`: layouts, GPU counts, the global batch, the memory floor;
- :mod:`simcore.planner.evaluate`: timing one layout (what workers run), cached per process;
- :mod:`simcore.planner.executors`: in process, a local process pool, or Ray tasks;
- :mod:`simcore.planner.rank`: budgets, ranking, why the best wins, Pareto frontiers;
- :mod:`simcore.planner.search`: :func:`~simcore.planner.search.plan`, the three together.

``python -m experiments.plan`` is the command line.
"""
