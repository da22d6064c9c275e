"""Rebuild ``src/costaware/data/aws_ondemand_prices.csv`` from the project's shared price tables.

Inputs (see ``src/costaware/data/SOURCES.md``): the multi-region table ``aws_ondemand_prices.csv`` (vantage
and SkyPilot figures) and the complete us-east-1 table ``aws_ec2_us-east-1.csv`` (Karpenter's generated prices
and instance-type reference). Run: ``python scripts/merge_price_snapshot.py SHARED_DATA_DIR OUT_CSV``.

Rules: us-east-1 has one row per type of the us-east-1 table (its price; an empty price when that table has
none). Specs come from the multi-region table where it knows the type (its GPU names and GPU memory are the
vendor's), else from the us-east-1 table. Other regions come from the multi-region table. ``arch`` is the
us-east-1 table's, written as EC2 names it (``amd64`` -> ``x86_64``); a type that table does not label (the
previous generation: p2, p3, g2, g3, f1, ..., in every region) gets it from its family's name
(:func:`family_arch`), so that ``prices list --arch x86_64`` keeps it. Rows without specs keep empty cells.
The GPUs of the families in :data:`GPU_CORRECTIONS`, which the multi-region table names wrongly, are corrected
in every region.
"""

from __future__ import annotations

import csv
import re
import sys
from decimal import Decimal
from pathlib import Path

COLUMNS = [
    "provider", "region", "instance_type", "vcpus", "memory_gib", "gpus", "gpu_model", "gpu_memory_gib",
    "arch", "usd_per_hour",
]  # fmt: skip
SPECS = ("vcpus", "memory_gib", "gpus", "gpu_model", "gpu_memory_gib")
#: GPU names of the us-east-1 table (Kubernetes labels) -> the vendor names the multi-region table uses.
GPU_NAMES = {
    "l4": "NVIDIA L4",
    "a10g": "NVIDIA A10G",
    "l40s": "NVIDIA L40S",
    "t4": "NVIDIA T4",
    "t4g": "NVIDIA T4G",
    "rtx-pro-server-6000": "NVIDIA RTX PRO 6000 Blackwell",
    "rtx-pro-4500": "NVIDIA RTX PRO 4500 Blackwell",
    "radeon-pro-v520": "AMD Radeon Pro V520",
    "inferentia": "AWS Inferentia",
    "inferentia2": "AWS Inferentia2",
    "trainium": "AWS Trainium",
    "trainium2": "AWS Trainium2",
    "a100": "NVIDIA A100",
    "h100": "NVIDIA H100",
    "h200": "NVIDIA H200",
    "v100": "NVIDIA V100",
    "b200": "NVIDIA B200 Blackwell",
    "b300": "NVIDIA B300 Blackwell",
    "qualcomm-ai100": "Qualcomm AI 100",
}
#: Families whose GPU the multi-region table names wrongly, corrected from AWS's own pages: g5g carries NVIDIA
#: T4G GPUs with 16 GiB each (the table says an "ARM Mali-G78MP12" with 4 GiB), g6f and gr6f fractions of an
#: NVIDIA L4 of 24 GiB (the table says an L40 of 48 GiB: 1/8 of a GPU with 6 GiB instead of 3). The GPU
#: count (a fraction for g6f) is right in the table and is kept. Sources: "Amazon EC2 G5g instances" and
#: "Amazon EC2 G6f instances" (aws.amazon.com/ec2/instance-types), AWS Batch's GPU job table.
GPU_CORRECTIONS = {"g5g": ("NVIDIA T4G", 16), "g6f": ("NVIDIA L4", 24), "gr6f": ("NVIDIA L4", 24)}
ARCH = {"amd64": "x86_64", "arm64": "arm64", "": ""}
#: Graviton families name the processor with a ``g`` after the generation (m6g, c7gn, t4g, g5g, x2gd); a1 is
#: the first Graviton.
GRAVITON = re.compile(r"^(a1|[a-z]+\d+[a-z]*g[a-z]*)$")


def family_arch(instance_type: str) -> str:
    """``arm64`` for a Graviton family, else ``x86_64`` (every other EC2 family is Intel or AMD)."""
    family = instance_type.split(".")[0]
    return "arm64" if GRAVITON.match(family) and not family.startswith("u-") else "x86_64"


def corrected(row: dict[str, str]) -> dict[str, str]:
    """``row`` with the GPU model and memory of :data:`GPU_CORRECTIONS` where its family is listed."""
    fix = GPU_CORRECTIONS.get(row["instance_type"].split(".")[0])
    if fix is None or not row["gpus"]:
        return row
    model, gib_per_gpu = fix
    memory = (Decimal(row["gpus"]) * gib_per_gpu).normalize()
    return {**row, "gpu_model": model, "gpu_memory_gib": format(memory, "f")}


def main(shared: Path, out: Path) -> None:
    """Write the merged table to ``out`` from the two tables in ``shared``."""
    multi = list(csv.DictReader((shared / "aws_ondemand_prices.csv").open(encoding="utf-8")))
    east = list(csv.DictReader((shared / "aws_ec2_us-east-1.csv").open(encoding="utf-8")))
    specs: dict[str, dict[str, str]] = {}
    for row in multi:
        specs.setdefault(row["instance_type"], {c: row[c] for c in SPECS})
    arch = {row["instance_type"]: ARCH[row["arch"]] for row in east}
    rows = []
    for row in east:
        known = specs.get(row["instance_type"])
        if known is None:
            known = {c: row[c] for c in SPECS}
            known["gpu_model"] = GPU_NAMES.get(known["gpu_model"], known["gpu_model"])
        rows.append({**row, **known, "arch": arch[row["instance_type"]] or family_arch(row["instance_type"])})
    for row in multi:
        if row["region"] != "us-east-1" or row["instance_type"] not in arch:
            rows.append({**row, "arch": arch.get(row["instance_type"]) or family_arch(row["instance_type"])})
    rows = [corrected(row) for row in rows]
    rows.sort(key=lambda r: (r["region"], r["instance_type"]))
    with out.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows({c: r.get(c, "") for c in COLUMNS} for r in rows)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
