"""``kvdoctor sweep``: search a server's configuration space for configurations that break a request's state.

The space (:mod:`kvdoctor.sweep.space`) is the server flags that change how a request's state is kept, each with the
values to try; the plan (:mod:`kvdoctor.sweep.covering`) is a t-wise covering array over them, so every pair (by
default) of flag values meets in some configuration; a red configuration is repeated, minimized to the flags that
make it red and bisected over releases (:mod:`kvdoctor.sweep.minimize`). Each configuration is one pressured launch
judged by consistency's token oracle against one roomy reference per model and scenario.
"""
