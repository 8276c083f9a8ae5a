"""The planner: search parallel layouts (strategy x tensor x pipeline with virtual stages and its
schedule x context x expert x sequence parallelism x micro-batch x recompute x offload) over GPU
counts, time them (pure data parallelism on the fast path, the rest on the composed parallel
step), rank what fits.

- :mod:`simcore.planner.space`: candidates (:class:`~simcore.planner.space.PlanLayout`), the axes
  and the rules that prune them, GPU counts, the global batch;
- :mod:`simcore.planner.floor`: the memory floor that skips candidates untimed;
- :mod:`simcore.planner.evaluate`: timing one layout (what workers run), with caches each worker owns;
- :mod:`simcore.planner.executors`: in process, a local process pool, or Ray tasks;
- :mod:`simcore.planner.rank`: budgets, ranking, why the best wins, Pareto frontiers;
- :mod:`simcore.planner.search`: :func:`~simcore.planner.search.plan`, the three together.

``python -m experiments.plan`` is the command line.
"""
