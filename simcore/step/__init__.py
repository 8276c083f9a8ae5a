"""One model of a training step: the plan, its costs and its two evaluators.

- :mod:`simcore.step.plan`: the plan every strategy builds (operations on compute and
  communication streams, with structured keys and memory changes);
- :mod:`simcore.step.des`: the discrete-event evaluator (SimPy processes), the reference for
  whatever breaks symmetry (stragglers, mixed devices, per-rank plans);
- :mod:`simcore.step.eventfree`: the event-free evaluator (a list scheduler), bit for bit the
  discrete-event result, several times faster;
- :mod:`simcore.step.cost`: the one collective cost model (:class:`~simcore.step.cost.CostModel`)
  that both paths and the parallel layouts price through; :mod:`simcore.calibration.collective_cost`
  is the one rule by which a calibration profile's measured fits replace a modelled cost;
- :mod:`simcore.step.caches`: what a sweep's step evaluations share
  (:class:`~simcore.step.caches.StepCaches`), an object the sweep owns and contexts carry.

Strategies (:mod:`simcore.strategies`) build plans from this package; nothing here imports them.
This package initialiser imports nothing, so importing one of its modules stays cheap.
"""
