"""Whole-audit benchmark: `ksniff audit FILE --json OUT` against tshark's bare Kafka dissection.

Captures come from bench/gen_captures.py (recorded once into bench/out/, reused after). For each capture,
in one run and alternating so that cache and frequency effects hit both alike, N repetitions of

    ksniff audit FILE --json OUT
    tshark -r FILE -d tcp.port==9092,kafka -Y kafka -T fields -e kafka.api_key > /dev/null

then the median wall time of each, the median of the per-repetition ratios, and the peak RSS of each
child (from wait4's rusage, per process). `--live` replays captures onto loopback (top speed or
`--pps`) with tcpreplay while `ksniff live lo` runs, through the capture ring and through the recvfrom
loop alternating, and reports packets/s offered and captured, kernel drops and CPU. Run by hand as root:

    python bench/bench_audit.py [--repeat 3] [--captures bulk,txn,bulk1g] [--csv] [--parquet]
    python bench/bench_audit.py --live [--live-capture bulk1g,txn] [--repeat 3] [--pps N]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import gen_captures  # noqa: E402

KSNIFF = [sys.executable, "-m", "ksniff.cli"]
PORT = gen_captures.PORT


def timed(cmd: list[str], stdout=subprocess.DEVNULL, env: dict | None = None) -> tuple[float, float, float]:
    """(wall seconds, peak RSS in MiB, CPU seconds) of one child process. CPU time (user + system) is
    reported beside wall time because it holds steadier when other work shares the machine.

    Linux carries a parent's peak RSS across fork and exec into the child's ru_maxrss (as a maximum, not
    a sum): this script stays near 15 MiB, well below what it measures, so the children's peaks stand."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE, cwd=BENCH.parent, env=env)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode not in (0, 1):  # 1: ksniff found something, still a complete run
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}): {err.strip()[-2000:]}")
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def ksniff_cmd(path: Path, out: Path, extra: list[str]) -> list[str]:
    return [*KSNIFF, "audit", str(path), "--json", str(out), "--quiet", *extra]


def tshark_cmd(path: Path) -> list[str]:
    return [
        "tshark",
        "-n",
        "-r",
        str(path),
        "-d",
        f"tcp.port=={PORT},kafka",
        "-Y",
        "kafka",
        "-T",
        "fields",
        "-e",
        "kafka.api_key",
    ]


PURE_ENV = {**os.environ, "KSNIFF_PURE_PYTHON": "1"}


def warm(cmd: list[str], env: dict | None = None) -> None:
    """One run first, that may write bytecode: a user's ksniff that has run once has kept the code it
    generates for the classes and messages it met (ksniff.common.codegen, beside its modules' bytecode);
    with PYTHONDONTWRITEBYTECODE in the environment, every timed run would compile it again."""
    env = {k: v for k, v in (env or os.environ).items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(cmd, cwd=BENCH.parent, env=env, capture_output=True, check=False)


def bench_file(
    name: str, repeat: int, extra: list[str], tmp: Path, pure: bool = False, cat: bool = False
) -> dict:
    """With `pure`, ksniff's pure-Python capture walk runs too (KSNIFF_PURE_PYTHON=1), alternating with the
    others; with `cat`, so does `cat FILE > /dev/null` (reading the file from the page cache)."""
    path = gen_captures.ensure(name)
    out = tmp / f"{name}.json"
    warm(ksniff_cmd(path, out, extra))
    if pure:
        warm(ksniff_cmd(path, out, extra), PURE_ENV)
    ours, theirs, ratios, ours_rss, theirs_rss, cpu_ratios = [], [], [], [], [], []
    cpus, pure_cpus, pure_walls, pure_ratios, cats, cat_ratios = [], [], [], [], [], []
    for _ in range(repeat):
        t_ours, rss, cpu = timed(ksniff_cmd(path, out, extra))
        t_theirs, rss_t, cpu_t = timed(tshark_cmd(path))
        ours.append(t_ours)
        theirs.append(t_theirs)
        ratios.append(t_ours / t_theirs)
        cpu_ratios.append(cpu / cpu_t)
        cpus.append(cpu)
        ours_rss.append(rss)
        theirs_rss.append(rss_t)
        if pure:
            t_pure, _rss, cpu_p = timed(ksniff_cmd(path, out, extra), env=PURE_ENV)
            pure_walls.append(t_pure)
            pure_cpus.append(cpu_p)
            pure_ratios.append(cpu_p / cpu_t)
        if cat:
            t_cat, _rss, _cpu = timed(["cat", str(path)])
            cats.append(t_cat)
            cat_ratios.append(t_ours / t_cat)
    doc = json.loads(out.read_text())
    more = {}
    if pure:
        more.update(
            pure_s=statistics.median(pure_walls),
            pure_cpu_s=statistics.median(pure_cpus),
            pure_cpu_ratio=statistics.median(pure_ratios),
        )
    if cat:
        more.update(cat_s=statistics.median(cats), cat_ratio=statistics.median(cat_ratios))
    return {
        **more,
        "ksniff_cpu_s": statistics.median(cpus),
        "capture": name,
        "mb": path.stat().st_size / 1e6,
        "packets": doc["capture"]["packets"],
        "exchanges": doc["decode"]["exchanges"],
        "gaps": doc["capture"]["gaps"],
        "findings": len(doc["findings"]),
        "ksniff_s": statistics.median(ours),
        "tshark_s": statistics.median(theirs),
        "ratio": statistics.median(ratios),
        "cpu_ratio": statistics.median(cpu_ratios),
        "ksniff_rss": max(ours_rss),
        "tshark_rss": max(theirs_rss),
    }


def _print_table(title: str, head: str, lines) -> None:
    """A title, a heading underlined, then one line per row."""
    print(title)
    print(head)
    print("-" * len(head))
    for line in lines:
        print(line)


def print_table(rows: list[dict], repeat: int, extra: list[str]) -> None:
    ours = " ".join(["ksniff audit", *extra, "--json"])
    _print_table(
        f"\n{ours} vs tshark -Y kafka -T fields, median of {repeat}",
        f"{'capture':8}{'MB':>7}{'packets':>10}{'exchanges':>10}{'ksniff s':>10}{'tshark s':>10}"
        f"{'ratio':>7}{'cpu ratio':>10}{'ksniff MiB':>12}{'tshark MiB':>12}",
        (
            f"{r['capture']:8}{r['mb']:7,.0f}{r['packets']:10,}{r['exchanges']:10,}{r['ksniff_s']:10.2f}"
            f"{r['tshark_s']:10.2f}{r['ratio']:6.2f}x{r['cpu_ratio']:9.2f}x{r['ksniff_rss']:12,.0f}"
            f"{r['tshark_rss']:12,.0f}"
            for r in rows
        ),
    )
    if any("pure_s" in r for r in rows):
        print("\nthe same with the pure-Python capture walk (KSNIFF_PURE_PYTHON=1), alternating in the run")
        print(
            f"{'capture':8}{'compiled CPU s':>15}{'pure CPU s':>11}{'gain':>7}{'pure s':>8}"
            f"{'pure cpu ratio':>15}"
        )
        for r in rows:
            if "pure_s" in r:
                print(
                    f"{r['capture']:8}{r['ksniff_cpu_s']:15.2f}{r['pure_cpu_s']:11.2f}"
                    f"{r['pure_cpu_s'] / r['ksniff_cpu_s']:6.2f}x{r['pure_s']:8.2f}"
                    f"{r['pure_cpu_ratio']:14.2f}x"
                )
    for r in rows:
        if "cat_s" in r:
            print(
                f"{r['capture']}: cat FILE > /dev/null {r['cat_s']:.2f} s; ksniff wall time "
                f"{r['cat_ratio']:.1f}x that"
            )
    for r in rows:
        if r["gaps"] or r["findings"]:
            print(f"note: {r['capture']}: {r['gaps']} gaps, {r['findings']} findings (expected none)")


# --------------------------------------------------------------------------- live


def bench_live(name: str, tmp: Path, loops: int, pps: int | None, ring: bool) -> dict:
    """Replay `name` onto loopback (top speed, or `pps`) while `ksniff live lo` audits it, reading through
    the TPACKET_V3 ring or (ring False: KSNIFF_LIVE_RING=0) one recvfrom per packet."""
    path = gen_captures.ensure(name)
    out = tmp / "live.json"
    # The replays' addresses are the recording's (10.231.0.0/24): other work on this machine's loopback
    # (brokers of test suites, on 127.0.0.1) stays out of the count.
    cmd = [*KSNIFF, "live", "lo", "--port", str(PORT), "--filter", "ip and not net 127.0.0.0/8"]
    cmd += ["--json", str(out)]
    env = {**os.environ, "KSNIFF_LIVE_RING": "1" if ring else "0"}
    load = os.getloadavg()[0]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=BENCH.parent, env=env
    )
    try:
        line = proc.stderr.readline()  # "capturing on lo": the socket is open
        if "capturing" not in line:
            sys.exit(f"ksniff live did not start: {line.strip()}")
        speed = [f"--pps={pps}"] if pps else ["--topspeed"]
        unique = ["--unique-ip"] if loops > 1 else []
        replay = subprocess.run(
            # -K: the capture read into memory first, so reading the file does not hold the rate down
            # --unique-ip: each loop's flows are new connections, not retransmissions of the first's
            ["tcpreplay", "-K", *speed, "-i", "lo", f"--loop={loops}", *unique, str(path)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        started = time.perf_counter()
        _pid, status, usage = os.wait4(proc.pid, 0)
        tail = time.perf_counter() - started
    err = proc.stderr.read()
    doc = json.loads(out.read_text())
    warnings = " ".join(doc.get("warnings", [])) + err
    if ring and "no capture ring" in warnings:
        sys.exit(f"the ring was not used: {warnings}")
    sent = int(re.search(r"Actual: (\d+) packets", replay).group(1))
    replay_s = float(re.search(r"packets \(\d+ bytes\) sent in ([\d.]+) seconds", replay).group(1))
    drops = re.search(r"the kernel dropped (\d+) packets", warnings)
    return {
        "mode": "ring" if ring else "recvfrom",
        "loops": loops,
        "sent": sent,
        "replay_s": replay_s,
        "pps": sent / replay_s,
        "captured": doc["capture"]["packets"],
        "kernel_drops": int(drops.group(1)) if drops else 0,
        "finish_s": tail,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "rss": usage.ru_maxrss / 1024,
        "exchanges": doc["decode"]["exchanges"],
        "gaps": doc["capture"]["gaps"],
        "load": load,
    }


def print_live(rows: list[dict], name: str, pps: int | None) -> None:
    speed = f"--pps={pps}" if pps else "--topspeed"
    loops = f" --loop={rows[0]['loops']} --unique-ip" if rows[0]["loops"] > 1 else ""
    _print_table(
        f"\nksniff live lo, tcpreplay -K {speed}{loops} -i lo replaying {name} "
        "(alternating; load: 1-min average)",
        f"{'read by':9}{'load':>5}{'sent':>10}{'offered/s':>11}{'captured':>10}{'drops':>10}{'missing':>8}"
        f"{'captured/s':>11}{'exchanges':>10}{'gaps':>8}{'CPU s':>7}{'µs/pkt':>7}{'tail s':>7}{'MiB':>6}",
        (
            f"{r['mode']:9}{r['load']:5.1f}{r['sent']:10,}{r['pps']:11,.0f}{r['captured']:10,}"
            f"{r['kernel_drops']:10,}{r['sent'] - r['captured'] - r['kernel_drops']:8,}"
            f"{r['captured'] / r['replay_s']:11,.0f}{r['exchanges']:10,}"
            f"{r['gaps']:8,}{r['cpu_s']:7.1f}{r['cpu_s'] * 1e6 / max(r['captured'], 1):7.1f}"
            f"{r['finish_s']:7.1f}{r['rss']:6,.0f}"
            for r in rows
        ),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--captures", default="bulk,txn,bulk1g", help="comma-separated (gen_captures.py)")
    parser.add_argument("--csv", action="store_true", help="also write every table (ksniff audit --csv DIR)")
    parser.add_argument(
        "--parquet",
        action="store_true",
        help="also write every table as Parquet (ksniff audit --parquet DIR)",
    )
    parser.add_argument(
        "--pure",
        action="store_true",
        help="also run ksniff with the pure-Python capture walk (KSNIFF_PURE_PYTHON=1)",
    )
    parser.add_argument("--cat", action="store_true", help="also time cat FILE > /dev/null (the page cache)")
    parser.add_argument("--live", action="store_true", help="only the live benchmark")
    parser.add_argument("--live-capture", default="bulk", help="comma-separated (gen_captures.py)")
    parser.add_argument(
        "--live-modes",
        default="ring,recvfrom",
        help="how ksniff live reads, alternating: ring (TPACKET_V3), recvfrom (KSNIFF_LIVE_RING=0)",
    )
    parser.add_argument("--loops", type=int, default=1, help="tcpreplay --loop for --live")
    parser.add_argument("--pps", type=int, help="replay at this many packets/s (default: top speed)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (recording captures, live capture)")
    # A user's installed ksniff has its bytecode: without it (PYTHONDONTWRITEBYTECODE in the environment,
    # a fresh tree) every run would compile every module again, a few tenths of a second.
    subprocess.run([sys.executable, "-m", "compileall", "-q", "ksniff"], cwd=BENCH.parent, check=True)
    which = "from ksniff.capture import compiled; print(compiled.engine_name())"
    walk = subprocess.run(
        [sys.executable, "-c", which], cwd=BENCH.parent, capture_output=True, text=True, check=True
    ).stdout.strip()
    print(f"capture walk: {walk}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="ksniff-bench-") as tmp_name:
        tmp = Path(tmp_name)
        if args.live:
            modes = [m == "ring" for m in args.live_modes.split(",")]
            for name in args.live_capture.split(","):
                rows = []
                for _ in range(args.repeat):
                    for ring in modes:
                        rows.append(bench_live(name, tmp, args.loops, args.pps, ring))
                print_live(rows, name, args.pps)
            return
        extra = (["--csv", str(tmp / "csv")] if args.csv else []) + (
            ["--parquet", str(tmp / "parquet")] if args.parquet else []
        )
        rows = []
        for name in args.captures.split(","):
            rows.append(bench_file(name, args.repeat, extra, tmp, args.pure, args.cat))
            print(f"{name}: done", file=sys.stderr)
        print_table(rows, args.repeat, extra[:1])


if __name__ == "__main__":
    main()
