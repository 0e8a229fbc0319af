"""What a large DRA inventory costs the served pod: 200 nodes x 128 devices (issue 35).

Run: .venv/bin/python bench/inventory_memory.py        (exit 1 when a target is missed)

Starts ``gpu-webhook serve`` (real gunicorn, two workers, as deployed) twice in this run:
with the shipped rules and no inventory (the baseline), and with a 25,600-device inventory
file (``tests/dra_inventory.py``). Reports the time until ``/readyz`` answers 200 and the
pod's memory once ready: the proportional set size of the master and its workers (a page
the fork shares counts once, as the cgroup counts it) and their summed ``VmRSS``.
Targets, against the baseline of this run: the inventory adds at most 64 MiB to the pod
(docs/server.md's memory table leaves it that room beside the memo and answer budgets),
and readiness takes at most 4 times the baseline's.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.dra_inventory import large_dra_inventory  # noqa: E402
from tests.running import Server, pss_kib, rss_kib  # noqa: E402
from webhook.files.certs import DEV_HOSTS, generate, write  # noqa: E402

MIB = 1024 * 1024


def measure(tmp: Path, inventory: Path | None) -> tuple[float, int, int]:
    started = time.monotonic()
    server = Server(
        tmp=tmp, cert_dir=tmp, rules=ROOT / "rules", inventory=inventory, ready_timeout=300
    )
    try:
        server.wait_for_fresh_workers(set(), 2, timeout=300)
        ready = time.monotonic() - started
        pids = [server.process.pid, *server.workers()]
        return ready, sum(map(pss_kib, pids)) * 1024, sum(map(rss_kib, pids)) * 1024
    finally:
        Server.close_clients()
        server.stop()


def main() -> int:
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        write(generate(service="gpu-webhook", namespace="dev", extra_sans=DEV_HOSTS, days=30), tmp)
        path = tmp / "inventory.json"
        path.write_text(json.dumps(large_dra_inventory(200, 128)))
        base = measure(tmp, None)
        big = measure(tmp, path)
    print(f"{'':28} {'ready':>8} {'pod PSS':>10} {'pod RSS':>10}")
    for label, (ready, pss, rss) in (("no inventory", base), ("25,600 DRA devices", big)):
        print(f"{label:28} {ready:7.1f}s {pss / MIB:8.0f}Mi {rss / MIB:8.0f}Mi")
    added = (big[1] - base[1]) / MIB
    ratio = big[0] / base[0]
    print(f"the inventory adds {added:.0f} MiB (target <= 64) and {ratio:.1f}x readiness (<= 4.0)")
    return 0 if added <= 64 and ratio <= 4.0 else 1


if __name__ == "__main__":
    sys.exit(main())
