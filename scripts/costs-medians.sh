#!/usr/bin/env bash
# Medians per (test, variant) of the output of scripts/get-p1-costs.sh (one or more runs, any
# rounds): requests/s, context switches, server and client CPU µs per request.
#   scripts/costs-medians.sh OUTPUT_FILE...
awk '
/^== round/ { t = $(NF-2) " " $(NF-1) " " $NF; next }
/ rps / { i = index($0, " rps "); v = substr($0, 1, i - 1); sub(/ +$/, "", v)
  n = split(substr($0, i), f, " +")
  for (j = 1; j <= n; j++) { if (f[j] == "rps") r = f[j+1]; if (f[j] == "cs/req") c = f[j+1]; if (f[j] == "us/req" && f[j-1] == "cpu" && f[j-2] != "client") s = f[j+1]; if (f[j] == "us/req" && f[j-2] == "client") k = f[j+1] }
  key = t " | " v; if (!(key in seen)) { order[++m] = key; seen[key] = 1 }
  R[key] = R[key] " " r; C[key] = C[key] " " c; S[key] = S[key] " " s; K[key] = K[key] " " k }
function med(list,   a, n, i, j, x) { n = split(list, a, " "); for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > x + 0; j--) a[j+1] = a[j]; a[j+1] = x } return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2 }
END { printf "%-58s %10s %7s %8s %8s\n", "test | variant (median of 3)", "rps", "cs/req", "srv us", "cli us"
  for (i = 1; i <= m; i++) { k = order[i]; printf "%-58s %10.0f %7.3f %8.2f %8.2f\n", k, med(R[k]), med(C[k]), med(S[k]), med(K[k]) } }' "$@"
