"""Fingerprints of a transform's code: its source and the sources of the project modules it uses.

What counts is what can change the transform's output: its own source, helpers from the same file that it
calls, primitive module-level constants it reads, and the whole sources of the project modules it uses (and
of those they import). The standard library and site-packages are left out: their versions count only
through the library versions in the key.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import sys
import sysconfig
import textwrap
import types
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from costaware.core.errors import ConfigurationError
from costaware.core.fingerprint.canonical import canonical_value, digest

_PRIMITIVES = (str, int, float, bool, bytes, type(None), Decimal)


@dataclass(frozen=True, slots=True)
class CodeFingerprint:
    """The fingerprint of a transform's code.

    Attributes:
        digest: Hex digest over every part below.
        parts: What went in, e.g. ``("source:mydag.build_features", "module:myproject.features")``.
    """

    digest: str
    parts: tuple[str, ...]


_LIBRARY_DIRS = frozenset({"site-packages", "dist-packages"})


def _library_roots() -> tuple[str, ...]:
    # The library folders only, never a bare prefix: python:3.x images have sys.base_prefix /usr/local, and
    # DAG helpers under /usr/local/airflow/dags must stay project code.
    roots = {
        path
        for vars_ in ({}, {"base": sys.base_prefix, "platbase": sys.base_exec_prefix})
        for key, path in sysconfig.get_paths(vars=vars_).items()
        if key in ("stdlib", "platstdlib", "purelib", "platlib")
    }
    return tuple(sorted(str(Path(r).resolve()) for r in roots if r))


def _is_project_file(name: str, file: str | None) -> bool:
    if name.partition(".")[0] in sys.stdlib_module_names or not file or not file.endswith(".py"):
        return False
    resolved = Path(file).resolve()
    if _LIBRARY_DIRS.intersection(resolved.parts):
        return False
    return not any(str(resolved).startswith(root + "/") for root in _library_roots())


def is_project_module(module: types.ModuleType) -> bool:
    """Whether a module is the user's own code: not built in, not stdlib, not installed in site-packages."""
    return _is_project_file(module.__name__, getattr(module, "__file__", None))


def _module_file(name: str) -> str | None:
    """The source file of a project module ``name``; ``None`` for library, missing or non-module names.

    Modules not yet imported (imports inside a function run only when it runs) are found with
    ``importlib.util.find_spec``, which imports no library: the top-level package is checked first.
    """
    loaded = sys.modules.get(name)
    if loaded is not None:
        file = getattr(loaded, "__file__", None)
        return file if _is_project_file(name, file) else None
    top = name.partition(".")[0]
    try:
        top_spec = sys.modules.get(top) or importlib.util.find_spec(top)
        top_file = getattr(top_spec, "__file__", None) or getattr(top_spec, "origin", None)
        if not _is_project_file(top, top_file):
            return None
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError, AttributeError):
        return None
    file = spec.origin if spec is not None and spec.has_location else None
    return file if _is_project_file(name, file) else None


def _imports(source: str, package: str) -> list[str]:
    """Dotted names that ``source`` imports (``from a import b`` gives ``a`` and ``a.b``)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            names += [base] + [f"{base}.{alias.name}" for alias in node.names]
    return names


class _Collector:
    """Walks what a transform uses and gathers the text that determines its behaviour."""

    def __init__(self) -> None:
        self.parts: dict[str, str] = {}
        self._seen_objects: set[int] = set()

    def callable(self, obj: Any, label: str) -> None:
        if id(obj) in self._seen_objects:
            return
        self._seen_objects.add(id(obj))
        if isinstance(obj, functools.partial):
            self.parts[f"partial:{label}"] = canonical_value([list(obj.args), obj.keywords], label)
            self.callable(obj.func, label)
            return
        if isinstance(obj, types.MethodType):
            obj = obj.__func__
        fn = inspect.unwrap(obj) if callable(obj) else obj
        target = fn if inspect.isfunction(fn) or inspect.isclass(fn) else type(fn)
        name = f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', '?')}"
        try:
            source = textwrap.dedent(inspect.getsource(target))
        except (OSError, TypeError) as e:
            raise ConfigurationError(
                f"cannot read the source of transform {name}: define it in a .py file, or pass "
                f"version='<your version>' to key the cache by an explicit version instead"
            ) from e
        self.parts[f"source:{name}"] = source
        module = sys.modules.get(getattr(target, "__module__", "") or "")
        # Imports inside the function (the Airflow way: heavy imports where they are used).
        self._modules(_imports(source, getattr(module, "__package__", None) or ""))
        if inspect.isfunction(target):
            self._function_references(target, module)
        elif inspect.isclass(target):
            for member in vars(target).values():
                if inspect.isfunction(member):
                    self._function_references(member, module)

    def _function_references(self, fn: types.FunctionType, module: types.ModuleType | None) -> None:
        for cell_name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=False):
            try:
                self._reference(cell_name, cell.cell_contents, module)
            except ValueError:  # empty cell
                continue
        for name in sorted(_code_names(fn.__code__)):
            if name in fn.__globals__:
                self._reference(name, fn.__globals__[name], module)

    def _reference(self, name: str, value: Any, home: types.ModuleType | None) -> None:
        if isinstance(value, types.ModuleType):
            self._modules([value.__name__])
            return
        if isinstance(value, _PRIMITIVES) or (isinstance(value, (tuple, frozenset)) and len(value) <= 64):
            self.parts[f"global:{getattr(home, '__name__', '?')}.{name}"] = repr(value)
            return
        owner = sys.modules.get(getattr(value, "__module__", None) or "")
        if owner is None or not (inspect.isfunction(value) or inspect.isclass(value) or callable(value)):
            return
        if home is not None and owner is home:
            self.callable(value, name)  # a helper in the same file: its own source, not the whole file
        else:
            self._modules([owner.__name__])

    def _modules(self, names: list[str]) -> None:
        """Add the whole source of each project module named, and of the project modules it imports."""
        for name in names:
            label = f"module:{name}"
            if label in self.parts:
                continue
            file = _module_file(name)
            if file is None:
                continue
            source = Path(file).read_text(encoding="utf-8")
            self.parts[label] = source
            package = name if file.endswith("__init__.py") else name.rpartition(".")[0]
            self._modules(_imports(source, package))


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def code_fingerprint(transform: Callable[..., Any], *, version: str | None = None) -> CodeFingerprint:
    """Fingerprint a transform by its source and the sources of the project modules it uses.

    Taken into account: the transform's own source; helpers from the same file that it calls (their
    source); primitive module-level constants it reads; whole sources of project modules it uses, and of
    project modules those import. Modules from the standard library or site-packages are left out (their
    versions count only through ``libraries``). With ``version`` set, the source is not read at all.

    Args:
        transform: The feature transform (function, ``functools.partial``, or callable object).
        version: An explicit version string; use it when the source cannot be read or should not matter.

    Raises:
        ConfigurationError: the source cannot be read and no ``version`` was given, or ``version`` is blank.
    """
    if version is not None:
        if not str(version).strip():
            raise ConfigurationError("version must be a non-empty string such as '2026-11-22.1', got ''")
        return CodeFingerprint(digest("version", str(version)), (f"version:{version}",))
    if not callable(transform):
        raise ConfigurationError(
            f"transform must be a callable, got {type(transform).__name__} {transform!r}"
        )
    collector = _Collector()
    collector.callable(transform, getattr(transform, "__qualname__", "transform"))
    ordered = sorted(collector.parts.items())
    return CodeFingerprint(digest(*(p for pair in ordered for p in pair)), tuple(k for k, _ in ordered))
