from __future__ import annotations

import functools
import importlib
import json
import os
import subprocess
import sys
import textwrap
import types
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest

from costaware.core.errors import ConfigurationError
from costaware.core.fingerprint import (
    CodeFingerprint,
    FileStat,
    cache_key,
    canonical_params,
    code_fingerprint,
    fingerprint_input,
    is_project_module,
    library_versions,
    safe_relative_path,
    validate_key,
)

CODE = CodeFingerprint("0" * 32, ("version:1",))
LIBS = {"pandas": "3.1.1", "pyarrow": "26.0.1"}


def _input(name: str = "flights", version: str = "mtime_ns=1") -> object:
    return fingerprint_input(name, "/data/flights", [FileStat("a.parquet", 10, version)], mode="metadata")


def test_key_is_stable_and_order_independent() -> None:
    a = fingerprint_input("x", "/d", [FileStat("a", 1, "v1"), FileStat("b", 2, "v2")], mode="metadata")
    b = fingerprint_input("x", "/d", [FileStat("b", 2, "v2"), FileStat("a", 1, "v1")], mode="metadata")
    assert a.digest == b.digest and a.bytes == 3 and a.files == 2
    assert cache_key([a], CODE, {"w": 7, "q": [1, 2]}, LIBS) == cache_key(
        [b], CODE, {"q": [1, 2], "w": 7}, LIBS
    )
    assert len(cache_key([a], CODE, {}, LIBS)) == 32


@pytest.mark.parametrize(
    "change",
    [
        {"inputs": [_input(version="mtime_ns=2")]},
        {"inputs": [_input(name="other")]},
        {"code": CodeFingerprint("1" * 32, ("version:2",))},
        {"params": {"window": 8}},
        {"libraries": {"pandas": "3.1.2", "pyarrow": "26.0.1"}},
    ],
)
def test_each_component_changes_the_key(change: dict[str, object]) -> None:
    base = {"inputs": [_input()], "code": CODE, "params": {"window": 7}, "libraries": LIBS}
    assert cache_key(**base) != cache_key(**{**base, **change})  # type: ignore[arg-type]


def test_file_stats_are_length_prefixed() -> None:
    one = fingerprint_input("x", "/d", [FileStat("ab", 1, "c")], mode="metadata")
    two = fingerprint_input("x", "/d", [FileStat("a", 1, "bc")], mode="metadata")
    assert one.digest != two.digest


def test_empty_input_and_duplicate_names_are_rejected() -> None:
    with pytest.raises(ConfigurationError, match="input 'x' at /d has no files"):
        fingerprint_input("x", "/d", [], mode="metadata")
    with pytest.raises(ConfigurationError, match="input names must be unique"):
        cache_key([_input(), _input()], CODE, {}, LIBS)
    with pytest.raises(ConfigurationError, match="fingerprint mode 'fast'"):
        fingerprint_input("x", "/d", [FileStat("a", 1, "v")], mode="fast")


def test_canonical_params() -> None:
    assert canonical_params({"b": 1, "a": Decimal("0.10")}) == '{"a":{"__decimal__":"0.10"},"b":1}'
    assert canonical_params({"d": date(2013, 1, 2), "s": {3, 1}}) == canonical_params(
        {"s": {1, 3}, "d": date(2013, 1, 2)}
    )
    assert canonical_params({"t": (1, 2)}) == canonical_params({"t": [1, 2]})
    with pytest.raises(
        ConfigurationError, match=r"parameter params.model is a object .*no stable fingerprint"
    ):
        canonical_params({"model": object()})
    with pytest.raises(ConfigurationError, match="non-string key 1"):
        canonical_params({"m": {1: "a"}})


def test_library_versions() -> None:
    found = library_versions(["pandas", "no-such-library-xyz"])
    assert found["no-such-library-xyz"] == "absent"
    assert found["pandas"] == importlib.import_module("pandas").__version__


# -- code fingerprints ---------------------------------------------------------------------------

HELPER = """
SCALE = {scale}

def helper(x):
    return x * SCALE
"""

TRANSFORM = """
import {pkg}.helpers as helpers
from {pkg}.helpers import helper
import json

THRESHOLD = {threshold}

def local_helper(x):
    return x + {local}

def transform(inputs, **params):
    return helper(local_helper(THRESHOLD)) + len(json.dumps(params))

def lazy_transform(inputs):
    from {pkg} import lazy  # imported where it is used, as Airflow tasks do
    return lazy.work(inputs)

def unrelated():
    return {unrelated}
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A throw-away project package on sys.path; write(...) rewrites it and re-imports it."""
    pkg = f"fpproj_{tmp_path.name.replace('-', '_')}"
    root = tmp_path / pkg
    root.mkdir()
    (root / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(
        *,
        scale: int = 2,
        threshold: int = 5,
        local: int = 1,
        unrelated: int = 0,
        lazy: int = 1,
        name: str = "transform",
    ):  # type: ignore[no-untyped-def]
        (root / "helpers.py").write_text(HELPER.format(scale=scale))
        (root / "lazy.py").write_text(f"def work(inputs):\n    return inputs * {lazy}\n")
        (root / "features.py").write_text(
            TRANSFORM.format(pkg=pkg, threshold=threshold, local=local, unrelated=unrelated)
        )
        for module in (f"{pkg}.features", f"{pkg}.helpers", f"{pkg}.lazy"):
            sys.modules.pop(module, None)
        importlib.invalidate_caches()
        return getattr(importlib.import_module(f"{pkg}.features"), name)

    yield write
    for name in [n for n in sys.modules if n.startswith(pkg)]:
        del sys.modules[name]


def test_code_fingerprint_covers_source_helpers_constants_and_project_modules(project) -> None:  # type: ignore[no-untyped-def]
    base = code_fingerprint(project())
    assert base == code_fingerprint(project())  # re-importing the same code: same fingerprint
    assert any(p.startswith("module:") and p.endswith(".helpers") for p in base.parts)
    assert any(p.endswith(".local_helper") for p in base.parts)
    assert not any("json" in p for p in base.parts)  # stdlib is covered by nothing but the Python version
    assert code_fingerprint(project(scale=3)).digest != base.digest  # imported project module edited
    assert code_fingerprint(project(threshold=6)).digest != base.digest  # module constant edited
    assert code_fingerprint(project(local=2)).digest != base.digest  # same-file helper edited
    assert code_fingerprint(project(unrelated=1)).digest == base.digest  # unrelated function edited


def test_imports_inside_the_transform_are_followed(project) -> None:  # type: ignore[no-untyped-def]
    base = code_fingerprint(project(name="lazy_transform"))
    assert any(p.startswith("module:") and p.endswith(".lazy") for p in base.parts)
    assert not any(p.endswith(".lazy") for p in code_fingerprint(project()).parts)
    assert code_fingerprint(project(name="lazy_transform", lazy=2)).digest != base.digest
    assert code_fingerprint(project(name="lazy_transform", scale=9)).digest == base.digest


def test_code_fingerprint_of_partial_and_explicit_version(project) -> None:  # type: ignore[no-untyped-def]
    transform = project()
    a = code_fingerprint(functools.partial(transform, window=3))
    b = code_fingerprint(functools.partial(transform, window=4))
    assert a.digest != b.digest
    assert code_fingerprint(transform, version="v1") == code_fingerprint(print, version="v1")
    assert (
        code_fingerprint(transform, version="v1").digest != code_fingerprint(transform, version="v2").digest
    )
    with pytest.raises(ConfigurationError, match="version must be a non-empty string"):
        code_fingerprint(transform, version=" ")


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """write(source) writes a one-file module on sys.path and (re-)imports it."""
    name = f"fpmod_{tmp_path.name.replace('-', '_')}"
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(source: str):  # type: ignore[no-untyped-def]
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        sys.modules.pop(name, None)
        importlib.invalidate_caches()
        return importlib.import_module(name)

    yield write
    sys.modules.pop(name, None)


CONSTANTS = """
import re

RENAMES = {renames}
PATTERN = re.compile({pattern!r})

def transform(inputs):
    return [RENAMES, PATTERN]
"""


@pytest.mark.parametrize(
    ("edit", "changes"),
    [
        ({"renames": {"a": "c"}}, True),
        ({"renames": {"a": "b", "z": ["y"]}}, True),
        ({"renames": {"a": {"b", "c"}}}, True),
        ({"pattern": r"\d+"}, True),
        ({"renames": {"a": "b"}}, False),
    ],
)
def test_module_containers_and_objects_the_transform_reads_are_keyed(module, edit, changes) -> None:  # type: ignore[no-untyped-def]
    def key(renames: object = None, pattern: str = "a+") -> str:
        source = CONSTANTS.format(renames=renames or {"a": "b"}, pattern=pattern)
        return code_fingerprint(module(source).transform).digest

    assert (key(**edit) != key()) is changes


def test_an_object_global_with_no_statement_behind_it_needs_a_version(module) -> None:  # type: ignore[no-untyped-def]
    mod = module("def transform(inputs):\n    return LOOKUP\n")
    mod.LOOKUP = object()  # set from outside: nothing in the module's source says what it is
    with pytest.raises(ConfigurationError, match=r"global fpmod_\w+\.LOOKUP, a object .*version="):
        code_fingerprint(mod.transform)


SETS_AND_STEPS = """
NAMES = frozenset({{"alpha", "beta", "gamma", "delta", "epsilon", "zeta"}})

def _step(x):
    return x + {offset}

STEPS = (_step, len)

def transform(inputs):
    return [s(inputs) for s in STEPS if NAMES]
"""


def test_sets_and_functions_in_constants_give_the_same_key_in_every_process(module, tmp_path) -> None:  # type: ignore[no-untyped-def]
    mod = module(SETS_AND_STEPS.format(offset=1))
    assert any(p.endswith("._step") for p in code_fingerprint(mod.transform).parts)
    assert (
        code_fingerprint(mod.transform).digest
        != code_fingerprint(module(SETS_AND_STEPS.format(offset=2)).transform).digest
    )  # a helper reached only through the tuple is tracked
    script = (
        "import sys; from costaware.core.fingerprint import code_fingerprint; "
        f"import {mod.__name__} as m; print(code_fingerprint(m.transform).digest)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    digests = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**env, "PYTHONHASHSEED": seed},
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        for seed in ("1", "2", "3")
    }
    assert len(digests) == 1, digests


CALLABLE_OBJECTS = """
from dataclasses import dataclass

class Scale:
    def __init__(self, factor, model=None):
        self.factor = factor
        self.model = model

    def __call__(self, inputs):
        return inputs * self.factor

@dataclass(frozen=True, slots=True)
class Shift:
    offset: int

    def __call__(self, inputs):
        return inputs + self.offset
"""


def test_callable_objects_are_keyed_by_their_attributes(module) -> None:  # type: ignore[no-untyped-def]
    mod = module(CALLABLE_OBJECTS)
    assert code_fingerprint(mod.Scale(2)) == code_fingerprint(mod.Scale(2))
    assert code_fingerprint(mod.Scale(2)).digest != code_fingerprint(mod.Scale(3)).digest
    assert code_fingerprint(mod.Shift(1)).digest != code_fingerprint(mod.Shift(2)).digest  # __slots__
    with pytest.raises(ConfigurationError, match=r"Scale\['model'\] \(object .*version=") as info:
        code_fingerprint(mod.Scale(2, model=object()))
    assert "callable object" in str(info.value)


def test_project_code_under_the_python_prefix_is_still_project_code(project, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # python:3.x images: sys.base_prefix is /usr/local and the DAGs live in /usr/local/airflow/dags.
    monkeypatch.setattr(sys, "base_prefix", str(tmp_path))
    monkeypatch.setattr(sys, "base_exec_prefix", str(tmp_path))
    base = code_fingerprint(project())
    assert any(p.startswith("module:") and p.endswith(".helpers") for p in base.parts)
    assert code_fingerprint(project(scale=3)).digest != base.digest


@pytest.mark.parametrize(
    ("file", "project_code"),
    [
        ("/usr/local/airflow/dags/helpers.py", True),
        ("/opt/venv/lib/python3.11/site-packages/lib.py", False),
        ("/usr/lib/python3/dist-packages/lib.py", False),
        (json.__file__, False),
    ],
)
def test_library_folders_are_not_project_code(file: str, project_code: bool) -> None:
    module = types.ModuleType("somelib")
    module.__file__ = file
    assert is_project_module(module) is project_code


def test_code_without_source_needs_a_version() -> None:
    namespace: dict[str, object] = {}
    exec("def made_up(inputs):\n    return inputs\n", namespace)  # no file behind it
    with pytest.raises(
        ConfigurationError, match=r"cannot read the source of transform .*made_up.*pass version="
    ):
        code_fingerprint(namespace["made_up"])  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="transform must be a callable, got int 3"):
        code_fingerprint(3)  # type: ignore[arg-type]


# -- path safety ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["team/features", "a", "a/b/c/", ""])
def test_safe_relative_paths(value: str) -> None:
    assert safe_relative_path(value) == value.rstrip("/")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("../etc", "'..' segment"),
        ("a/../../b", "'..' segment"),
        ("a/./b", "'..' segment"),
        ("a//b", "empty"),
        ("/etc/passwd", "is absolute"),
        ("C:/x", "is absolute"),
        ("a\\..\\b", "backslash"),
        ("a\x00b", "NUL"),
    ],
)
def test_unsafe_paths_are_rejected(value: str, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem) as info:
        safe_relative_path(value, what="prefix")
    assert repr(value) in str(info.value)


@pytest.mark.parametrize("key", ["../x", "/abs", "ABCDEF0123456789", "abc", "0" * 129, "0123456789abcdef/.."])
def test_bad_keys_are_rejected(key: str) -> None:
    with pytest.raises(ConfigurationError, match="is not a key"):
        validate_key(key)
    assert validate_key("0123456789abcdef") == "0123456789abcdef"


def test_fingerprint_module_keeps_core_free_of_airflow() -> None:
    code = textwrap.dedent(
        """
        import sys
        import costaware.core.fingerprint, costaware.core.cache_policy
        assert "airflow" not in sys.modules and "boto3" not in sys.modules and "pandas" not in sys.modules
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_bound_methods_lambdas_regexes_and_imported_instances_are_keyed(module, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Each of these served stale features: a bound method lost its instance, two lambdas of one module
    # shared a key part (the last one won), an instance imported from another project module was keyed by
    # that module's source alone. A regex attribute was refused, as a star import's name was.
    mod = module(CALLABLE_OBJECTS)
    assert code_fingerprint(mod.Scale(2).__call__).digest != code_fingerprint(mod.Scale(3).__call__).digest

    steps = (
        "STEPS = (lambda df: df + {first}, lambda df: df * 2)\n\ndef transform(inputs):\n    return STEPS\n"
    )
    assert (
        code_fingerprint(module(steps.format(first=1)).transform).digest
        != code_fingerprint(module(steps.format(first=100)).transform).digest
    )

    rx = "import re\n\nclass Clean:\n    def __init__(self, p):\n        self.rx = re.compile(p)\n\n" \
         "    def __call__(self, inputs):\n        return self.rx\n"  # fmt: skip
    cleaning = module(rx)
    assert code_fingerprint(cleaning.Clean("a+")).digest != code_fingerprint(cleaning.Clean("b+")).digest

    helper = f"scalers_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{helper}.py").write_text(CALLABLE_OBJECTS)
    imported = f"from {helper} import Scale\n\nSCALER = Scale({{factor}})\n\n"
    imported += "def transform(x):\n    return SCALER(x)\n"
    try:
        assert (
            code_fingerprint(module(imported.format(factor=2)).transform).digest
            != code_fingerprint(module(imported.format(factor=3)).transform).digest
        )
        (tmp_path / f"{helper}.py").write_text("import re\n\nPATTERN = re.compile('a+')\n")
        sys.modules.pop(helper, None)
        starred = module(f"from {helper} import *\n\ndef transform(inputs):\n    return PATTERN\n")
        assert code_fingerprint(starred.transform).digest  # keyed by the star import, not refused
    finally:
        sys.modules.pop(helper, None)
    plain = module("COLUMNS = ('a', 'b')\n\ndef transform(inputs):\n    return COLUMNS\n")
    from costaware.core.fingerprint.code import _Collector

    collector = _Collector()
    collector.callable(plain.transform, "transform")
    # A tuple of plain values keeps the key text it had: existing cache entries stay hits.
    assert collector.parts[f"global:{plain.__name__}.COLUMNS"] == "('a', 'b')"
