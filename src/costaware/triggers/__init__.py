"""Triggers live in the installed package: the triggerer imports them by class path, never from dags/."""
