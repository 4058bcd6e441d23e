"""``python -m kvdoctor`` runs the CLI."""

from kvdoctor.cli.app import run

run()
