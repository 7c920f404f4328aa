"""Worker start-to-ready, CPU-seconds per page against MinerU's API called directly in a loop,
and RSS growth between 100 and 500 pages.

Run: .venv/bin/python benchmarks/worker_overhead.py [--starts 5] [--docs 15] [--rss-pages 500]
Real Redis, the simulator (profile 'instant', so the client side dominates) and real MinerU, all
on loopback. Targets: start-to-ready < 5 s, overhead < 5 %, RSS growth < 5 %.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # testsupport/ is not installed
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "pdfs"))


def direct_loop(server_url: str, api_key: str, pdfs: list[str], window: int, concurrency: int) -> None:
    """Child mode: MinerU's own API, its own HTTP client, no queue. Prints CPU-s after warm-up."""
    from worker.__main__ import keep_torch_out

    keep_torch_out()  # same imports as the worker
    os.environ["MINERU_VL_API_KEY"] = api_key
    os.environ["MINERU_VL_MODEL_NAME"] = "tiny"
    os.environ["MINERU_PROCESSING_WINDOW_SIZE"] = str(window)
    os.environ["TQDM_DISABLE"] = "1"
    from loguru import logger

    logger.remove()
    from mineru.backend.vlm.vlm_analyze import aio_doc_analyze
    from mineru.backend.vlm.vlm_middle_json_mkcontent import union_make
    from mineru.data.data_reader_writer import FileBasedDataWriter
    from mineru.utils.enum_class import MakeMode

    async def one(path: str, out: Path) -> None:
        middle, _ = await aio_doc_analyze(Path(path).read_bytes(),
                                          image_writer=FileBasedDataWriter(str(out / "images")),
                                          backend="http-client", server_url=server_url + "/",
                                          max_concurrency=concurrency)
        pages = middle["pdf_info"]
        (out / "document.md").write_text(union_make(pages, MakeMode.MM_MD, "images"))
        (out / "content_list.json").write_text(json.dumps(union_make(pages, MakeMode.CONTENT_LIST, "images")))

    async def run() -> float:
        with tempfile.TemporaryDirectory() as tmp:
            await one(pdfs[0], Path(tmp) / "warm")
            r0 = resource.getrusage(resource.RUSAGE_SELF)
            for i, path in enumerate(pdfs[1:]):
                await one(path, Path(tmp) / str(i))
            r1 = resource.getrusage(resource.RUSAGE_SELF)
        return (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)

    print(json.dumps({"cpu_s": asyncio.run(run())}))


def cpu_s(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def start_to_ready(h, starts: int) -> None:
    """Process spawn to /readyz 200 (imports, Redis, /v1/models, MinerU loaded)."""
    times, cpus = [], []
    for _ in range(starts):
        t0 = time.monotonic()
        w = h.start_worker()
        times.append(time.monotonic() - t0)
        cpus.append(cpu_s(w.popen.pid))
        w.stop()
    print(f"start-to-ready: median {statistics.median(times):.2f} s wall, max {max(times):.2f} s, "
          f"{statistics.median(cpus):.2f} CPU-s, over {starts} starts (target < 5 s); "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


def cpu_comparison(h, tmp: Path, docs: int) -> None:
    """CPU-seconds per page: the worker vs MinerU's API in a loop, same PDFs, after a warm-up."""
    from pdf_fixtures import make_pdf

    from testsupport.worker import API_KEY

    pool = h.spec.worker_pool
    pdfs = [make_pdf(tmp / "cpu" / f"d{i}.pdf", 4, seed=i) for i in range(docs + 1)]
    pages = 4 * docs
    w = h.start_worker()
    h.wait_terminal(h.submit(pdfs[:1]), 120)
    c0 = cpu_s(w.popen.pid)
    h.wait_terminal(h.submit(pdfs[1:]), 900)
    worker_cpu = cpu_s(w.popen.pid) - c0
    w.stop()
    out = subprocess.run(
        [sys.executable, __file__, "--direct-child", f"http://127.0.0.1:{h.server_port}", API_KEY,
         str(pool.page_window), str(pool.concurrency_per_worker), *map(str, pdfs)],
        capture_output=True, text=True, check=True, cwd=ROOT)
    direct_cpu = json.loads(out.stdout.strip().splitlines()[-1])["cpu_s"]
    overhead = (worker_cpu - direct_cpu) / direct_cpu * 100
    print(f"CPU per page: worker {worker_cpu / pages:.3f} s, direct MinerU loop "
          f"{direct_cpu / pages:.3f} s over {pages} pages: overhead {overhead:+.1f} % (target < 5 %)")


def rss_growth(h, tmp: Path, rss_pages: int) -> None:
    """Worker RSS after 100 and after ``rss_pages`` pages of 4-page documents."""
    from pdf_fixtures import make_pdf

    w = h.start_worker()
    ids = h.submit([make_pdf(tmp / "rss" / f"d{i}.pdf", 4, seed=100 + i) for i in range(rss_pages // 4)])
    marks: dict[int, float] = {}
    proc = psutil.Process(w.popen.pid)
    deadline = time.monotonic() + 1800
    while len(marks) < 2 and time.monotonic() < deadline:
        done = sum(r.get("state") == "done" for r in h.states(ids).values()) * 4
        for mark in (100, rss_pages):
            if done >= mark and mark not in marks:
                marks[mark] = proc.memory_info().rss / 2**20
        time.sleep(0.2)
    growth = (marks[rss_pages] - marks[100]) / marks[100] * 100
    print(f"RSS: {marks[100]:.0f} MiB after 100 pages, {marks[rss_pages]:.0f} MiB after "
          f"{rss_pages} pages: growth {growth:+.1f} % (target < 5 %)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=5, help="worker starts to time (0: skip)")
    parser.add_argument("--docs", type=int, default=15, help="4-page documents for the CPU comparison (0: skip)")
    parser.add_argument("--rss-pages", type=int, default=500, help="pages for the RSS check (0: skip)")
    parser.add_argument("--direct-child", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.direct_child is not None:
        url, key, window, conc, *pdfs = args.direct_child
        direct_loop(url, key, pdfs, int(window), int(conc))
        return

    from testsupport.worker import Harness

    tmp = Path(tempfile.mkdtemp(prefix="worker-bench-"))
    h = Harness(tmp / "h")
    try:
        h.start_redis()
        h.start_sim()
        if args.starts:
            start_to_ready(h, args.starts)
        if args.docs:
            cpu_comparison(h, tmp, args.docs)
        if args.rss_pages:
            rss_growth(h, tmp, args.rss_pages)
    finally:
        h.close()


if __name__ == "__main__":
    main()
