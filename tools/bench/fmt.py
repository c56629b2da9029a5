"""Numbers and text in the bench's tables."""

import statistics


def short(s, n=70):
    s = " ".join(s.split())
    return s if len(s) <= n else s[:n - 1] + "…"


def fmt_rate(v):
    if v is None:
        return "-"
    if v >= 100:
        return "{:,.0f}".format(v)
    return "%.1f" % v


def fmt_runs(rates):
    if not rates:
        return "-"
    med = statistics.median(rates)
    if len(rates) == 1:
        return fmt_rate(med)
    return "%s (%s–%s)" % (fmt_rate(med), fmt_rate(min(rates)), fmt_rate(max(rates)))


def fmt_bytes(v):
    if v is None:
        return "-"
    return "{:,}".format(int(round(v)))


def fmt_ratio(a, b):
    if a is None or b is None:
        return "-"
    if b == 0:
        return "0/0" if a == 0 else "∞"
    r = a / b
    return "%.2f×" % r if r < 10 else "%.0f×" % r
