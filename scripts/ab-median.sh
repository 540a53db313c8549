#!/usr/bin/env bash
# Medians of A/B output: reads lines `LABEL: VALUE ...` on stdin (scripts/ab-serve.sh and
# scripts/ab-bench.sh print such lines; others are ignored) and prints, per label, the median
# VALUE and all the values it was taken from, in increasing order.
#
#   scripts/ab-serve.sh OLD NEW 5 | tee ab.txt; scripts/ab-median.sh < ab.txt
set -euo pipefail
awk -F': ' 'NF >= 2 && $2 ~ /^[0-9.]+/ { split($2, a, " "); print $1 "\t" a[1] }' |
  sort -t$'\t' -k1,1 -k2,2g |
  awk -F'\t' '{ values[$1] = values[$1] " " $2 }
    END {
      for (label in values) {
        count = split(values[label], v, " ")
        print label ": median " v[int((count + 1) / 2)] " of" values[label]
      }
    }' |
  sort
