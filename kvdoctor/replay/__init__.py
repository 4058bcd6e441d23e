"""``kvdoctor replay``: public bugs replayed on real servers (``kvdoctor.core.bugs``, ``kvdoctor.core.replays``).

:mod:`~kvdoctor.replay.plan` picks the cases and groups them by deployment, :mod:`~kvdoctor.replay.run` runs each
group through consistency's runs (or the engine round trip), :mod:`~kvdoctor.replay.verdict` judges each bug from
its control and its subject, :mod:`~kvdoctor.replay.report` publishes it, :mod:`~kvdoctor.replay.docs` generates
``docs/bugs.md``'s table. Imported only when its command runs.
"""
