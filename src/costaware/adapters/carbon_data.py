"""Carbon data: recorded hourly grid intensity, the power model, and the grid zone of each cloud region.

Read from files: the shared CSV format of recorded intensity, and the bundled ``costaware/data/`` (see
``data/SOURCES.md``).

A carbon intensity series is a ``PriceSeries`` of gCO2e/kWh (a step function per hour), so the forecasts,
windows and policies built for prices read it as they read a price.
"""

from __future__ import annotations

import csv
import functools
import io
import re
from datetime import timedelta
from decimal import Decimal
from importlib import resources
from pathlib import Path

from costaware.core.carbon import Machine, PowerModel
from costaware.core.errors import ConfigurationError, InvalidPriceDataError, not_utf8_text, unreadable_file
from costaware.core.prices import InstanceOffer
from costaware.core.series import PriceSeries

#: Life-cycle intensity by default (what Electricity Maps and most reports use); ``direct`` counts combustion.
INTENSITY_COLUMNS = {"lca": "g_co2eq_per_kwh_lca", "direct": "g_co2eq_per_kwh_direct"}
_DATA = "data"


#: The most gCO2e/kWh a recorded hour may hold: several times the dirtiest grid's (coal, ~1,000).
MAX_G_PER_KWH = Decimal(5000)
#: A file's highest hour below this is in another unit (kg/kWh): no grid stays under 1 gCO2e/kWh all along.
MIN_PEAK_G_PER_KWH = Decimal(1)


def carbon_from_text(text: str, *, source: str, basis: str = "lca") -> PriceSeries:
    """Hourly gCO2e/kWh (``timestamp_utc`` and ``g_co2eq_per_kwh_lca``/``_direct``) as a series.

    Raises:
        ConfigurationError: an unknown ``basis``.
        InvalidPriceDataError: missing columns, bad values, gaps over one hour (named with the file).
    """
    column = INTENSITY_COLUMNS.get(basis)
    if column is None:
        raise ConfigurationError(f"carbon basis {basis!r} is not one of {', '.join(INTENSITY_COLUMNS)}")
    text = with_lf_line_ends(text.lstrip("\ufeff"))
    reader = csv.DictReader(io.StringIO(text))
    if not text.strip():  # blank lines alone were "its header is []"
        raise InvalidPriceDataError(
            f"{source}: the file is empty; a carbon intensity CSV starts with the header "
            f"timestamp_utc,{column} and has a row per hour"
        )
    if not reader.fieldnames:
        # The header is the first line: a blank one before it was read as a header of no columns.
        raise InvalidPriceDataError(
            f"{source}: line 1 is blank; a carbon intensity CSV starts with its header "
            f"timestamp_utc,{column} on line 1: delete the blank line(s) above it"
        )
    missing = [c for c in ("timestamp_utc", column) if c not in reader.fieldnames]
    if missing:
        separated = next((mark for mark in ";\t" if mark in "".join(reader.fieldnames)), None)
        # A spreadsheet in a decimal-comma locale saves ';'-separated "CSV": the header was one column.
        hint = (
            f": its columns are separated by {separated!r}; save it with commas between them"
            if separated and len(reader.fieldnames) == 1
            else ""
        )
        raise InvalidPriceDataError(
            f"{source}: carbon intensity CSV lacks column(s) {', '.join(missing)}; its header is "
            f"{reader.fieldnames!r} (expected timestamp_utc,{column}){hint}"
        )
    points, lines = [], []
    for row in reader:
        points.append((row["timestamp_utc"], row[column]))
        lines.append(reader.line_num)  # the file's line, as an editor shows it (the header is line 1)
    if not points:
        # The series' own message spoke of "its filters", which a file has none of.
        raise InvalidPriceDataError(
            f"{source}: the file has a header but no rows; a carbon intensity CSV has a row per hour under "
            f"its header timestamp_utc,{column}"
        )
    series = PriceSeries.from_points(
        points,
        name=f"carbon {source} (gCO2e/kWh, {basis})",
        max_gap=timedelta(hours=1),
        value_name="intensity",
        lines=lines,
    )
    at, worst = max(series.points, key=lambda point: point[1])
    if worst > MAX_G_PER_KWH:
        # 1e308 was accepted, and every sum over it then failed far from the file.
        raise InvalidPriceDataError(
            f"{source}: {column} {worst} at {at:%Y-%m-%d %H:%M} UTC is not a grid's intensity (coal is about "
            f"1,000 gCO2e/kWh; at most {MAX_G_PER_KWH} is taken): check the column's unit (grams per kWh)"
        )
    if worst < MIN_PEAK_G_PER_KWH:
        # 0.09 (kg/kWh) was taken as 0.09 g: every estimate a ten-thousandth of the truth, in silence.
        raise InvalidPriceDataError(
            f"{source}: {column} is at most {worst} over the whole file, below any grid's intensity (the "
            f"cleanest run about 10 gCO2e/kWh): check the column's unit (grams per kWh, not kg)"
        )
    return series


def with_lf_line_ends(text: str) -> str:
    r"""``text`` with its CRLF and CR-only line ends as ``\n``, as ``Path.read_text`` returns a file.

    Text decoded from bytes keeps its ``\r``: the csv module refuses a CR-only file (Excel for Mac's "CSV
    (Macintosh)") with "new-line character seen in unquoted field".
    """
    return text.replace("\r\n", "\n").replace("\r", "\n")


def unreadable_carbon_file(path: str | Path, error: OSError, *, zone_instead: bool) -> InvalidPriceDataError:
    """The error for a carbon intensity file that cannot be read, saying where it was looked for.

    A relative path is read against the current folder, which is rarely the one its writer had in mind
    (``--carbon GB_2023.csv`` typed outside the data folder); ``zone_instead`` where the caller also takes
    a bundled grid zone, which is what such a file name usually meant.
    """
    message = unreadable_file("carbon intensity file", path, error)
    zone = Path(str(path)).stem.partition("_")[0]
    if zone_instead and zone in bundled_zones():
        message += f", or the bundled grid zone {zone!r} for its 2023 data"
    elif zone_instead:
        message += f", or a bundled grid zone ({', '.join(bundled_zones())})"
    return InvalidPriceDataError(message)


def load_carbon(path: str | Path, *, basis: str = "lca") -> PriceSeries:
    """Read a recorded carbon intensity CSV (the format of ``shared/data/carbon_intensity``).

    Raises:
        InvalidPriceDataError: the file cannot be read (named, with where it was looked for), is not UTF-8, or
            is malformed.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise unreadable_carbon_file(path, e, zone_instead=True) from e
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:  # a traceback in `carbon show --source`, in every reader of the folder
        raise InvalidPriceDataError(not_utf8_carbon_file(Path(path).name, data, e.start)) from e
    return carbon_from_text(text, source=Path(path).name, basis=basis)


def not_utf8_carbon_file(name: str, data: bytes, at: int) -> str:
    """Why a carbon file is not read, its bytes not UTF-8 from ``at`` on: what it is, and how to save it."""
    return not_utf8_text(
        name,
        data,
        at,
        kind="a carbon intensity CSV",
        save_as="'CSV UTF-8' (comma-separated)",
        utf16_writers="Excel's 'Unicode Text'",
    )


def bundled_zones() -> list[str]:
    """The grid zones whose 2023 intensity ships with costaware."""
    folder = resources.files("costaware") / _DATA / "carbon_intensity"
    return sorted(p.name.removesuffix("_2023.csv") for p in folder.iterdir() if p.name.endswith(".csv"))


def check_bundled_zone(zone: str) -> None:
    """Refuse a grid zone whose intensity is not bundled; names only, nothing is read.

    Raises:
        ConfigurationError: the zone, the right name where only its case is wrong ("gb" for "GB"), and the
            zones that are bundled.
    """
    zones = bundled_zones()
    if zone in zones:
        return
    same = [z for z in zones if z.lower() == zone.lower()]
    hint = f"did you mean {same[0]!r}? " if same else zone_hint(zone)
    raise ConfigurationError(
        f"no bundled carbon intensity for grid zone {zone!r}: {hint}bundled are {', '.join(zones)}; pass the "
        "path of a recorded carbon intensity CSV, import one with `costaware carbon import`, or configure a "
        "live source"
    )


@functools.cache
def bundled_carbon(zone: str, basis: str = "lca") -> PriceSeries:
    """The bundled 2023 hourly intensity of ``zone`` (``US-CAL-CISO``, ``DE-LU``, ``GB``, ``AU-NSW``).

    Raises:
        ConfigurationError: a zone that is not bundled (named, with the ones that are).
    """
    check_bundled_zone(zone)
    text = (resources.files("costaware") / _DATA / "carbon_intensity" / f"{zone}_2023.csv").read_text()
    return carbon_from_text(text, source=f"{zone}_2023.csv", basis=basis)


@functools.cache
def power_model() -> PowerModel:
    """The bundled power model (``data/power_model.csv``; every coefficient with its source)."""
    text = (resources.files("costaware") / _DATA / "power_model.csv").read_text(encoding="utf-8")
    cpu: dict[str, tuple[float, float]] = {}
    gpu: dict[str, tuple[float, float]] = {}
    memory, pue = 0.0, 1.0
    sources: dict[str, str] = {}
    for row in csv.DictReader(io.StringIO(text)):
        kind, name = row["kind"], row["name"]
        low, high = float(row["min_watts"]), float(row["max_watts"])
        sources[f"{kind}:{name}"] = row["source"]
        if kind == "cpu_per_vcpu":
            cpu[name] = (low, high)
        elif kind == "gpu":
            gpu[name] = (low, high)
        elif kind == "memory_per_gib":
            memory = high
        elif kind == "pue":
            pue = high
    return PowerModel(cpu_watts=cpu, memory_watts_per_gib=memory, gpu_watts=gpu, pue=pue, sources=sources)


@functools.cache
def _region_grid_rows() -> tuple[dict[str, str], ...]:
    text = (resources.files("costaware") / _DATA / "region_grids.csv").read_text(encoding="utf-8")
    return tuple(csv.DictReader(io.StringIO(text)))


def _region_grids() -> dict[tuple[str, str], str]:
    return {(r["provider"], r["region"]): r["grid_zone"] for r in _region_grid_rows()}


def zone_hint(name: str) -> str:
    """``did you mean 'US-CAL-CISO'? `` for a region or a grid's common name (``CAISO``, ``NSW``), else "".

    A zone is named by its id; the region it serves or the grid's everyday name steered people to import
    data under a second name.
    """
    text = str(name).strip()
    rows = _region_grid_rows()
    for row in rows:
        if row["region"] == text:
            return f"{text!r} is a region, whose grid zone is {row['grid_zone']!r}. "
    if len(text) >= 3:
        word = re.compile(rf"\b{re.escape(text)}\b", re.IGNORECASE)
        for row in rows:
            if text.upper() in row["grid_zone"].split("-") or word.search(row["source"]):
                return f"did you mean {row['grid_zone']!r} ({row['source']})? "
    return ""


def importable_zone(zone: str) -> str:
    """``zone`` as ``costaware carbon import --zone`` takes it (``DE_LU``, ``de lu`` -> ``DE-LU``).

    The import refuses '_', '/', spaces and a leading '.' in a zone id, and a known zone in another case; an
    error that told it to import under the id as typed (``--zone DE_LU``) sent the user to that refusal.
    Marks are stripped from both ends together: ``._XX`` was advised as ``--zone -XX``, which argparse takes
    for an option. A real zone id is given in its own case: ``gr`` imported as ``gr``, which ``--zone GR``
    does not read.
    """
    dashed = re.sub(r"[_/\s]+", "-", str(zone).strip()).strip(".-")
    if not dashed:  # "_" or "._": advised `--zone ` (nothing), which no shell line can give
        return "ZONE (an Electricity Maps id such as GB or DE-LU)"
    known = next((z for z in known_grid_zones() if z.upper() == dashed.upper()), None)
    if known is not None:
        return known
    return dashed.upper() if dashed.upper() in real_grid_zones() else dashed


@functools.cache
def real_grid_zones() -> frozenset[str]:
    """Every grid zone id that exists, in capitals: Electricity Maps' ids and every ISO 3166-1 country code.

    Electricity Maps names no zone for 32 countries (GD, CL: it has CL-SEN), which were then taken for a
    typo of a known zone ("did you mean 'GB'?" for Grenada): ``data/iso3166.tab`` adds them.
    """
    ids = _data_lines("grid_zone_ids.txt")
    countries = [line.split("\t", 1)[0] for line in _data_lines("iso3166.tab")]
    return frozenset(code.upper() for code in (*ids, *countries))


def _data_lines(name: str) -> list[str]:
    """The lines of the bundled data file ``name``, stripped, without blank lines and ``#`` comments."""
    text = (resources.files("costaware") / _DATA / name).read_text(encoding="utf-8")
    lines = (line.strip() for line in text.splitlines())
    return [line for line in lines if line[:1] not in ("", "#")]


def known_grid_zones() -> list[str]:
    """The grid zones costaware knows by name: the bundled years' and those of data/region_grids.csv."""
    return sorted({*bundled_zones(), *_region_grids().values()})


def grid_zone(region: str, provider: str = "aws") -> str | None:
    """The grid zone a cloud region draws from (``data/region_grids.csv``), or None when it is not mapped."""
    return _region_grids().get((provider, region))


def machine_of(offer: InstanceOffer) -> Machine:
    """What an instance type draws power with, from the catalog's sizes."""
    return Machine(
        vcpus=int(offer.vcpus),
        memory_gib=float(offer.memory_gib),
        gpus=float(offer.gpus),  # g6f's 1/8 of an L4 draws its share of the board's power
        gpu_model=str(offer.gpu_model or "").removeprefix("NVIDIA ").strip(),
        arch=offer.arch or "x86_64",
    )
