"""The fast analytical path: a step evaluated without SimPy, collectives priced by closed forms.

For homogeneous synchronous data parallelism every rank runs the same plan and every collective
has the fabric to itself (or shares it with same-shape groups in a symmetric way, HSDP's replicate
groups), so the step is fully described by one representative rank's
:class:`~simcore.step.plan.StepPlan` and the closed-form cost of each collective. This
package evaluates exactly that, with no per-flow simulation:

- the plan is run by the event-free evaluator (:mod:`simcore.step.eventfree`), bit-identical to the
  SimPy run of :func:`simcore.step.des.run_plan`;
- :mod:`simcore.fastpath.costs`: collective costs from the closed forms of the one cost model
  (:class:`simcore.step.cost.CostModel`), kept per shape in the model a sweep holds per cluster;
- :mod:`simcore.fastpath.step`: one step as a report, long gradient accumulation extrapolated
  exactly from a probe of a few micro-batches;
- :mod:`simcore.fastpath.fold`: a deep model's step extrapolated exactly from two shallower
  copies of its run of identical blocks, the deeper one checked to be in a steady state, so a
  configuration costs about the same at any depth;
- :mod:`simcore.fastpath.repeat`: whether an evaluated plan repeats itself (a probe's
  micro-batches, a copy's blocks), the check both extrapolations rest on;
- :mod:`simcore.fastpath.path`: which path a point takes (``auto``, ``fast`` or ``des``);
- :mod:`simcore.fastpath.run`: the one entry every caller evaluates a step through
  (:func:`~simcore.fastpath.run.evaluate_step`), which picks this package's report or the
  simulated steps.

The discrete-event path stays for whatever breaks symmetry: parameter servers (per-rank processes
and incast), stragglers, mixed devices and jitter.
"""
