"""Orchestration: the ``hase`` command line and the materialize driver over the Dagster definitions."""
