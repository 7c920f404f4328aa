"""What building the worker and simulator images costs, cold and warm, and how large they are.

Cold: the debootstrap base, the images and their cached dependency wheels are removed first (pip's
own download cache is left as it is: say so when quoting the figure). Warm: the same build again,
nothing changed. Prints each step (base, project wheel, each image with its wheels) and the sizes,
with the load average, for docs/images.md.

    python benchmarks/images_build.py            # cold, then warm
    python benchmarks/images_build.py --warm     # warm only
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from contract.spec_loader import load_stack  # noqa: E402
from stack.baseimage import DebootstrapRecipe  # noqa: E402
from stack.images import BaseKind, Built, ImageName, build_images, recipes  # noqa: E402
from stack.podman import podman  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ONLY = [ImageName.worker, ImageName.simulator]


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


def build(label: str) -> None:
    spec = load_stack("local", ROOT)
    print(f"== {label} ({load()})", flush=True)
    t0 = time.monotonic()
    report = build_images(spec, ROOT, base=BaseKind.debootstrap.value, only=ONLY,
                          progress=lambda line: print(f"  {time.monotonic() - t0:6.1f} s  {line}", flush=True))
    total = time.monotonic() - t0
    print(f"  base {report.base_ref}: {'built' if report.base_built else 'cached'} in {report.base_seconds:.1f} s")
    for item in report.images:
        if isinstance(item, Built):
            print(f"  {item.name}: {item.ref} {item.size_bytes / 1e6:.0f} MB, {item.seconds:.1f} s "
                  f"(wheels {'collected' if item.wheels_built else 'cached'})")
    print(f"  total {total:.1f} s ({load()})", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warm", action="store_true", help="skip the cold build")
    args = parser.parse_args()
    if not args.warm:
        plan = recipes(load_stack("local", ROOT))
        refs = [plan[name].ref for name in ONLY] + [DebootstrapRecipe().ref]
        podman(["rmi", "--force", *refs], check=False)
        for name in ONLY:
            shutil.rmtree(ROOT / ".cache" / "images" / "wheels" / plan[name].name, ignore_errors=True)
        build("cold: no base image, no dependency wheels, no layers")
    build("warm: nothing changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
