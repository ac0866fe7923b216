"""Core: configuration, errors, data paths, element types, metric names and ORT sessions.

Imports nothing else of Hase; every other subpackage builds on it.
"""
