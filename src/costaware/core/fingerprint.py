"""Cache keys for feature reuse: fingerprints of inputs, transform code, parameters and library versions.

Everything here is pure: the adapters list and hash the bytes (``costaware.adapters.object_store``) and
hand over :class:`FileStat` values; this module turns them, the transform's source and its parameters into
one hex key. A key changes when an input changes (size, modification time, ETag, version id or content),
when the transform's source or the source of a project module it uses changes, when a parameter changes,
or when pandas/pyarrow change version; nothing else changes it.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import importlib.metadata
import importlib.util
import inspect
import json
import re
import sys
import sysconfig
import textwrap
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from enum import Enum
from pathlib import Path, PurePath
from typing import Any

from costaware.core.errors import ConfigurationError

#: Libraries whose version shapes a transform's output by default.
DEFAULT_LIBRARIES = ("pandas", "pyarrow")
#: Bumped when the way keys are derived changes, so old entries are never read with a new meaning.
KEY_SCHEME = "costaware-features-v1"

_KEY = re.compile(r"^[0-9a-f]{16,128}$")
_DRIVE = re.compile(r"^[A-Za-z]:")
_PRIMITIVES = (str, int, float, bool, bytes, type(None), Decimal)


def _digest(*parts: str | bytes) -> str:
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "big"))  # length-prefixed, so ("ab", "c") != ("a", "bc")
        h.update(data)
    return h.hexdigest()


# -- inputs ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FileStat:
    """What is known of one file or object of an input, without reading it.

    Attributes:
        path: Path relative to the input's root (``""`` when the input is a single file).
        size: Bytes.
        version: The metadata that changes when the bytes change: ``mtime_ns`` for local files, the ETag
            (plus version id) for S3 objects; or a content digest when the content was hashed.
    """

    path: str
    size: int
    version: str


@dataclass(frozen=True, slots=True)
class InputFingerprint:
    """The fingerprint of one named input of a transform.

    Attributes:
        name: The name the transform sees the input under.
        uri: Where the input lives (absolute local path, ``s3://bucket/key`` or an Asset URI).
        digest: Hex digest over every file's path, size and version.
        bytes: Total size in bytes.
        files: Number of files or objects.
        mode: ``metadata``, ``content`` or ``declared`` (an Asset without readable data).
    """

    name: str
    uri: str
    digest: str
    bytes: int
    files: int
    mode: str

    def to_dict(self) -> dict[str, Any]:
        """The fingerprint as a JSON-ready dict (for manifests)."""
        return dataclasses.asdict(self)


def fingerprint_input(name: str, uri: str, stats: Iterable[FileStat], *, mode: str) -> InputFingerprint:
    """Combine the file stats of one input into its fingerprint (order of ``stats`` does not matter).

    Raises:
        ConfigurationError: the input has no files, or the mode is unknown.
    """
    if mode not in ("metadata", "content", "declared"):
        raise ConfigurationError(f"fingerprint mode {mode!r} of input {name!r}: use 'metadata' or 'content'")
    ordered = sorted(stats, key=lambda s: s.path)
    if not ordered:
        raise ConfigurationError(
            f"input {name!r} at {uri} has no files: check the path or prefix, or that the upstream task "
            "wrote it"
        )
    parts: list[str] = []
    for stat in ordered:
        parts += [stat.path, str(stat.size), stat.version]
    return InputFingerprint(
        name=name,
        uri=uri,
        digest=_digest(*parts),
        bytes=sum(s.size for s in ordered),
        files=len(ordered),
        mode=mode,
    )


# -- code -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CodeFingerprint:
    """The fingerprint of a transform's code.

    Attributes:
        digest: Hex digest over every part below.
        parts: What went in, e.g. ``("source:mydag.build_features", "module:myproject.features")``.
    """

    digest: str
    parts: tuple[str, ...]


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths["stdlib"], paths["purelib"], paths["platlib"], sys.base_prefix, sys.base_exec_prefix}
    return tuple(str(Path(r).resolve()) for r in roots if r)


def _is_project_file(name: str, file: str | None) -> bool:
    if name.partition(".")[0] in sys.stdlib_module_names or not file or not file.endswith(".py"):
        return False
    resolved = str(Path(file).resolve())
    return not any(resolved.startswith(root + "/") for root in _library_roots())


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
            self.parts[f"partial:{label}"] = _canonical_value([list(obj.args), obj.keywords], label)
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
        return CodeFingerprint(_digest("version", str(version)), (f"version:{version}",))
    if not callable(transform):
        raise ConfigurationError(
            f"transform must be a callable, got {type(transform).__name__} {transform!r}"
        )
    collector = _Collector()
    collector.callable(transform, getattr(transform, "__qualname__", "transform"))
    ordered = sorted(collector.parts.items())
    return CodeFingerprint(_digest(*(p for pair in ordered for p in pair)), tuple(k for k, _ in ordered))


# -- parameters and libraries ---------------------------------------------------------------------


def _plain(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return {"__float__": repr(value)}
        return value
    if isinstance(value, Decimal):
        return {"__decimal__": str(value)}
    if isinstance(value, (datetime, date)):
        return {"__datetime__": value.isoformat()}
    if isinstance(value, timedelta):
        return {"__timedelta__": value.total_seconds()}
    if isinstance(value, Enum):
        return _plain(value.value, where)
    if isinstance(value, PurePath):
        return {"__path__": str(value)}
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigurationError(f"parameter {where} has a non-string key {key!r}: use string keys")
            out[key] = _plain(item, f"{where}.{key}")
        return out
    if isinstance(value, (list, tuple)):
        return [_plain(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, (set, frozenset)):
        return {"__set__": sorted(json.dumps(_plain(v, where), sort_keys=True) for v in value)}
    raise ConfigurationError(
        f"parameter {where} is a {type(value).__name__} ({value!r:.60}), which has no stable fingerprint: "
        "pass JSON-like values (str, numbers, bool, None, lists, dicts, Decimal, dates)"
    )


def canonical_params(params: Mapping[str, Any]) -> str:
    """Parameters as canonical JSON (sorted keys, no spaces), so equal parameters give equal text.

    Raises:
        ConfigurationError: a value has no stable text form (an object, a DataFrame, ...).
    """
    return json.dumps(_plain(dict(params), "params"), sort_keys=True, separators=(",", ":"))


def _canonical_value(value: Any, where: str) -> str:
    return json.dumps(_plain(value, where), sort_keys=True, separators=(",", ":"))


def library_versions(names: Iterable[str] = DEFAULT_LIBRARIES) -> dict[str, str]:
    """Installed versions of the libraries that shape a transform's output (``"absent"`` when missing)."""
    found: dict[str, str] = {}
    for name in sorted(set(names)):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "absent"
    return found


# -- the key --------------------------------------------------------------------------------------


def cache_key(
    inputs: Iterable[InputFingerprint],
    code: CodeFingerprint,
    params: Mapping[str, Any],
    libraries: Mapping[str, str],
) -> str:
    """The cache key: a 128-bit hex digest of inputs, code, parameters and library versions.

    Raises:
        ConfigurationError: two inputs share a name, or a parameter has no stable text form.
    """
    ordered = sorted(inputs, key=lambda i: i.name)
    names = [i.name for i in ordered]
    if len(set(names)) != len(names):
        raise ConfigurationError(f"input names must be unique, got {names}")
    parts = [KEY_SCHEME, code.digest, canonical_params(params), json.dumps(dict(sorted(libraries.items())))]
    for item in ordered:
        parts += [item.name, item.digest]
    return _digest(*parts)


# -- path safety ----------------------------------------------------------------------------------


def validate_key(key: str) -> str:
    """Check that ``key`` is a cache key (lower-case hex), so it can never name a path outside the store.

    Raises:
        ConfigurationError: anything else, e.g. ``../x`` or ``/etc``.
    """
    if not isinstance(key, str) or not _KEY.match(key):
        raise ConfigurationError(
            f"cache key {key!r} is not a key: keys are 16-128 lower-case hex characters, "
            "as printed by `costaware cache list`"
        )
    return key


def safe_relative_path(value: str, *, what: str = "path") -> str:
    r"""Normalise a relative path or prefix (``a/b/``) and reject anything that could leave its root.

    Rejected: empty segments (``a//b``), ``.`` or ``..`` segments, absolute paths (``/x``, ``C:\x``),
    backslashes and NUL bytes. A trailing ``/`` is dropped.

    Raises:
        ConfigurationError: the value is unsafe; the message names it.
    """
    if not isinstance(value, str):
        raise ConfigurationError(f"{what} must be a string, got {type(value).__name__}")
    text = value[:-1] if value.endswith("/") else value
    problem = ""
    if value.startswith("/") or _DRIVE.match(value):
        problem = "is absolute"
    elif "\\" in value or "\x00" in value:
        problem = "contains a backslash or NUL byte"
    elif text and any(seg in ("", ".", "..") for seg in text.split("/")):
        problem = "has an empty, '.' or '..' segment"
    if problem:
        raise ConfigurationError(
            f"{what} {value!r} {problem}: use a relative path of plain names such as 'team/features'"
        )
    return text
