"""One model of a training step: plan, costs, evaluators.

A step is priced the same way whichever path evaluates it: :mod:`simcore.step.cost` holds the one
collective cost model (:class:`~simcore.step.cost.CostModel`) that the discrete-event path, the
event-free fast path and the parallel layouts all price through, and :mod:`simcore.calibration.collective_cost`
the one rule by which a calibration profile's measured fits replace a modelled collective cost.
This package initialiser imports nothing, so importing one of its modules stays cheap.
"""
