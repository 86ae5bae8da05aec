#!/usr/bin/env python3
"""Baseline for bench/csv_ingest.cc: pandas.read_csv on the same file, REPS timed repeats
after one untimed read (page cache warm on both sides). Two figures per repeat:
  read_csv   pandas.read_csv(path) alone (C engine, default dtypes: float64 numbers, object
             strings), the usual way a table is loaded;
  to_numpy   read_csv, then what fedmesh's ReadCsv also does: the label mapped to class
             indices, categorical columns one-hot encoded (pandas.get_dummies), and the
             features converted to one float32 array.
Prints one JSON line per figure, in the fields csv_ingest.cc prints.
  /usr/bin/python3 bench/csv_ingest.py FILE --label-column y [--categorical a,b] [--reps 5]
"""
import argparse
import json
import os
import statistics
import time

import numpy as np
import pandas as pd


def to_numpy(df, label, label_values, categorical):
    y = df[label]
    if label_values:
        y = y.map({v: i for i, v in enumerate(label_values)})
    y = y.to_numpy(dtype=np.int32)
    x = df.drop(columns=[label])
    if categorical:
        x = pd.get_dummies(x, columns=categorical, dtype=np.float32)
    return x.to_numpy(dtype=np.float32), y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--label-column", required=True)
    ap.add_argument("--label-values", default="")
    ap.add_argument("--categorical", default="")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    label_values = [v for v in args.label_values.split(",") if v]
    categorical = [c for c in args.categorical.split(",") if c]
    mb = os.path.getsize(args.path) / 1e6

    read_s, full_s = [], []
    rows = width = 0
    for r in range(-1, args.reps):
        t0 = time.perf_counter()
        df = pd.read_csv(args.path)
        t1 = time.perf_counter()
        x, y = to_numpy(df, args.label_column, label_values, categorical)
        t2 = time.perf_counter()
        rows, width = x.shape
        assert len(y) == rows
        if r >= 0:
            read_s.append(t1 - t0)
            full_s.append(t2 - t0)
        del df, x, y
    for impl, secs in (("pandas read_csv", read_s), ("pandas read_csv+to_numpy", full_s)):
        best, median = min(secs), statistics.median(secs)
        print(json.dumps({"impl": impl, "rows": rows, "features": width, "mb": round(mb, 1),
                          "reps": args.reps, "best_s": round(best, 4), "median_s": round(median, 4),
                          "rows_per_s": round(rows / best), "rows_per_s_median": round(rows / median),
                          "mb_per_s": round(mb / best, 1), "mb_per_s_median": round(mb / median, 1)},
                         separators=(",", ":")))


if __name__ == "__main__":
    main()
