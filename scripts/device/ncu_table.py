#!/usr/bin/env python3
"""One line per kernel of an `ncu --csv --print-units base` metrics log: time, DRAM bytes read (and the rate)
and written, and where the log has them the L2 hit rate, the SM clock, the tensor pipe's share of the
elapsed cycles and the L2 sectors; then the sum of the times. Values ncu could not
collect ("n/a") count as 0.

  ncu_table.py LOG.csv
"""
import csv
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    rows, head = {}, None
    with open(sys.argv[1]) as f:
        for r in csv.reader(line for line in f if line.startswith('"')):
            if r[0] == "ID":
                head = r
                continue
            if head is None:
                sys.exit(f"{sys.argv[1]}: no header row (did ncu fail? see its output)")
            d = dict(zip(head, r))
            k = rows.setdefault(int(d["ID"]), {"name": d["Kernel Name"][:44]})
            k[d["Metric Name"]] = number(d["Metric Value"])
    if head is None:
        sys.exit(f"{sys.argv[1]}: no metrics (did ncu fail? see its output)")
    total = 0.0
    for i in sorted(rows):
        k = rows[i]
        us = k.get("gpu__time_duration.sum", 0) / 1e3
        total += us
        rd = k.get("dram__bytes_read.sum", 0) / 1e9
        line = (f"{i:3d} {k['name']:44s} {us:9.1f} us  read {rd:7.3f} GB ({rd / max(us, 1e-9) * 1e3:5.2f} TB/s)"
                f"  write {k.get('dram__bytes_write.sum', 0) / 1e9:6.3f} GB")
        if "lts__t_sector_hit_rate.pct" in k:
            line += f"  L2 hit {k['lts__t_sector_hit_rate.pct']:5.1f}%"
        if "sm__cycles_elapsed.avg.per_second" in k:
            line += f"  {k['sm__cycles_elapsed.avg.per_second'] / 1e9:4.2f} GHz"
        tensor = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed"
        if tensor in k:
            line += f"  tensor {k[tensor]:5.1f}%"
        if "lts__t_sectors.sum" in k:
            line += f"  L2 {k['lts__t_sectors.sum'] / 1e9:6.3f} G sectors"
        print(line)
    print(f"sum of the kernels above: {total:.1f} us")


if __name__ == "__main__":
    main()
