"""The superstep executor. A map, in the order a call goes through it:

- ``execute``: one ``invoke``/``stream`` call, from the thread's lease (``lease.held``) to its
  result; ``start``: its starting point (a new input, a fork, a resume's answers, resolved by
  the pure ``answers``, whose ``decisions=`` are matched by ``confirmations``);
- ``run``: ``Run``, one namespace of the run and its loop, over ``run_state``'s ``RunState``
  (its values, head and answers, the commits of its checkpoints, its results); ``steps``: a
  superstep (plan, run the tasks, then stop at pauses and failures or advance to the next
  checkpoint);
- ``plan`` and ``apply``: pure functions of data (what a step runs, where it goes; writes
  through reducers and the next checkpoint); ``outcomes``: what tasks produced;
- ``tasks``: ``TaskRunner`` calls nodes (one retry loop); ``attempts``: what a task carries
  between attempts and the outcome of its last; ``context``: ``NodeContext``, and ``port``:
  the ``RunPort`` it reaches its run by; ``subgraph``: a subgraph node's input;
- ``committer``: ``Committer``, the only caller of ``store.commit``; ``events``: ``Emitter``;
  ``pauses``: pause ids and the public ``Pause``;
- from outside a run: ``history`` (snapshots), ``update``, ``targets`` and ``replan``
  (``update_state``), ``threads`` (``submit``, ``cancel``, ``list_decisions``), sharing the
  store reads of ``reads``.

The engine runs a ``graphflow.spec.GraphSpec``; it never sees the builder or the compiled
graph, and knows nothing of agents.
"""
