#!/usr/bin/env python3
"""The kernels of whole-model forwards from an `ncu --csv --print-units base` log with gpu__time_duration.sum
and dram__bytes_read.sum: forwards are cut at each embedding kernel; for the first forward (the prefill) and
the last (a decode step) the kernel count and summed time, then the last forward's kernels by name (launches,
total and mean µs, DRAM MB read) and its first 24 kernels in launch order.

  step_kernels.py LOG.csv
"""
import csv
import re
import sys


def short_name(signature):
    """A kernel's name with its template arguments cut to their first 24 characters, no namespaces or
    parameter list: "skinny_gemm_kernel<1, 8, 0>"."""
    name = re.sub(r"^void ", "", signature)
    name = re.sub(r"[A-Za-z_]+::(<unnamed>::)?", "", name)
    name = name.split("(")[0]
    return re.sub(r"<(.{0,24}).*", r"<\1>", name)[:42]


def main():
    kernels = {}
    with open(sys.argv[1]) as f:
        head = None
        for r in csv.reader(line for line in f if line.startswith('"')):
            if r[0] == "ID":
                head = r
                continue
            d = dict(zip(head, r))
            k = kernels.setdefault(int(d["ID"]), {"name": short_name(d["Kernel Name"])})
            try:
                k[d["Metric Name"]] = float(d["Metric Value"].replace(",", ""))
            except ValueError:
                k[d["Metric Name"]] = 0.0
    order = [kernels[i] for i in sorted(kernels)]
    forwards, current = [], None
    for k in order:
        if "embedding" in k["name"]:
            current = []
            forwards.append(current)
        if current is not None:
            current.append(k)
    if not forwards:
        sys.exit(f"{sys.argv[1]}: no embedding kernel: no forward to cut (did ncu fail?)")
    us = lambda ks: sum(k.get("gpu__time_duration.sum", 0) for k in ks) / 1e3
    mb = lambda ks: sum(k.get("dram__bytes_read.sum", 0) for k in ks) / 1e6
    print(f"forwards {len(forwards)}; first: {len(forwards[0])} kernels, {us(forwards[0]):.1f} us; "
          f"last: {len(forwards[-1])} kernels, {us(forwards[-1]):.1f} us, {mb(forwards[-1]):.1f} MB read")
    step = forwards[-1]
    by = {}
    for k in step:
        by.setdefault(k["name"], []).append(k)
    print(f"{'kernel (last forward)':42} {'n':>4} {'total us':>9} {'mean us':>8} {'MB read':>8}")
    for name, ks in sorted(by.items(), key=lambda kv: -us(kv[1])):
        print(f"{name:42} {len(ks):4d} {us(ks):9.1f} {us(ks) / len(ks):8.2f} {mb(ks):8.2f}")
    print("first kernels of the last forward, in order:")
    for k in step[:24]:
        print(f"  {k['name']:42} {k.get('gpu__time_duration.sum', 0) / 1e3:8.2f} us {k.get('dram__bytes_read.sum', 0) / 1e6:8.2f} MB")


if __name__ == "__main__":
    main()
