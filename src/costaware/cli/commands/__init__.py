"""The functions behind the ``costaware`` commands, one module per command group.

Each takes the parsed ``argparse.Namespace`` and returns the exit code; :mod:`costaware.cli.config` names
them by import path, so a module here is imported only when its command runs.
"""
