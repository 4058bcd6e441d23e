"""The deployment floor both real-server checks stand on: supervisor, reaper, signals, deadline, ports, run
directory, URLs, HTTP client, metrics and launch plans. ``pd/`` (pd-eval) and ``consistency/`` stand above it."""
