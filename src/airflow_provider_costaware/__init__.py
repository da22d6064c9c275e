"""The import name Airflow derives from this distribution's name, ``airflow-provider-costaware``.

Airflow 3.3 looks for each installed provider's example DAGs in ``<module>/example_dags``, the module named
after the distribution with ``-`` as ``_`` (``DagBundlesManager``, while ``[core] load_examples`` is on, its
default; apache/airflow#66305 tracks recording the real module path instead). Without this package that
import fails and every ``airflow dags test``, scheduler and DAG processor logs an error with a traceback.
It holds no ``example_dags`` on purpose: the example DAGs (``dags/`` of the repository) need data, extras and
a ledger, so they are not loaded into every deployment that installs the provider. The provider's code is
:mod:`costaware`.
"""
