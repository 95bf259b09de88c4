#!/usr/bin/env python3
"""Plots collective-bench output: bus bandwidth and time against size.

    python3 bench/plot.py [-o OUTDIR] [--title T] [--label L ...] [--group G]
                          [--match REGEX] [--placement both|out|in] FILE...

Reads one or more collective-bench outputs (text files; none or "-" reads
stdin), such as the logs under tools/gpu-lab/results/. Each table (the rows
after a "# collective-bench: ..." header line) is one series, so a file that
holds the in-process baseline and the same ops through the daemon, each under
its "## " section, gives one line per run on the same axes. Rows it does not
recognise are skipped; a checked sweep and a timing sweep of the same run
(same section and description, disjoint sizes) join into one line.

Writes PNGs to OUTDIR (default "."), one set per op and rank count
(--group op-ranks, the default), per op (--group op) or for everything
(--group all), and prints their paths:
  PREFIX_busbw.png  bus bandwidth (GB/s) against size (log2 axis)
  PREFIX_time.png   time per op (us) against size
  PREFIX_pct.png    share of the copy ceiling (least traffic, %) against size,
                    where the output has the ltbw / % columns
Solid lines are out of place, dashed in place (--placement picks one).
Series labels come from each table's "# collective-bench:" header, else its
"## " section, else the file's first "# " comment, else the file name;
--label names the files (one per FILE, in order) and prefixes their series.
Exit status: 1 when no data rows are found (with a message), 2 when a file
cannot be read, 3 when matplotlib cannot be imported.
"""

import argparse
import os
import re
import sys

# A data row: size count type redop, then per placement (out of place, in
# place) time(us) algbw busbw #wrong [ltbw %].
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([A-Za-z][\w.]*)\s+([A-Za-z]\w*)\s+(.*)$")
HEADER = re.compile(r"^#\s*collective-bench:\s*(.*)$")
SECTION = re.compile(r"^##\s+(.*\S)\s*$")
FOOTER = re.compile(r"^#\s*(Out of bounds values|Avg bus bandwidth)")
COMMENT = re.compile(r"^#\s+(.*\S)\s*$")  # other "# " lines: the first one names header-less tables
NOT_A_NAME = re.compile(r"(size\b|least-traffic|memory ceilings|copy bytes)")


class Series:
    def __init__(self, source, file_label, section, header):
        self.source = source
        self.file_label = file_label
        self.section = section
        self.header = header  # text after "collective-bench:", or None
        self.label = None
        self.named = False  # --label given for its file
        self.op = None
        self.ranks = None
        self.rows = []  # (size, [out of place, in place]), each a dict time/algbw/busbw/wrong/ltbw/pct
        if header:
            m = re.match(r"(all_reduce|all_gather)\b", header)
            self.op = m.group(1) if m else None
            m = re.search(r"(\d+) virtual ranks|of (\d+) ranks", header)
            if m:
                self.ranks = int(m.group(1) or m.group(2))

    def has_pct(self):
        return any(p.get("pct") is not None for _, places in self.rows for p in places)

    def short_label(self):
        """A compact label from the collective-bench header, else the section or file."""
        if not self.header:
            return self.section or self.file_label
        desc, _, params = self.header.partition(";")
        desc = re.sub(r"^(all_reduce|all_gather),\s*", "", desc)
        desc = re.sub(r"in-process baseline:\s*(\d+) virtual ranks on one GPU,\s*\d+ blocks per rank,\s*",
                      r"in-process, \1 ranks, ", desc)
        desc = re.sub(r"through collectived:\s*(\d+) of (\d+) ranks in this process,\s*",
                      lambda m: "daemon, %s ranks%s, " % (m.group(2), "" if m.group(1) == m.group(2)
                                                           else " (1 per process)"), desc)
        desc = desc.replace("zero-copy (symmetric heap)", "zero-copy heap")
        desc = desc.replace("staged (cudaMalloc buffers)", "staged")
        desc = desc.replace("zero-copy (registered cuMem buffers)", "registered")
        extras = []
        m = re.search(r"algo (\S+?),", params)
        if m and m.group(1) != "auto":
            extras.append(m.group(1))
        m = re.search(r"graph (\d+)", params)
        if m:
            extras.append("graph-replayed" if int(m.group(1)) > 0 else "eager")
        return ", ".join([desc.strip().rstrip(",")] + extras)


def parse_numbers(text):
    out = []
    for tok in text.split():
        try:
            out.append(float(tok))
        except ValueError:
            return None
    return out


def split_placements(nums):
    """Out-of-place and in-place columns: 4 (time algbw busbw #wrong) or 6 (+ ltbw %) each."""
    if len(nums) == 12:
        width = 6
    elif len(nums) == 8:
        width = 4
    else:
        return None
    places = []
    for i in range(2):
        c = nums[i * width:(i + 1) * width]
        places.append({"time": c[0], "algbw": c[1], "busbw": c[2], "wrong": c[3],
                       "ltbw": c[4] if width == 6 else None, "pct": c[5] if width == 6 else None})
    return places


def parse(lines, source, file_label):
    """Returns the series (tables with at least one row) found in lines."""
    series = []
    section = None
    current = None
    comment = None

    def close():
        nonlocal current
        if current is not None and current.rows:
            series.append(current)
        current = None

    for line in lines:
        line = line.rstrip("\n")
        m = SECTION.match(line)
        if m:
            close()
            section = m.group(1)
            continue
        m = HEADER.match(line)
        if m:
            close()
            current = Series(source, file_label, section, m.group(1).strip())
            continue
        if FOOTER.match(line):
            close()
            continue
        m = ROW.match(line)
        if not m:
            c = COMMENT.match(line)
            if c and comment is None and not NOT_A_NAME.match(c.group(1)):
                comment = c.group(1)
            continue
        nums = parse_numbers(m.group(5))
        places = split_placements(nums) if nums is not None else None
        if places is None:
            continue
        if current is None:  # rows without a collective-bench header
            current = Series(source, file_label, section or comment, None)
        current.rows.append((int(m.group(1)), places))
    close()
    return series


def human_size(x, _pos=None):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if x >= scale:
            v = x / scale
            return ("%d%s" % (v, unit)) if abs(v - round(v)) < 1e-9 else ("%.3g%s" % (v, unit))
    return "%d" % x


def safe_name(text):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "plot"


def read_series(args, files):
    series = []
    for i, path in enumerate(files):
        default_label = "stdin" if path == "-" else os.path.splitext(os.path.basename(path))[0]
        file_label = args.label[i] if i < len(args.label) else default_label
        try:
            if path == "-":
                lines = sys.stdin.readlines()
            else:
                with open(path, encoding="utf-8", errors="replace") as f:
                    lines = f.readlines()
        except OSError as e:
            print("plot.py: cannot read %s: %s" % (path, e), file=sys.stderr)
            return None
        found = parse(lines, path, file_label)
        if not found and len(files) > 1:
            print("plot.py: %s: no collective-bench data rows" % path, file=sys.stderr)
        for s in found:
            s.named = i < len(args.label)
        if len(found) == 1 and found[0].named:
            found[0].label = file_label
        series.extend(found)
    return series


def merge_split_runs(series):
    """Joins consecutive tables of one run split over sizes (a checked sweep, then a timing sweep)."""
    merged = []
    for s in series:
        prev = merged[-1] if merged else None
        if (prev is not None and prev.source == s.source and prev.section == s.section
                and prev.label is None and s.label is None and prev.short_label() == s.short_label()
                and not {size for size, _ in prev.rows} & {size for size, _ in s.rows}):
            prev.rows.extend(s.rows)
        else:
            merged.append(s)
    return merged


def distinct_parts(texts):
    """What tells texts apart: each without the clauses they all start and end with."""
    seps = (", ", "; ", ": ")
    pre = os.path.commonprefix(texts)
    pre = pre[:max([pre.rfind(x) + len(x) for x in seps if x in pre] or [0])]
    suf = os.path.commonprefix([t[::-1] for t in texts])[::-1]
    suf = suf[min([suf.find(x) for x in seps if x in suf] or [len(suf)]):]
    out = []
    for t in texts:
        mid = t[len(pre):len(t) - len(suf)] if len(pre) + len(suf) < len(t) else ""
        out.append(mid.strip(" ,;:") or t)
    return out


def group_series(series, how):
    groups = {}
    for s in series:
        if how == "all":
            key = ("all",)
        elif how == "op":
            key = (s.op or "collective",)
        else:
            key = (s.op or "collective", s.ranks)
        groups.setdefault(key, []).append(s)
    for members in groups.values():  # the same label twice on one axes: say which "## " section
        twins = {}
        for s in members:
            twins.setdefault(s.label, []).append(s)
        for same in twins.values():
            wheres = [s.section or s.file_label for s in same]
            if len(same) < 2 or len(set(wheres)) < 2:
                continue
            for s, where in zip(same, distinct_parts(wheres)):
                s.label += " [%s]" % (where if len(where) <= 60 else where[:57] + "...")
        seen = {}
        for s in members:
            seen[s.label] = seen.get(s.label, 0) + 1
            if seen[s.label] > 1:
                s.label += " #%d" % seen[s.label]
    return groups


def main(argv):
    ap = argparse.ArgumentParser(description="Plot collective-bench output (bus bandwidth and time against size).")
    ap.add_argument("files", nargs="*", metavar="FILE", help="collective-bench outputs; none or - reads stdin")
    ap.add_argument("-o", "--outdir", default=".", help="where the PNGs go (default .)")
    ap.add_argument("--title", help="title prefix for every plot")
    ap.add_argument("--label", action="append", default=[], help="label for the next FILE, in order (repeatable)")
    ap.add_argument("--group", choices=("op-ranks", "op", "all"), default="op-ranks",
                    help="which series share axes (default: one set of plots per op and rank count)")
    ap.add_argument("--match", metavar="REGEX",
                    help="plot only the series whose label or \"## \" section matches REGEX")
    ap.add_argument("--placement", choices=("both", "out", "in"), default="both",
                    help="out of place (solid), in place (dashed), or both")
    args = ap.parse_args(argv)

    files = args.files or ["-"]
    if len(args.label) > len(files):
        ap.error("more --label than FILEs")
    series = read_series(args, files)
    if series is None:
        return 2
    if not series:
        print("plot.py: no collective-bench data rows found in %s (expected rows of 'size count type redop "
              "time algbw busbw #wrong [ltbw %%]' for out of place and in place)" % ", ".join(files),
              file=sys.stderr)
        return 1
    series = merge_split_runs(series)
    multi_file = len(files) > 1
    for s in series:
        if s.label is None:
            s.label = ("%s: %s" % (s.file_label, s.short_label())) if multi_file or s.named else s.short_label()
    if args.match:
        pattern = re.compile(args.match)
        series = [s for s in series if pattern.search(s.label) or (s.section and pattern.search(s.section))]
        if not series:
            print("plot.py: no series matches %r" % args.match, file=sys.stderr)
            return 1
    for s in series:
        bad = sum(p["wrong"] for _, places in s.rows for p in places)
        if bad:
            print("plot.py: warning: %s: %s has %d wrong elements" % (s.source, s.label, bad), file=sys.stderr)

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter, NullLocator
    except ImportError as e:
        print("plot.py: matplotlib is not importable (%s): apt-get install python3-matplotlib" % e,
              file=sys.stderr)
        return 3

    os.makedirs(args.outdir, exist_ok=True)
    metrics = [("busbw", "bus bandwidth (GB/s)"),
               ("time", "time per op (us)"),
               ("pct", "share of the copy ceiling, least traffic (%)")]
    placements = {"both": (0, 1), "out": (0,), "in": (1,)}[args.placement]
    styles = {0: "-", 1: "--"}
    note = {"both": "solid: out of place, dashed: in place", "out": "out of place", "in": "in place"}[args.placement]
    written = []
    for key, members in group_series(series, args.group).items():
        prefix = key[0]
        what = key[0] if key[0] != "all" else "collectives"
        if len(key) > 1 and key[1] is not None:
            prefix += "_%dranks" % key[1]
            what += ", %d ranks" % key[1]
        for field, ylabel in metrics:
            if field == "pct" and not any(s.has_pct() for s in members):
                continue
            fig, ax = plt.subplots(figsize=(10, 6))
            colors = plt.get_cmap("tab10" if len(members) <= 10 else "tab20").colors
            markers = "os^vDx"
            sizes = set()
            for idx, s in enumerate(members):
                color = colors[idx % len(colors)]
                marker = markers[(idx // len(colors)) % len(markers)]
                for pl in placements:
                    pts = [(size, places[pl][field]) for size, places in s.rows
                           if places[pl].get(field) is not None]
                    if not pts:
                        continue
                    xs, ys = zip(*sorted(pts))
                    sizes.update(xs)
                    ax.plot(xs, ys, styles[pl], marker=marker, markersize=3, color=color,
                            label=s.label if pl == placements[0] else None)
            if not sizes:
                plt.close(fig)
                continue
            ax.set_xscale("log", base=2)
            lo, hi = min(sizes).bit_length() - 1, max(sizes).bit_length() - 1
            stride = max(1, -(-(hi - lo + 1) // 14))  # at most 14 labelled powers of two
            ax.set_xticks([1 << k for k in range(lo, hi + 1, stride)])
            ax.xaxis.set_minor_locator(NullLocator())
            ax.xaxis.set_major_formatter(FuncFormatter(human_size))
            if field == "time":
                ax.set_yscale("log")
            if field == "pct":
                ax.axhline(100, color="grey", linewidth=0.8, linestyle=":")
                ax.set_ylim(bottom=0)
            ax.set_xlabel("size (bytes; all-gather: total output)")
            ax.set_ylabel(ylabel)
            title = "%s: %s" % (args.title, what) if args.title else what
            ax.set_title("%s\n%s" % (title, note), fontsize=10)
            ax.grid(True, which="major", alpha=0.3)
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
            out = os.path.join(args.outdir, "%s_%s.png" % (safe_name(prefix), field))
            fig.savefig(out, dpi=110, bbox_inches="tight")
            plt.close(fig)
            written.append(out)
    if not written:
        print("plot.py: nothing to plot", file=sys.stderr)
        return 1
    for out in written:
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
