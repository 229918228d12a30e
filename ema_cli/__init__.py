"""The command-line face of the workbench: click commands that parse, call a workflow and print.

The MLproject's entry points are scripts in the top-level ``entrypoints/`` folder, each a
thin wrapper over one of these commands; that folder is never installed as a package (a
PyPI package called ``entrypoints`` exists and would clash).
"""
