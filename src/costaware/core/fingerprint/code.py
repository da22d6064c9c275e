"""Fingerprints of a transform's code: its source and the sources of the project modules it uses.

What counts is what can change the transform's output: its own source, helpers from the same file that it
calls, the module-level values it reads (as canonical JSON; for an object such as a compiled regex, the
statement that makes it), and the whole sources of the project modules it uses (and of those they
import). The standard library and site-packages are left out: their versions count only through the library
versions in the key.
"""

from __future__ import annotations

import ast
import enum
import functools
import importlib.util
import inspect
import re
import sys
import sysconfig
import textwrap
import types
from collections.abc import Callable, Mapping
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
        bound_to = None
        if isinstance(obj, types.MethodType):
            # Scale(factor=2).apply: the instance's attributes count as a callable object's do.
            bound_to = None if inspect.isclass(obj.__self__) else obj.__self__
            obj = obj.__func__
        fn = inspect.unwrap(obj) if callable(obj) else obj
        target = fn if inspect.isfunction(fn) or inspect.isclass(fn) else type(fn)
        name = f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', '?')}"
        if "<lambda>" in name:  # two lambdas of one module share the name: keyed by where each is
            name = f"{name}:{label}"
        try:
            source = textwrap.dedent(inspect.getsource(target))
        except (OSError, TypeError) as e:
            raise ConfigurationError(
                f"cannot read the source of transform {name}: define it in a .py file, or pass "
                f"version='<your version>' to key the cache by an explicit version instead"
            ) from e
        self.parts[f"source:{name}"] = source
        module = sys.modules.get(getattr(target, "__module__", "") or "")
        if target is not fn:  # a callable object: Scale(factor=2) and Scale(factor=3) share their source
            self.parts[f"state:{name}:{label}"] = self._state(fn, name, module)
        elif bound_to is not None:
            self.parts[f"state:{name}:{label}"] = self._state(bound_to, name, module)
        # Imports inside the function (the Airflow way: heavy imports where they are used).
        self._modules(_imports(source, getattr(module, "__package__", None) or ""))
        if inspect.isfunction(target):
            self._function_references(target, module)
        elif inspect.isclass(target):
            for member in vars(target).values():
                if inspect.isfunction(member):
                    self._function_references(member, module)

    def _state(self, obj: Any, name: str, home: types.ModuleType | None) -> str:
        """The attributes of a callable object as canonical JSON (``__dict__`` and ``__slots__``)."""
        state = dict(getattr(obj, "__dict__", {}))
        for cls in type(obj).__mro__:
            slots = getattr(cls, "__slots__", ())
            for slot in [slots] if isinstance(slots, str) else slots:
                if slot not in ("__dict__", "__weakref__") and hasattr(obj, slot):
                    state[slot] = getattr(obj, slot)
        try:
            return canonical_value(self._plain(state, name, home), name)
        except _NoStableText as e:
            raise ConfigurationError(
                f"transform {name} is a callable object whose attribute {e} has no stable fingerprint: "
                "give it JSON-like attributes (str, numbers, lists, dicts), or pass "
                "version='<your version>' to key the cache by an explicit version instead"
            ) from e

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
        label = f"global:{getattr(home, '__name__', '?')}.{name}"
        if isinstance(value, _PRIMITIVES) or (
            isinstance(value, tuple) and all(isinstance(v, _PRIMITIVES) for v in value)
        ):
            # repr, as before: keys of existing cache entries stay valid (a tuple of plain values prints
            # the same in every process; a set does not, and goes below).
            self.parts[label] = repr(value)
            return
        if callable(value):
            self._track_callable(value, name, home)
            return
        try:
            self.parts[label] = canonical_value(self._plain(value, name, home), name)
        except _NoStableText:
            # A compiled regex, a logger, ...: what made it is the statement that binds it in its module.
            self.parts[label] = self._binding_source(name, value, home)

    def _track_callable(self, value: Any, name: str, home: types.ModuleType | None) -> None:
        owner = sys.modules.get(getattr(value, "__module__", None) or "")
        if owner is None:
            owner = sys.modules.get(getattr(type(value), "__module__", None) or "")
        if owner is None:
            return
        if home is not None and owner is home:
            self.callable(value, name)  # a helper in the same file: its own source, not the whole file
            return
        self._modules([owner.__name__])
        instance = value.__self__ if isinstance(value, types.MethodType) else value
        plain_callable = inspect.isroutine(instance) or inspect.isclass(instance) or isinstance(
            instance, (types.ModuleType, functools.partial)
        )  # fmt: skip
        if not plain_callable and _module_file(type(instance).__module__) is not None:
            # SCALER = Scale(factor=2) with Scale from another project module: its module's source is the
            # same for factor=2 and factor=3, so the instance's attributes count too.
            label = f"{getattr(home, '__name__', '?')}.{name}"
            self.parts[f"state:{label}"] = self._state(instance, label, home)

    def _plain(self, value: Any, where: str, home: types.ModuleType | None) -> Any:
        """``value`` as JSON-like data; callables and modules inside it are tracked and stand as their names.

        Raises:
            _NoStableText: something inside has no stable text (an object that is not JSON-like).
        """
        if isinstance(value, types.ModuleType):
            self._modules([value.__name__])
            return {"__module__": value.__name__}
        if isinstance(value, Mapping):
            return {
                self._text(k, where, home): self._plain(v, f"{where}[{k!r}]", home) for k, v in value.items()
            }
        if isinstance(value, (list, tuple)):
            return [self._plain(v, f"{where}[{i}]", home) for i, v in enumerate(value)]
        if isinstance(value, (set, frozenset)):  # sorted text: a set's own order follows the hash seed
            return {"__set__": sorted(self._text(v, where, home) for v in value)}
        if isinstance(value, functools.partial):
            return {"__partial__": self._plain([value.func, value.args, value.keywords], where, home)}
        if isinstance(value, re.Pattern):  # a compiled regex: what it matches is its text and flags
            return {"__regex__": [value.pattern if isinstance(value.pattern, str) else repr(value.pattern),
                                  int(value.flags)]}  # fmt: skip
        if callable(value) and not isinstance(value, enum.Enum):
            self._track_callable(value, where, home)
            target = value if hasattr(value, "__qualname__") else type(value)
            return {"__callable__": f"{getattr(target, '__module__', '?')}.{target.__qualname__}"}
        try:
            canonical_value(value, where)
        except ConfigurationError as e:
            raise _NoStableText(f"{where} ({type(value).__name__} {value!r:.60})") from e
        return value

    def _text(self, value: Any, where: str, home: types.ModuleType | None) -> str:
        return canonical_value(self._plain(value, where, home), where)

    def _binding_source(self, name: str, value: Any, home: types.ModuleType | None) -> str:
        """The source of the module-level statements in ``home`` that bind ``name``; refused if none do."""
        file = getattr(home, "__file__", None)
        statements: list[str] = []
        if file and file.endswith(".py"):
            source = Path(file).read_text(encoding="utf-8")
            for node in _module_statements(ast.parse(source).body):
                star = isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names)
                if name in _bound_names(node) or star:  # `from consts import *` may bind it
                    statements.append(ast.get_source_segment(source, node) or "")
            if statements:
                # `from myproject.settings import PATTERN`: the module that made it counts.
                self._modules(_imports("\n".join(statements), getattr(home, "__package__", None) or ""))
                return "\n".join(statements)
        raise ConfigurationError(
            f"the transform reads the global {getattr(home, '__name__', '?')}.{name}, a "
            f"{type(value).__name__} ({value!r:.60}) that has no stable fingerprint and no statement in its "
            "module that makes it: make it JSON-like (str, numbers, lists, dicts, sets), or pass "
            "version='<your version>' to key the cache by an explicit version instead"
        )

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


class _NoStableText(Exception):
    """Raised inside the collector when a value has no stable text; the caller decides what to do."""


def _module_statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements that run at import time, also inside ``if``/``try``/``with`` blocks, not in functions."""
    out: list[ast.stmt] = []
    for node in body:
        out.append(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for field in ("body", "orelse", "finalbody", "handlers"):
            for child in getattr(node, field, None) or []:
                out += _module_statements(child.body if isinstance(child, ast.ExceptHandler) else [child])
    return out


def _bound_names(node: ast.stmt) -> set[str]:
    """Names a statement binds: assignment targets and imported names."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(alias.asname or alias.name).partition(".")[0] for alias in node.names}
    if isinstance(node, ast.Assign):
        targets: list[ast.expr] = list(node.targets)
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    else:
        return set()
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def code_fingerprint(transform: Callable[..., Any], *, version: str | None = None) -> CodeFingerprint:
    """Fingerprint a transform by its source and the sources of the project modules it uses.

    Taken into account: the transform's own source (for a callable object, its class's source and its
    attributes); helpers from the same file that it calls (their
    source, also when reached only through a module-level tuple or dict); the module-level values it reads
    (JSON-like ones by value, other objects by the statement that makes them); whole sources of project
    modules it uses, and of project modules those import. Modules from the standard library or
    site-packages are left out (their versions count only through ``libraries``). With ``version`` set, the
    source is not read at all.

    Args:
        transform: The feature transform (function, ``functools.partial``, or callable object).
        version: An explicit version string; use it when the source cannot be read or should not matter.

    Raises:
        ConfigurationError: the source cannot be read, or a module-level object it reads has no stable
            text and no statement in its module makes it, and no ``version`` was given; or ``version`` is
            blank.
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
