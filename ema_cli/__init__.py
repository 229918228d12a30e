"""The command-line face of the workbench: click commands that parse, call a workflow and print.

Named ``ema_cli`` rather than DESIGN.md's ``entrypoints`` because a PyPI package called
``entrypoints`` exists and would shadow ours where it is installed.
"""
