from __future__ import annotations

import subprocess
import sys


def test_core_imports_without_airflow_or_heavy_sdks() -> None:
    code = (
        "import sys, pkgutil, importlib, costaware.core as c\n"
        "for m in pkgutil.walk_packages(c.__path__, 'costaware.core.'):\n"
        "    importlib.import_module(m.name)\n"
        "bad = [n for n in ('airflow', 'boto3', 'fastapi', 'pandas', 'pyarrow') if n in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_package_root_is_import_light() -> None:
    code = "import sys, costaware; print('sqlalchemy' in sys.modules, 'airflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"
