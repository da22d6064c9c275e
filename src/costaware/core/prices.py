"""The price catalog: pure look-ups over tables of on-demand prices, spot advice and transfer prices.

Fetching and caching the tables lives in ``costaware.adapters.price_files``; this module only parses
text it is given and answers questions about it.
"""

from __future__ import annotations

import csv
import difflib
import io
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation

from costaware.core.errors import ConfigurationError, InvalidPriceDataError, PriceNotFoundError

ONDEMAND_COLUMNS = ("region", "instance_type", "vcpus", "memory_gib", "gpus", "usd_per_hour")
ADVISOR_COLUMNS = ("region", "instance_type", "savings_pct", "interruption_range")
TRANSFER_COLUMNS = ("src_region", "dst_region", "usd_per_gb")
INTERNET = "internet"
#: Processor architectures as EC2 names them, with the other spellings users type.
ARCH_ALIASES = {"x86_64": "x86_64", "amd64": "x86_64", "x86": "x86_64", "arm64": "arm64", "aarch64": "arm64"}


#: Families whose CPU is burstable (credits): a sustained training would be throttled once they run out.
BURSTABLE = re.compile(r"^t\d[a-z]*\.")
#: Families of the Xen era (2006-2015), still sold: the cheapest fits on paper (m1.small, m3.medium), but
#: their cores are a decade old, so a runtime measured on a current type does not carry over. The EC2 user
#: guide's previous-generation types with instance-store root volumes (C1, C3, D2, I2, M1, M2, M3, R3; not
#: X1, still the large-memory choice), and the cluster, GPU and storage families of those years.
LEGACY = re.compile(r"^(c1|c3|cc1|cc2|cg1|cr1|d2|g2|hi1|hs1|i2|m1|m2|m3|r3|t1)\.")


def normalize_arch(arch: str) -> str:
    """``x86_64`` or ``arm64`` for any common spelling (``amd64``, ``aarch64``).

    Raises:
        ConfigurationError: an architecture EC2 does not sell.
    """
    found = ARCH_ALIASES.get(arch.strip().lower())
    if found is None:
        raise ConfigurationError(f"unknown architecture {arch!r}: use x86_64 (amd64) or arm64 (aarch64)")
    return found


@dataclass(frozen=True, slots=True)
class InstanceOffer:
    """One instance type in one region at its on-demand price."""

    instance_type: str
    region: str
    vcpus: int
    memory_gib: Decimal
    gpus: Decimal
    gpu_model: str
    gpu_memory_gib: Decimal
    usd_per_hour: Decimal
    arch: str = ""
    specs_known: bool = True


@dataclass(frozen=True, slots=True)
class SpotAdvice:
    """What the AWS Spot Instance Advisor says of a type in a region: typical saving and interruption rate."""

    savings_pct: int
    interruption_range: str


def _rows(text: str, required: Iterable[str], what: str) -> list[tuple[int, dict[str, str]]]:
    # csv.reader + zip: a third of DictReader's cost, which matters for the 15k-row advisor table.
    reader = csv.reader(io.StringIO(text))
    header = next(reader, [])
    missing = [c for c in required if c not in header]
    if missing:
        raise InvalidPriceDataError(f"{what} lacks column(s) {', '.join(missing)}; its header is {header!r}")
    width = len(header)
    return [
        (
            number,
            dict(zip(header, row if len(row) >= width else [*row, *[""] * (width - len(row))], strict=False)),
        )
        for number, row in enumerate(reader, start=2)
        if row
    ]


def _decimal(
    row: dict[str, str],
    column: str,
    line: int,
    what: str,
    *,
    default: str | None = None,
    minimum: int = 0,
    positive: bool = False,
) -> Decimal:
    raw = (row.get(column) or "").strip() or default
    try:
        value = Decimal(raw) if raw is not None else None
    except InvalidOperation:
        value = None
    if value is None or not value.is_finite() or value < minimum or (positive and value <= 0):
        bound = "> 0" if positive else f">= {minimum}"
        raise InvalidPriceDataError(
            f"{what} line {line}: column {column!r} must be a number {bound}, got {row.get(column)!r}"
        )
    return value


class PriceCatalog:
    """On-demand prices, spot advice and transfer prices, queried by (instance type, region).

    Build it with :meth:`from_csv_text` or, for the bundled snapshot,
    ``costaware.adapters.price_files.bundled_catalog()``.
    """

    def __init__(
        self,
        offers: Iterable[InstanceOffer],
        spot_advice: dict[tuple[str, str], SpotAdvice] | None = None,
        transfer_usd_per_gb: dict[tuple[str, str], Decimal] | None = None,
        *,
        unpriced: Iterable[tuple[str, str]] = (),
    ) -> None:
        self._offers: dict[tuple[str, str], InstanceOffer] = {}
        for offer in offers:
            self._offers[(offer.instance_type, offer.region)] = offer
        self._spot = dict(spot_advice or {})
        self._transfer = dict(transfer_usd_per_gb or {})
        self._unpriced = set(unpriced)
        self._types = sorted({t for t, _ in self._offers} | {t for t, _ in self._unpriced})
        self._regions = sorted(
            {r for _, r in self._offers} | {r for _, r in self._unpriced} | {s for s, _ in self._transfer}
        )

    @classmethod
    def from_csv_text(
        cls, ondemand_csv: str, spot_advisor_csv: str | None = None, transfer_csv: str | None = None
    ) -> PriceCatalog:
        """Parse the three tables; see ``costaware/data/SOURCES.md`` for their columns.

        Raises:
            InvalidPriceDataError: a column is missing, a number is malformed or negative, or a
                (type, region) pair appears twice with different prices.
        """
        offers: dict[tuple[str, str], InstanceOffer] = {}
        unpriced: set[tuple[str, str]] = set()
        what = "on-demand price table"
        for line, row in _rows(ondemand_csv, ONDEMAND_COLUMNS, what):
            key = (row["instance_type"].strip(), row["region"].strip())
            if not all(key):
                raise InvalidPriceDataError(
                    f"{what} line {line}: instance_type and region must be set, got {key}"
                )
            if not (row.get("usd_per_hour") or "").strip():
                unpriced.add(key)  # a type the snapshot knows of but has no price for (yet)
                continue
            # Empty vCPUs and memory: the snapshot has a price but no specs for the type.
            specs_known = bool((row.get("vcpus") or "").strip() and (row.get("memory_gib") or "").strip())
            offer = InstanceOffer(
                instance_type=key[0],
                region=key[1],
                vcpus=int(_decimal(row, "vcpus", line, what, default="0")),
                memory_gib=_decimal(row, "memory_gib", line, what, default="0"),
                gpus=_decimal(row, "gpus", line, what, default="0"),
                gpu_model=(row.get("gpu_model") or "").strip(),
                gpu_memory_gib=_decimal(row, "gpu_memory_gib", line, what, default="0"),
                usd_per_hour=_decimal(row, "usd_per_hour", line, what, positive=True),
                arch=(row.get("arch") or "").strip(),
                specs_known=specs_known,
            )
            if key in offers and offers[key].usd_per_hour != offer.usd_per_hour:
                raise InvalidPriceDataError(
                    f"{what} line {line}: {key[0]} in {key[1]} is listed twice, at "
                    f"{offers[key].usd_per_hour} and {offer.usd_per_hour} USD/hour"
                )
            offers[key] = offer
        if not offers:
            raise InvalidPriceDataError(f"{what} has no rows")
        spot: dict[tuple[str, str], SpotAdvice] = {}
        if spot_advisor_csv is not None:
            what = "spot advisor table"
            shared: dict[tuple[int, str], SpotAdvice] = {}  # ~15k rows share a few dozen distinct values
            for line, row in _rows(spot_advisor_csv, ADVISOR_COLUMNS, what):
                if (row.get("os") or "Linux") != "Linux":
                    continue
                raw = row["savings_pct"]
                # Whole percentages are the norm: skip Decimal parsing for them (load time).
                savings = (
                    int(raw)
                    if raw.isdigit()
                    else int(_decimal(row, "savings_pct", line, what, minimum=-1000))
                )
                if savings > 100:  # negative savings are real: spot sometimes costs more than on-demand
                    raise InvalidPriceDataError(f"{what} line {line}: savings_pct {savings} is above 100")
                value = (savings, row["interruption_range"].strip())
                advice = shared.get(value)
                if advice is None:
                    advice = shared[value] = SpotAdvice(*value)
                spot[(row["instance_type"].strip(), row["region"].strip())] = advice
        transfer: dict[tuple[str, str], Decimal] = {}
        if transfer_csv is not None:
            what = "transfer price table"
            for line, row in _rows(transfer_csv, TRANSFER_COLUMNS, what):
                transfer[(row["src_region"].strip(), row["dst_region"].strip())] = _decimal(
                    row, "usd_per_gb", line, what
                )
        return cls(offers.values(), spot, transfer, unpriced=unpriced - offers.keys())

    def with_on_demand(self, prices: Mapping[tuple[str, str], Decimal]) -> PriceCatalog:
        """A copy whose on-demand prices are replaced or added: ``{(instance_type, region): usd_per_hour}``.

        A type priced in a region the snapshot lacks takes its specs from another region; a type the
        snapshot does not know at all gets an offer without specs (``specs_known=False``).
        """
        offers = dict(self._offers)
        specs = {t: o for (t, _), o in self._offers.items()}
        for (instance_type, region), usd in prices.items():
            base = offers.get((instance_type, region)) or specs.get(instance_type)
            if base is not None:
                offers[(instance_type, region)] = replace(base, region=region, usd_per_hour=usd)
            else:
                offers[(instance_type, region)] = InstanceOffer(
                    instance_type, region, 0, Decimal(0), Decimal(0), "", Decimal(0), usd, specs_known=False
                )
        return PriceCatalog(
            offers.values(), self._spot, self._transfer, unpriced=self._unpriced - set(prices)
        )

    # -- look-ups ---------------------------------------------------------------------------------

    @property
    def instance_types(self) -> list[str]:
        return list(self._types)

    @property
    def regions(self) -> list[str]:
        return list(self._regions)

    def check_instance_type(self, instance_type: str) -> None:
        """Raise ``PriceNotFoundError`` when the catalog lists no such type, suggesting the closest names."""
        if instance_type in self._types:
            return
        if instance_type.startswith("ml."):
            # "did you mean m5.xlarge?" led a SageMaker user to a type SageMaker refuses.
            raise PriceNotFoundError(
                f"no price for the SageMaker type {instance_type!r}: the bundled table holds EC2 types, "
                "and SageMaker prices its ml.* types apart; give its prices (a training's "
                "spot_usd_per_hour and on_demand_usd_per_hour), or fetch them with `costaware prices "
                "refresh --service sagemaker`"
            )
        sizes = sorted(
            (t for t in self._types if t.startswith(f"{instance_type.strip().lower()}.")), key=_size_order
        )
        if "." not in instance_type and sizes:
            # "m5": a family, whose closest name is no help (it pointed at `prices list`).
            raise PriceNotFoundError(
                f"{instance_type!r} is an instance family, not a type: give a size, e.g. "
                f"{', '.join(sizes[:4])}"
            )
        raise PriceNotFoundError(
            f"unknown instance type {instance_type!r}{_suggest(instance_type, self._types)}"
        )

    def offer(self, instance_type: str, region: str) -> InstanceOffer:
        """The on-demand offer of a type in a region.

        Raises:
            PriceNotFoundError: unknown type, unknown region, or the type is not sold there; the
                message suggests the closest names.
        """
        found = self._offers.get((instance_type, region))
        if found is not None:
            return found
        self.check_instance_type(instance_type)
        if region not in self._regions:
            raise PriceNotFoundError(
                f"unknown region {region!r}{_suggest(region, self._regions, region=True)}"
            )
        if (instance_type, region) in self._unpriced:
            raise PriceNotFoundError(
                f"the price table lists {instance_type} in {region} without an on-demand price: run "
                f"`costaware prices refresh --region {region} --types {instance_type}` (AWS access) or "
                "`costaware prices import FILE` (an offline Price List offer file)"
            )
        sold_in = sorted(r for t, r in self._offers if t == instance_type)
        raise PriceNotFoundError(
            f"no on-demand price for {instance_type} in {region}; it is priced in {', '.join(sold_in[:8])}"
            + (" ..." if len(sold_in) > 8 else "")
            + f": choose one of those, or where AWS sells it in {region} run `costaware prices refresh "
            f"--region {region} --types {instance_type}` (AWS access) or `costaware prices import FILE` (an "
            "offer file)"
        )

    def on_demand_usd_per_hour(self, instance_type: str, region: str) -> Decimal:
        return self.offer(instance_type, region).usd_per_hour

    def spot_advice(self, instance_type: str, region: str) -> SpotAdvice:
        """Spot Instance Advisor figures; raises ``PriceNotFoundError`` when the advisor has no entry."""
        self.offer(instance_type, region)  # same errors as on-demand for unknown names
        advice = self._spot.get((instance_type, region))
        if advice is None:
            raise PriceNotFoundError(f"the spot advisor has no entry for {instance_type} in {region}")
        return advice

    def spot_estimate_usd_per_hour(self, instance_type: str, region: str) -> Decimal:
        """On-demand price less the advisor's typical savings: an estimate when no spot price is recorded."""
        advice = self.spot_advice(instance_type, region)
        on_demand = self.on_demand_usd_per_hour(instance_type, region)
        return (on_demand * (100 - advice.savings_pct) / 100).quantize(Decimal("0.000001"))

    def transfer_usd_per_gb(self, src_region: str, dst_region: str) -> Decimal:
        """USD per GB moved from ``src_region`` to ``dst_region`` (or ``"internet"``); same region is free."""
        if src_region == dst_region:
            return Decimal(0)
        price = self._transfer.get((src_region, dst_region))
        if price is not None:
            return price
        known_src = sorted({s for s, _ in self._transfer})
        if src_region not in known_src:
            raise PriceNotFoundError(
                f"no transfer prices from region {src_region!r}{_suggest(src_region, known_src)}"
            )
        # The source itself too: a typo of it ("us-east1" from us-east-1) is the likeliest slip, and moving
        # within one region costs nothing.
        known_dst = sorted({d for s, d in self._transfer if s == src_region} | {src_region})
        raise PriceNotFoundError(
            f"no transfer price from {src_region} to {dst_region!r}{_suggest(dst_region, known_dst)}"
        )

    def instances(
        self,
        *,
        region: str | None = None,
        min_vcpus: int = 0,
        min_memory_gib: Decimal | int = 0,
        min_gpus: Decimal | int = 0,
        gpu_model: str | None = None,
        arch: str | None = None,
    ) -> list[InstanceOffer]:
        """Offers that meet every lower bound, cheapest first (ties broken by name for stable output).

        ``arch`` (``x86_64`` or ``arm64``, aliases ``amd64``, ``aarch64``) keeps the types of that
        architecture; types whose architecture the snapshot does not know are left out then. ``min_gpus``
        alone counts NVIDIA GPUs (what a GPU training can use), of either architecture (g5g's T4G is on
        Graviton); ``gpu_model`` names any accelerator, in full or without its maker (``"T4"``,
        ``"AWS Inferentia"``), one whole one unless ``min_gpus`` asks for a share (g6f's 0.125 of an L4).

        Raises:
            PriceNotFoundError: an unknown region, or a GPU model no type carries (the close names said).
        """
        wanted_arch = normalize_arch(arch) if arch is not None else None
        if region is not None and region not in self._regions:
            raise PriceNotFoundError(
                f"unknown region {region!r}{_suggest(region, self._regions, region=True)}"
            )
        if gpu_model is not None:
            self._check_gpu_model(gpu_model)
            # A model named without a count is one whole GPU: g6f sells an eighth of an L4, which a job
            # asking for "an L4" did not mean. Ask for min_gpus=0.125 to get such a share.
            min_gpus = min_gpus or 1
        chosen = [
            o
            for o in self._offers.values()
            if (region is None or o.region == region)
            and o.vcpus >= min_vcpus
            and o.memory_gib >= Decimal(min_memory_gib)
            and o.gpus >= Decimal(min_gpus)
            and (gpu_model is None or _same_gpu_model(o.gpu_model, gpu_model))
            # GPUs asked for by count alone are CUDA ones: an Inferentia, Trainium or Radeon chip is
            # counted as a GPU by the price list, but a training written for GPUs cannot use it.
            and (not min_gpus or gpu_model is not None or o.gpu_model.startswith("NVIDIA "))
            and (wanted_arch is None or o.arch == wanted_arch)
        ]
        return sorted(chosen, key=lambda o: (o.usd_per_hour, o.instance_type, o.region))

    def _check_gpu_model(self, gpu_model: str) -> None:
        """Refuse a GPU model no type carries (``H1000``): an empty list would read as "nothing fits"."""
        models = {o.gpu_model for o in self._offers.values() if o.gpu_model}
        if any(_same_gpu_model(model, gpu_model) for model in models):
            return
        names = sorted(models | {model.partition(" ")[2] for model in models if " " in model})
        hint = _suggest(gpu_model, names)
        raise PriceNotFoundError(f"no instance type carries GPU model {gpu_model!r}{hint}")


_SIZES = ("nano", "micro", "small", "medium", "large", "xlarge")


def _size_order(instance_type: str) -> tuple[int, str]:
    """Smallest first: ``m5.large`` before ``m5.xlarge`` before ``m5.2xlarge`` before ``m5.metal``."""
    size = instance_type.partition(".")[2]
    if size in _SIZES:
        return _SIZES.index(size), size
    digits = size.removesuffix("xlarge")
    return (len(_SIZES) + int(digits), size) if digits.isdigit() else (10_000, size)


def _same_gpu_model(offered: str, wanted: str) -> bool:
    """Whether ``wanted`` names ``offered``: in full, or without its maker (``T4`` for ``NVIDIA T4``)."""
    offered, wanted = offered.lower(), wanted.strip().lower()
    return wanted == offered or wanted == offered.partition(" ")[2]


def closest_names(name: str, known: Iterable[str]) -> list[str]:
    """The (up to three) known names closest to ``name``, without case (``US-EAST-1``, ``M5.LARGE``)."""
    by_lower = {k.lower(): k for k in known}
    return [by_lower[c] for c in difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.6)]


def _suggest(name: str, known: list[str], *, region: bool = False) -> str:
    """``; did you mean ...?``: the closest known names, without case (``US-EAST-1``, ``M5.LARGE``)."""
    close = closest_names(name, known)
    if close:
        return f"; did you mean {', '.join(close)}?"
    if region:  # `prices list` lists instance types, not regions; local and wavelength zones left out
        parents = sorted(r for r in known if re.fullmatch(r"[a-z]{2}(-gov)?-[a-z]+-\d", r))
        return f"; the regions are {', '.join(parents)} (and their local zones)"
    return "; see `costaware prices list` for the known names"
